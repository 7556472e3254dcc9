"""What the EP claims and refuses, routing by rows as the trace shows it, the control knob, and
whole-graph claims with the CPU EP fallback switched off."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import claimed, refusal_reasons
from qdq_models import QdqSpec, make_activations, single_group_model


def test_npuflow_is_listed_for_the_cpu_device(npuflow_devices):
    assert all(d.device.type.name == "CPU" for d in npuflow_devices)
    assert npuflow_devices[0].ep_vendor == "npuflow"


def test_scale_along_k_is_refused_and_runs_unchanged_on_cpu(sessions):
    spec = QdqSpec(k=256, n=128, per_channel=True, scale_axis=0, zp_w=0)
    path = sessions.save(single_group_model(spec))
    npu, records = sessions.npuflow(path)
    assert claimed(records) == 0
    assert refusal_reasons(records) == ["scale_along_k"]
    x = make_activations(spec, 32)
    np.testing.assert_array_equal(npu.run(None, {"x": x})[0],
                                  sessions.cpu(path).run(None, {"x": x})[0])


def test_qdq_knob_off_is_the_control_arm(sessions):
    spec = QdqSpec(k=256, n=128)
    path = sessions.save(single_group_model(spec))
    npu, records = sessions.npuflow(path, options={"qdq": "0"})
    assert claimed(records) == 0
    assert refusal_reasons(records) == ["disabled_by_knob"]
    x = make_activations(spec, 32)
    np.testing.assert_array_equal(npu.run(None, {"x": x})[0],
                                  sessions.cpu(path).run(None, {"x": x})[0])


@pytest.mark.parametrize("rows,line,absent", [
    (5, "npu_qdq_host_rows", "npu_qdq_device"),
    (16, "npu_qdq_device", "npu_qdq_host_rows"),
    (128, "npu_qdq_device", "npu_qdq_host_rows"),
])
def test_rows_route_between_host_loop_and_device(sessions, capfd, rows, line, absent):
    spec = QdqSpec(k=1024, n=1024, exact_arithmetic=True)
    path = sessions.save(single_group_model(spec))
    npu, _ = sessions.npuflow(path, options={"log": "trace", "device": "sim"})
    x = make_activations(spec, rows)
    np.testing.assert_array_equal(npu.run(None, {"x": x})[0],
                                  sessions.cpu(path).run(None, {"x": x})[0])
    err = capfd.readouterr().err
    assert f"{line} " in err and f"m={rows} k=1024 n=1024" in err, err[-2000:]
    assert absent not in err
    if line == "npu_qdq_host_rows":
        assert "min=16" in err


def test_min_rows_knob_moves_the_threshold(sessions, capfd):
    spec = QdqSpec(k=256, n=256)
    path = sessions.save(single_group_model(spec))
    npu, _ = sessions.npuflow(path, options={"log": "trace", "min_rows": "4", "device": "sim"})
    npu.run(None, {"x": make_activations(spec, 5)})
    err = capfd.readouterr().err
    assert "npu_qdq_device" in err and "npu_qdq_host_rows" not in err


@pytest.mark.parametrize("x_type", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_the_host_device_runs_every_row_count_on_its_own_kernels(sessions, capfd, x_type):
    """The host device has no launch to amortize: its oneDNN kernels beat the plain loop at one
    row too, so min_rows does not send small calls to the loop there (the session says so)."""
    spec = QdqSpec(k=512, n=256, x_type=x_type, per_channel=True, zp_x=3)
    path = sessions.save(single_group_model(spec))
    npu, records = sessions.npuflow(path, options={"log": "trace", "min_rows": "64"})
    assert claimed(records) == 1
    cpu = sessions.cpu(path)
    for rows in (1, 3, 8):
        x = make_activations(spec, rows, seed=rows)
        diff = np.abs(npu.run(None, {"x": x})[0].astype(int) - cpu.run(None, {"x": x})[0])
        assert diff.max() <= 1
    err = capfd.readouterr().err
    assert "min_rows=1," in err, err[-2000:]
    for rows in (1, 3, 8):
        assert re.search(rf"npu_qdq_device \S+ m={rows} k=512 n=256", err), err[-2000:]
    assert "npu_qdq_host_rows" not in err


def test_info_log_lists_claims_and_refusals(sessions, capfd):
    spec = QdqSpec(k=256, n=128, per_channel=True, scale_axis=0)
    path = sessions.save(single_group_model(spec))
    sessions.npuflow(path, options={"log": "info"})
    err = capfd.readouterr().err
    assert "claimed 0 of 1 QDQ MatMul groups" in err
    assert "refused scale_along_k x1" in err


def test_whole_graph_claimed_with_cpu_fallback_disabled(sessions):
    spec = QdqSpec(k=512, n=256, zp_x=-3, zp_y=4)
    path = sessions.save(single_group_model(spec))
    npu, records = sessions.npuflow(path, config={"session.disable_cpu_ep_fallback": "1"})
    assert claimed(records) == 1
    x = make_activations(spec, 32)
    diff = np.abs(npu.run(None, {"x": x})[0].astype(int) - sessions.cpu(path).run(None, {"x": x})[0])
    assert diff.max() <= 1


def test_fallback_switch_is_effective(sessions):
    # Control for the test above: an op npuflow does not claim makes the same setting fail.
    spec = QdqSpec(k=256, n=128, with_q=False)
    model = single_group_model(spec)
    model.graph.node.append(helper.make_node("Relu", ["y"], ["z"]))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["M", 128]))
    path = sessions.save(model)
    with pytest.raises(Exception):
        sessions.npuflow(path, config={"session.disable_cpu_ep_fallback": "1"})


def test_bad_knob_value_fails_ep_creation_with_its_name(sessions, capfd):
    # The EP refuses to be created; the Python binding then reports the error and retries the
    # session on the CPU EP alone (onnxruntime's own behaviour), so nothing is claimed.
    path = sessions.save(single_group_model(QdqSpec(k=64, n=32)))
    _, records = sessions.npuflow(path, options={"min_rows": "many"})
    assert records == []
    out = capfd.readouterr()
    assert "min_rows='many' is not valid: expected an integer" in out.out + out.err


def test_wrong_activation_shape_is_a_clear_error(sessions):
    spec = QdqSpec(k=64, n=32)
    model = single_group_model(spec)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "K"  # let a wrong K through
    path = sessions.save(model)
    npu, records = sessions.npuflow(path)
    assert claimed(records) == 1
    with pytest.raises(Exception, match="does not end in K=64"):
        npu.run(None, {"x": np.zeros((4, 48), dtype=np.int8)})

