"""The C++ CLI: `npuflow explain`, `demo` and `plan` load the EP through ONNX Runtime's C++ API
(RegisterExecutionProviderLibrary + AppendExecutionProvider_V2)."""
from __future__ import annotations

import re
import subprocess

import onnx
import pytest
from onnx import TensorProto, helper

from conftest import CLI
from gates import assert_every_call_on_the_device, parse_profile
from qdq_models import QdqSpec, demo_layer_model, single_group_model


def run_cli(*args):
    result = subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_explain_lists_the_demo_claims(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(demo_layer_model(rows=16), str(path))
    out = run_cli("explain", str(path))
    assert "7 of 7 QDQ MatMul groups claimed" in out
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert name in out


def test_explain_shows_refusals_by_reason(tmp_path):
    path = tmp_path / "refused.onnx"
    onnx.save(single_group_model(QdqSpec(k=64, n=32, scale_axis=0)), str(path))
    out = run_cli("explain", str(path), "--opt", "basic")
    assert "0 of 1 QDQ MatMul groups claimed" in out
    assert re.search(r"scale_along_k\s+1", out)


def test_explain_on_a_model_with_nothing_to_claim(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "plain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert "0 of 0 QDQ MatMul groups claimed" in run_cli("explain", str(path))


def assert_demo_lsb(out: str) -> None:
    """npuflow is within 1 LSB of the CPU EP's float path (the ONNX definition of the groups),
    and of the CPU EP at ORT_ENABLE_ALL wherever that one agrees with its own float path (its
    u8 x s8 kernels saturate on x86 without VNNI, which the demo says)."""
    worst = int(re.search(r"worst LSB difference \(int8 outputs, direct or dequantized\): (\d+)",
                          out).group(1))
    line = re.search(r"against the CPU EP's float path \(level disable\): (\d+) .*the CPU EP at "
                     r"this level is (\d+) LSB from it", out)
    assert line, out
    against_float, cpu_ep_own = int(line.group(1)), int(line.group(2))
    assert against_float <= 1
    assert worst <= 1 or (cpu_ep_own > 1 and "saturate" in out)


def test_demo_reports_claims_lsb_and_speed(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(demo_layer_model(rows=32), str(path))
    out = run_cli("demo", str(path), "--runs", "3")
    assert "QDQ MatMul groups claimed: 7 / 7" in out
    assert_demo_lsb(out)
    assert re.search(r"npuflow is [0-9.]+x the CPU EP", out)


def test_bad_model_path_is_a_clear_error():
    result = subprocess.run([str(CLI), "explain", "/nonexistent.onnx"], capture_output=True, text=True)
    assert result.returncode != 0 and "no such model" in result.stderr


def test_bad_environment_knob_fails_the_cpp_session(tmp_path):
    import os
    path = tmp_path / "one.onnx"
    onnx.save(single_group_model(QdqSpec(k=64, n=32)), str(path))
    env = dict(os.environ, NPUFLOW_MIN_ROWS="0")
    result = subprocess.run([str(CLI), "explain", str(path)], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    assert "NPUFLOW_MIN_ROWS='0' is not valid: expected 1 to 1048576" in result.stderr


def test_demo_model_lets_the_cpu_ep_use_its_best_kernels(tmp_path):
    # The demo and the benchmark compare against the CPU EP at its best: at ORT_ENABLE_ALL it must
    # turn all seven groups into its integer QLinearMatMul.
    import onnxruntime as ort
    path, optimized = tmp_path / "demo.onnx", tmp_path / "demo.opt.onnx"
    onnx.save(demo_layer_model(rows=16), str(path))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(optimized)
    so.log_severity_level = 3
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(str(optimized)).graph.node]
    assert ops.count("QLinearMatMul") == 7 and "MatMul" not in ops


def test_rocket_device_fails_the_cpp_session_clearly_without_librocketnpu(tmp_path):
    import os
    path = tmp_path / "one.onnx"
    onnx.save(single_group_model(QdqSpec(k=64, n=32)), str(path))
    env = dict(os.environ, NPUFLOW_DEVICE="rocket")
    result = subprocess.run([str(CLI), "explain", str(path)], capture_output=True, text=True, env=env)
    assert result.returncode != 0
    module = CLI.parent.parent / "lib" / "libnpuflow-device-rocket.so"
    missing = ("cannot open librocketnpu 'librocketnpu.so.0'" if module.exists()
               else "cannot load device module")
    assert f"device=rocket: {missing}" in result.stderr, result.stderr
    assert "no /dev/accel/accel0" in result.stderr


def test_demo_runs_on_the_simulator_with_a_profile(tmp_path):
    import os
    path = tmp_path / "demo.onnx"
    onnx.save(demo_layer_model(rows=32), str(path))
    env = dict(os.environ, NPUFLOW_DEVICE="sim", NPUFLOW_PROF="1")
    result = subprocess.run([str(CLI), "demo", str(path), "--runs", "2"], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_demo_lsb(result.stdout)
    assert_every_call_on_the_device(parse_profile(result.stderr))


def plan_json(path, *extra):
    import json
    return json.loads(run_cli("plan", str(path), "--json", "--runs", "1", *extra))


def test_plan_prices_every_claimed_gemm_of_the_demo(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(demo_layer_model(rows=64), str(path))
    plan = plan_json(path)
    assert len(plan["claimed"]) == 7
    assert {g["m"] for g in plan["claimed"]} == {64}
    shapes = sorted((g["k"], g["n"]) for g in plan["claimed"])
    assert shapes == sorted([(1024, 2048), (1024, 1024), (1024, 1024), (2048, 1024), (1024, 3072),
                             (1024, 3072), (3072, 1024)])
    assert plan["resident_bytes"] == sum(k * n for k, n in shapes)  # int8 weights
    assert plan["device_macs"] == 64 * sum(k * n for k, n in shapes)
    assert all(g["npu_ms"] > 0 and g["cpu_ms"] > 0 for g in plan["claimed"])
    assert plan["host_macs"] == 0
    assert plan["projected_speedup"] == pytest.approx(plan["board_cpu_only_ms"] / plan["board_with_npu_ms"],
                                                     rel=1e-5)
    assert plan["this_machine_cpu_ep_ms"] > 0


def test_plan_symbolic_rows_follow_the_rows_flag(tmp_path):
    path = tmp_path / "one.onnx"
    onnx.save(single_group_model(QdqSpec(k=1024, n=1024)), str(path))
    small, large = plan_json(path, "--rows", "16"), plan_json(path, "--rows", "512")
    assert small["claimed"][0]["m"] == 16 and large["claimed"][0]["m"] == 512
    assert large["npu_ms"] > small["npu_ms"]


def test_plan_on_a_model_with_nothing_to_claim(tmp_path):
    import numpy as np
    from onnx import numpy_helper
    weight = numpy_helper.from_array(np.ones((64, 32), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="float_mm")],
                              "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])],
                              [weight])
    path = tmp_path / "float.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    plan = plan_json(path)
    assert plan["claimed"] == [] and plan["device_macs"] == 0
    assert plan["host_macs"] == 8 * 64 * 32
    assert plan["projected_speedup"] == 1.0


def test_plan_plot_is_a_png(tmp_path):
    import struct
    path, png = tmp_path / "demo.onnx", tmp_path / "plan.png"
    onnx.save(demo_layer_model(rows=16), str(path))
    out = run_cli("plan", str(path), "--runs", "0", "--plot", str(png))
    assert "RK3588 projected" in out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 400 and height > 7 * 30  # one row per claimed subgraph
