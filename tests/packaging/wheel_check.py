"""Runs inside a fresh venv holding only the npuflow wheel and stock onnxruntime (test_wheel.py
copies it out of the source tree and starts it with `python -I`): the package's API on an
encoder-only model and a QDQ model. Prints one JSON object with what it measured.

    python -I wheel_check.py ENCODER.onnx QDQ.onnx SOURCE_ROOT BUILD_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort

import npuflow


def inputs_for(session, rng):
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in arg.shape]
        if arg.type == "tensor(float)":
            feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
        elif arg.type == "tensor(int8)":
            feeds[arg.name] = rng.integers(-128, 128, shape).astype(np.int8)
        else:
            raise SystemExit(f"wheel_check: input {arg.name} of type {arg.type}")
    return feeds


def compare(model, devices, knobs, no_cpu_fallback):
    """npuflow against the CPU EP with optimizations off (the float reference) on one input."""
    options = ort.SessionOptions()
    if no_cpu_fallback:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options.add_provider_for_devices(devices, knobs)
    npuflow_session = ort.InferenceSession(model, sess_options=options)
    reference_options = ort.SessionOptions()
    reference_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    cpu_session = ort.InferenceSession(model, sess_options=reference_options,
                                       providers=["CPUExecutionProvider"])
    feeds = inputs_for(cpu_session, np.random.default_rng(5))
    result = {"providers": npuflow_session.get_providers(), "outputs": {}}
    for expected, actual, arg in zip(cpu_session.run(None, feeds), npuflow_session.run(None, feeds),
                                     cpu_session.get_outputs()):
        if expected.dtype == np.int8:
            diff = np.abs(expected.astype(np.int32) - actual.astype(np.int32))
            result["outputs"][arg.name] = {"worst_lsb": int(diff.max()),
                                           "differing": int((diff != 0).sum())}
        else:
            e, a = expected.astype(np.float64).ravel(), actual.astype(np.float64).ravel()
            result["outputs"][arg.name] = {
                "cosine": float(e @ a / np.sqrt((e @ e) * (a @ a))),
                "relative_l2": float(np.linalg.norm(e - a) / np.linalg.norm(e)),
            }
    return result


def mapped_files():
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if line.split()[-1].startswith("/")})


def main():
    encoder, qdq, source_root, build_dir = sys.argv[1:5]
    devices = npuflow.register(ort)
    again = npuflow.register(ort)  # a second call registers nothing new
    report = {
        "version": npuflow.__version__,
        "onnxruntime": ort.__version__,
        "package_file": npuflow.__file__,
        "ep_library": npuflow.ep_library_path(),
        "ggml_backend": npuflow.ggml_backend_path(),
        "ep_names": [d.ep_name for d in devices],
        "ep_versions": [d.ep_metadata.get("version") for d in devices],
        "second_register": len(again),
        "sys_path": sys.path,
    }
    knobs = {"device": "host", "claim": "all"}
    report["encoder"] = compare(encoder, devices, knobs, no_cpu_fallback=True)
    report["qdq"] = compare(qdq, devices, knobs, no_cpu_fallback=False)
    report["explain_encoder"] = npuflow.explain(encoder, claim="all")
    report["explain_qdq"] = npuflow.explain(qdq, optimization="basic", claim="all")
    # The console script: the bundled CLI on this venv's onnxruntime.
    script = os.path.join(os.path.dirname(sys.executable), "npuflow")
    cli = lambda *args: subprocess.run([script, *args], check=True, capture_output=True,
                                       text=True).stdout
    report["cli_version"] = cli("--version").strip()
    report["cli_explain_encoder"] = json.loads(cli("explain", encoder, "--json", "--knob",
                                                   "claim=all"))
    report["cli_explain_qdq"] = json.loads(cli("explain", qdq, "--json", "--opt", "basic",
                                               "--knob", "claim=all"))
    report["from_source_tree"] = [path for path in mapped_files()
                                  if path.startswith((source_root, build_dir))]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
