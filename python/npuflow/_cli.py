"""The `npuflow` console script: runs the bundled CLI binary on this environment's onnxruntime."""

import os
import sys

from ._library import cli_path, onnxruntime_library


def main() -> None:
    binary = cli_path()
    environment = dict(os.environ)
    if "NPUFLOW_ORT_LIBRARY" not in environment:
        library = onnxruntime_library()
        if library is not None:
            environment["NPUFLOW_ORT_LIBRARY"] = library
    os.execve(binary, [binary, *sys.argv[1:]], environment)
