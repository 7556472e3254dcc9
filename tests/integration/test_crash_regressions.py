"""Regressions for the crashes and side effects of issue 9, each on a small valid-but-unusual model
built with onnx.helper: empty quantization parameters, K = 0, N = 0, and the caller's OpenMP state.

Every case runs in a child process (this file run as a script), so a crash (SIGSEGV, SIGFPE) fails
the test instead of killing pytest. The child runs the model on the CPU EP and with npuflow loaded,
and writes what each did; the parent asserts that npuflow behaves exactly like the CPU EP (same
outputs, or the same clean error) and that the refusal reason is in the EP's report.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import CLI, EP_LIBRARY, EP_NAME

CHILD_TIMEOUT_S = 300


def qdq_model(k: int, n: int, w_scales: int | None = None, x_scales: int | None = None,
              y_scales: int | None = None) -> onnx.ModelProto:
    """DQ(x) -> MatMul <- DQ(W) -> Q(y), int8 throughout. A scale count of None is a per-tensor
    scalar; an integer gives a 1-D scale and zero point of that length (0: empty) on axis 1."""

    def params(prefix, count, scale):
        if count is None:
            s, z = np.array(scale, np.float32), np.array(0, np.int8)
        else:
            s, z = np.full((count,), scale, np.float32), np.zeros((count,), np.int8)
        return [numpy_helper.from_array(s, f"{prefix}_scale"),
                numpy_helper.from_array(z, f"{prefix}_zero_point")]

    rng = np.random.default_rng(0)
    weight = rng.integers(-20, 21, size=(k, n)).astype(np.int8)
    inits = [numpy_helper.from_array(weight, "w"), *params("w", w_scales, 2.0 ** -6),
             *params("x", x_scales, 2.0 ** -5), *params("y", y_scales, 2.0 ** -2)]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zero_point"], ["x_dq"],
                         name="dq_x", axis=1),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zero_point"], ["w_dq"],
                         name="dq_w", axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y_float"], name="mm"),
        helper.make_node("QuantizeLinear", ["y_float", "y_scale", "y_zero_point"], ["y"],
                         name="q_y", axis=1),
    ]
    graph = helper.make_graph(nodes, "crash_case",
                              [helper.make_tensor_value_info("x", TensorProto.INT8, ["M", k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, ["M", n])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def run_child(tmp_path: Path, model: onnx.ModelProto, device: str, rows: int = 32,
              omp_threads: int = 0) -> dict:
    path = tmp_path / f"model-{device}.onnx"
    onnx.save(model, str(path))
    out_dir = tmp_path / f"out-{device}"
    out_dir.mkdir()
    args = {"model": str(path), "device": device, "rows": rows, "out": str(out_dir),
            "omp_threads": omp_threads}
    result = subprocess.run([sys.executable, __file__, json.dumps(args)], capture_output=True,
                            text=True, timeout=CHILD_TIMEOUT_S)
    if result.returncode < 0:
        pytest.fail(f"the child died with {signal.Signals(-result.returncode).name} on "
                    f"device={device}:\n{result.stderr[-3000:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads((out_dir / "result.json").read_text())
    outcome["stderr"] = result.stderr
    for arm in ("cpu", "npuflow"):
        file = out_dir / f"{arm}.npy"
        outcome[arm]["output"] = np.load(file) if file.exists() else None
    return outcome


def reasons(outcome) -> list[str]:
    return [r["reason"] for graph in outcome["npuflow"]["report"] for r in graph["refusals"]]


def assert_same_as_cpu(outcome):
    """npuflow with its refusals must do exactly what the CPU EP does: the same outputs, or an
    error at the same stage from the same ONNX Runtime kernel check."""
    cpu, npu = outcome["cpu"], outcome["npuflow"]
    assert npu["stage"] == cpu["stage"], (cpu, npu)
    if cpu["error"] is None:
        assert npu["error"] is None, npu["error"]
        assert npu["output"].shape == cpu["output"].shape
        np.testing.assert_array_equal(npu["output"], cpu["output"])
    else:
        check = re.search(r"scale must be [^\n]*", cpu["error"])
        assert check and check.group(0) in npu["error"], (cpu["error"], npu["error"])


DEVICES = ["host", "sim"]


@pytest.mark.parametrize("device", DEVICES)
def test_empty_weight_scale_is_refused_not_a_crash(tmp_path, device):
    outcome = run_child(tmp_path, qdq_model(64, 32, w_scales=0), device)
    assert outcome["cpu"]["error"] is not None  # the CPU EP's DequantizeLinear rejects it
    assert_same_as_cpu(outcome)
    assert reasons(outcome) == ["empty_quant_params"]


@pytest.mark.parametrize("device", DEVICES)
def test_weight_scale_count_neither_one_nor_n_is_refused(tmp_path, device):
    outcome = run_child(tmp_path, qdq_model(64, 32, w_scales=5), device)
    assert_same_as_cpu(outcome)
    assert reasons(outcome) == ["unsupported_scale_shape"]


@pytest.mark.parametrize("device", DEVICES)
def test_empty_activation_scale_is_refused(tmp_path, device):
    outcome = run_child(tmp_path, qdq_model(64, 32, x_scales=0), device)
    assert_same_as_cpu(outcome)
    assert reasons(outcome) == ["empty_quant_params"]


@pytest.mark.parametrize("device", DEVICES)
def test_empty_output_scale_is_refused(tmp_path, device):
    outcome = run_child(tmp_path, qdq_model(64, 32, y_scales=0), device)
    assert outcome["cpu"]["error"] is not None
    assert_same_as_cpu(outcome)
    assert reasons(outcome) == ["empty_quant_params"]


@pytest.mark.parametrize("device", DEVICES)
def test_k_zero_is_refused_and_runs_on_the_cpu_ep(tmp_path, device):
    outcome = run_child(tmp_path, qdq_model(0, 32), device)
    assert outcome["cpu"]["error"] is None and outcome["cpu"]["output"].shape == (32, 32)
    assert_same_as_cpu(outcome)
    assert reasons(outcome) == ["empty_weight"]


@pytest.mark.parametrize("device", DEVICES)
def test_n_zero_is_refused_and_runs_on_the_cpu_ep(tmp_path, device):
    outcome = run_child(tmp_path, qdq_model(64, 0), device)
    assert outcome["cpu"]["error"] is None and outcome["cpu"]["output"].shape == (32, 0)
    assert_same_as_cpu(outcome)
    assert reasons(outcome) == ["empty_weight"]


@pytest.mark.parametrize("case,kwargs", [("empty_scale", {"w_scales": 0}), ("k_zero", {"k": 0})])
def test_explain_survives_and_names_the_refusal(tmp_path, case, kwargs):
    shape = {"k": 64, "n": 32, **kwargs}
    path = tmp_path / f"{case}.onnx"
    onnx.save(qdq_model(**shape), str(path))
    result = subprocess.run([str(CLI), "explain", str(path)], capture_output=True, text=True,
                            timeout=CHILD_TIMEOUT_S)
    assert result.returncode == 0, (result.returncode, result.stderr[-3000:])
    assert "0 of 1 QDQ MatMul groups claimed" in result.stdout
    reason = "empty_quant_params" if case == "empty_scale" else "empty_weight"
    assert re.search(rf"{reason}\s+1", result.stdout), result.stdout


@pytest.mark.parametrize("device", DEVICES)
def test_a_run_leaves_the_callers_openmp_thread_count_alone(tmp_path, device):
    # 32 rows reach the device (min_rows 16); on host that is oneDNN under OpenMP.
    outcome = run_child(tmp_path, qdq_model(256, 256), device, omp_threads=2)
    assert outcome["npuflow"]["claims"] == 1
    assert_same_as_cpu(outcome)
    assert outcome["omp"]["path"], "npuflow loaded no OpenMP runtime"
    assert outcome["omp"]["before"] == 2
    assert outcome["omp"]["after_run"] == 2, outcome["omp"]


# ---- the child process ----------------------------------------------------------------------

def loaded_openmp_runtime() -> str | None:
    """The OpenMP runtime npuflow brought into this process, as a path ctypes can open again."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if re.search(r"/lib(g|i)?omp[^/]*\.so", path):
            return path
    return None


def child(args: dict) -> None:
    import ctypes

    import onnxruntime as ort

    out = Path(args["out"])
    rng = np.random.default_rng(1)
    k = onnx.load(args["model"]).graph.input[0].type.tensor_type.shape.dim[1].dim_value
    x = rng.integers(-20, 21, size=(args["rows"], k)).astype(np.int8)

    ort.register_execution_provider_library("npuflow", str(EP_LIBRARY))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    omp = {"path": loaded_openmp_runtime()}
    runtime = ctypes.CDLL(omp["path"]) if omp["path"] else None
    if runtime and args["omp_threads"]:
        runtime.omp_set_num_threads(args["omp_threads"])
        omp["before"] = runtime.omp_get_max_threads()

    def arm(name, make_options):
        record = {"stage": "create", "error": None}
        try:
            so = ort.SessionOptions()
            so.intra_op_num_threads = 2
            so.log_severity_level = 3
            make_options(so)
            session = ort.InferenceSession(args["model"], sess_options=so,
                                           providers=None if name == "npuflow" else ["CPUExecutionProvider"])
            record["stage"] = "run"
            y = session.run(None, {"x": x})[0]
            np.save(out / f"{name}.npy", y)
        except Exception as error:  # noqa: BLE001 - the message is the result
            record["error"] = str(error)
        return record

    report = out / "report.jsonl"
    result = {"cpu": arm("cpu", lambda so: None)}
    result["npuflow"] = arm("npuflow", lambda so: so.add_provider_for_devices(
        devices, {"device": args["device"], "report": str(report)}))
    if runtime and args["omp_threads"]:
        omp["after_run"] = runtime.omp_get_max_threads()
    records = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    result["npuflow"]["report"] = records
    result["npuflow"]["claims"] = sum(len(r["claims"]) for r in records)
    result["omp"] = omp
    (out / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    child(json.loads(sys.argv[1]))
