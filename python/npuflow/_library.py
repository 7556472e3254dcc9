"""Where the wheel's native files are: the plugin EP, the ggml backend and the CLI binary."""

from pathlib import Path

_ROOT = Path(__file__).resolve().parent


def _bundled(relative: str) -> str:
    path = _ROOT / relative
    if not path.is_file():
        raise FileNotFoundError(f"npuflow: {path} is missing from this installation")
    return str(path)


def ep_library_path() -> str:
    """The ONNX Runtime plugin EP, for ort.register_execution_provider_library(name, path)."""
    return _bundled("lib/libonnxruntime_npuflow.so")


def ggml_backend_path() -> str:
    """The ggml backend module, for GGML_BACKEND_PATH or ggml_backend_load(path). It is built
    against the ggml of llama.cpp as vendored by llama-cpp-python (see npuflow's README)."""
    return _bundled("lib/libggml-npuflow.so")


def cli_path() -> str:
    """The npuflow command's binary (the `npuflow` console script runs it)."""
    return _bundled("bin/npuflow")


def onnxruntime_library() -> str | None:
    """The libonnxruntime of the installed onnxruntime package, found without importing it
    (the CLI binary loads it at run time), or None."""
    from importlib.util import find_spec

    spec = find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidates = sorted((Path(location) / "capi").glob("libonnxruntime.so*"))
        if candidates:
            return str(candidates[-1])
    return None
