"""The EP inside the caller's ONNX Runtime: registration and the claim report."""

import functools
import json
import os
import subprocess
import tempfile

from ._library import cli_path, ep_library_path

EP_NAME = "NpuflowExecutionProvider"
REGISTRATION_NAME = "npuflow"
_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def _npuflow_devices(ort):
    return [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]


def register(ort):
    """Registers the plugin EP with the onnxruntime module `ort` (once per process) and returns
    its OrtEpDevice list, for SessionOptions.add_provider_for_devices(devices, knobs)."""
    if not hasattr(ort, "register_execution_provider_library"):
        raise RuntimeError(
            f"npuflow needs onnxruntime>=1.23 (plugin execution providers); this is "
            f"{getattr(ort, '__version__', 'unknown')}"
        )
    devices = _npuflow_devices(ort)
    if not devices:
        ort.register_execution_provider_library(REGISTRATION_NAME, ep_library_path())
        devices = _npuflow_devices(ort)
    if not devices:
        raise RuntimeError(f"onnxruntime {ort.__version__} lists no {EP_NAME} device")
    return devices


@functools.cache
def _knob_names():
    """The EP's knobs by short name, from the bundled CLI's table (the EP ignores unknown ones)."""
    table = subprocess.run([cli_path(), "knobs", "--markdown"], check=True, capture_output=True,
                           text=True).stdout
    return frozenset(row.split("|")[2].strip().strip("`") for row in table.splitlines()
                     if row.startswith("| `NPUFLOW_"))


def _option_text(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def explain(model_path, *, optimization="all", **knobs):
    """What npuflow claims in a model and why it refuses the rest: one dict per graph ONNX
    Runtime offered the EP (the records `npuflow explain --json` prints), read from a real
    session. `optimization` is ONNX Runtime's level (disable|basic|extended|all); other keywords
    are npuflow knobs by their short names (`npuflow knobs`), e.g. device="sim", claim="all"."""
    import onnxruntime as ort

    if optimization not in _LEVELS:
        raise ValueError(f"optimization must be one of {', '.join(_LEVELS)}, not {optimization!r}")
    if "report" in knobs:
        raise ValueError("explain() sets the report knob itself")
    unknown = sorted(set(knobs) - _knob_names())
    if unknown:
        raise ValueError(f"unknown npuflow knob(s) {', '.join(unknown)}; the knobs are "
                         f"{', '.join(sorted(_knob_names()))}")
    devices = register(ort)
    with tempfile.TemporaryDirectory(prefix="npuflow-explain-") as scratch:
        report = os.path.join(scratch, "report.jsonl")
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[optimization])
        provider_options = {name: _option_text(value) for name, value in knobs.items()}
        provider_options["report"] = report
        options.add_provider_for_devices(devices, provider_options)
        ort.InferenceSession(os.fspath(model_path), sess_options=options)
        if not os.path.exists(report):
            return []
        with open(report, encoding="utf-8") as lines:
            return [json.loads(line) for line in lines if line.strip()]
