"""Per-row activation scales in A8W8 QDQ groups (issue #13, item 4): the activation's
DequantizeLinear scales along a leading axis (s_x[m], zp_x[m]: the per-token quantization of LLM
QDQ exports and of seed 004's proof), as constants or as values computed at run time (dynamic
per-token quantization feeds them in), per tensor when that runtime scale is a scalar. The fused
group folds them into its exact epilogue: 0 LSB against the CPU EP where its float path is exact
(power-of-two scales, small magnitudes), at most 1 LSB on full-range random data, on host and on
sim with every call on the device. A scale along K cannot fold and is refused."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import claimed, refusal_reasons
from gates import assert_every_call_on_the_device, ended_session_profile
from qdq_models import ONNX_TYPE, QdqSpec, make_weights

DEVICES = {"host": {"device": "host"}, "sim": {"device": "sim", "min_rows": "1", "prof": "1"}}


def row_params(rng, count, exact, x_type):
    """Per-index scales and zero points: powers of two and mid-range zero points when exact."""
    if exact:
        scales = (2.0 ** -rng.integers(3, 8, size=count)).astype(np.float32)
        zps = rng.integers(-20, 21, size=count)
    else:
        scales = rng.uniform(0.005, 0.05, size=count).astype(np.float32)
        zps = rng.integers(-60, 61, size=count)
    if x_type == np.uint8:
        zps = zps + 128
    return scales, zps.astype(x_type)


def activations(rng, shape, zps_per_row, exact, x_type):
    info = np.iinfo(x_type)
    if exact:
        x = rng.integers(-15, 16, size=shape) + zps_per_row[..., None].astype(np.int64)
    else:
        x = rng.integers(info.min, info.max + 1, size=shape)
    return np.clip(x, info.min, info.max).astype(x_type)


def model(spec: QdqSpec, shape, axis, scales, zps, runtime=False, scalar_runtime=False):
    """DQ(x, s_x, zp_x, axis) -> MatMul <- DQ(W) -> Q: constants, or graph inputs when runtime."""
    w, w_scales, w_zp = make_weights(spec)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_scales, "w_scale"),
             numpy_helper.from_array(w_zp, "w_zp"),
             numpy_helper.from_array(np.array(2.0 ** -4 if spec.exact_arithmetic else 0.5,
                                              np.float32), "y_scale"),
             numpy_helper.from_array(np.array(spec.zp_y, np.int8), "y_zp")]
    inputs = [helper.make_tensor_value_info("x", ONNX_TYPE[spec.x_type], list(shape))]
    if runtime:
        scale_shape = [] if scalar_runtime else [len(scales)]
        inputs += [helper.make_tensor_value_info("x_scale", TensorProto.FLOAT, scale_shape),
                   helper.make_tensor_value_info("x_zp", ONNX_TYPE[spec.x_type], scale_shape)]
    else:
        inits += [numpy_helper.from_array(scales, "x_scale"), numpy_helper.from_array(zps, "x_zp")]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zp"], ["x_dq"], axis=axis),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["w_dq"], axis=1),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y_float"]),
        helper.make_node("QuantizeLinear", ["y_float", "y_scale", "y_zp"], ["y"]),
    ]
    out_shape = list(shape[:-1]) + [spec.n]
    graph = helper.make_graph(nodes, "row_scales", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT8, out_shape)],
                              inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


# (activation shape, axis): per row of a 2-D activation, per token of [1, T, K], per batch of
# [B, T, K] (the index advances every T rows), per token of [B, T, K] along axis 1.
LAYOUTS = {"rows": ((37, 64), 0), "tokens": ((1, 20, 64), 1), "batches": ((3, 8, 64), 0),
           "tokens_of_a_batch": ((2, 12, 64), 1)}


def feeds_for(spec, shape, axis, exact, seed, runtime):
    rng = np.random.default_rng(seed)
    scales, zps = row_params(rng, shape[axis], exact, spec.x_type)
    # zp per element of the row axis, broadcast over the activation's leading dims
    zp_b = zps.reshape([shape[axis] if i == axis else 1 for i in range(len(shape) - 1)])
    zp_full = np.broadcast_to(zp_b, shape[:-1])
    x = activations(rng, shape, zp_full, exact, spec.x_type)
    feeds = {"x": x}
    if runtime:
        feeds.update(x_scale=scales, x_zp=zps)
    return scales, zps, feeds


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("runtime", [False, True], ids=["constant", "runtime"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_zero_lsb_with_per_row_scales(sessions, layout, runtime, device, capfd):
    shape, axis = LAYOUTS[layout]
    spec = QdqSpec(k=64, n=96, exact_arithmetic=True, per_channel=True, zp_w=-3, zp_y=-5,
                   seed=len(layout))
    scales, zps, feeds = feeds_for(spec, shape, axis, True, 7, runtime)
    path = sessions.save(model(spec, shape, axis, scales, zps, runtime=runtime))
    npu, records = sessions.npuflow(path, "all", DEVICES[device])
    assert claimed(records) == 1, records
    [expected] = sessions.cpu(path, "all").run(None, feeds)
    [actual] = npu.run(None, feeds)
    del npu
    if device == "sim":
        assert_every_call_on_the_device(ended_session_profile(capfd))
    assert actual.shape == expected.shape
    diff = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert diff.max() == 0, f"{int((diff > 0).sum())} values differ"
    assert len(np.unique(expected)) > 8  # the output carries information


def test_the_row_scales_are_applied_per_row(sessions):
    """The same group with every row's scale replaced by the first row's gives another result:
    a kernel that read one scale for all rows would pass neither."""
    shape, axis = LAYOUTS["rows"]
    spec = QdqSpec(k=64, n=96, exact_arithmetic=True, per_channel=True, zp_y=-5, seed=3)
    scales, zps, feeds = feeds_for(spec, shape, axis, True, 7, True)
    path = sessions.save(model(spec, shape, axis, scales, zps, runtime=True))
    npu, _ = sessions.npuflow(path, "all", {"device": "host"})
    [per_row] = npu.run(None, feeds)
    flat = dict(feeds, x_scale=np.full_like(scales, scales[0]), x_zp=np.full_like(zps, zps[0]))
    [one_scale] = npu.run(None, flat)
    [reference] = sessions.cpu(path, "all").run(None, flat)
    np.testing.assert_array_equal(one_scale, reference)
    assert np.mean(per_row != one_scale) > 0.3


def test_a_scalar_runtime_scale_is_per_tensor(sessions):
    shape, axis = LAYOUTS["tokens"]
    spec = QdqSpec(k=64, n=96, exact_arithmetic=True, per_channel=False, zp_y=2, seed=5)
    scales, zps, feeds = feeds_for(spec, shape, axis, True, 9, True)
    feeds.update(x_scale=np.array(scales[0], np.float32), x_zp=np.array(zps[0], np.int8))
    feeds["x"] = np.clip(feeds["x"].astype(np.int32) - zps[:, None].astype(np.int32) + zps[0],
                         -128, 127).astype(np.int8)
    path = sessions.save(model(spec, shape, axis, scales, zps, runtime=True, scalar_runtime=True))
    npu, records = sessions.npuflow(path, "all", {"device": "host"})
    assert claimed(records) == 1
    [expected] = sessions.cpu(path, "all").run(None, feeds)
    [actual] = npu.run(None, feeds)
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("device", sorted(DEVICES))
def test_a_zero_scale_row_dequantizes_to_zeros(sessions, device):
    """Dynamic per-token quantization gives an all-zero token the scale 0: that row's output is
    the output zero point, as on the CPU EP, and the run does not fail."""
    shape, axis = LAYOUTS["rows"]
    spec = QdqSpec(k=64, n=96, exact_arithmetic=True, per_channel=True, zp_y=-5, seed=4)
    scales, zps, feeds = feeds_for(spec, shape, axis, True, 7, True)
    feeds["x_scale"] = feeds["x_scale"].copy()
    feeds["x_scale"][[0, 5, 36]] = 0.0
    path = sessions.save(model(spec, shape, axis, scales, zps, runtime=True))
    npu, records = sessions.npuflow(path, "all", DEVICES[device])
    assert claimed(records) == 1
    [expected] = sessions.cpu(path, "all").run(None, feeds)
    [actual] = npu.run(None, feeds)
    np.testing.assert_array_equal(actual, expected)
    assert (expected[[0, 5, 36]] == spec.zp_y).all() and len(np.unique(expected)) > 8


def test_a_non_finite_runtime_scale_is_a_clear_error(sessions):
    shape, axis = LAYOUTS["rows"]
    spec = QdqSpec(k=64, n=96, exact_arithmetic=True, per_channel=True, seed=4)
    scales, zps, feeds = feeds_for(spec, shape, axis, True, 7, True)
    feeds["x_scale"] = feeds["x_scale"].copy()
    feeds["x_scale"][3] = np.inf
    path = sessions.save(model(spec, shape, axis, scales, zps, runtime=True))
    npu, _ = sessions.npuflow(path, "all", {"device": "host"})
    with pytest.raises(Exception, match="not a finite number"):
        npu.run(None, feeds)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_at_most_one_lsb_on_random_data(sessions, layout):
    shape, axis = LAYOUTS[layout]
    spec = QdqSpec(k=64, n=96, per_channel=True, zp_w=4, zp_y=3, seed=11)
    scales, zps, feeds = feeds_for(spec, shape, axis, False, 13, False)
    path = sessions.save(model(spec, shape, axis, scales, zps))
    npu, records = sessions.npuflow(path, "disable", {"device": "host"})
    assert claimed(records) == 1
    [expected] = sessions.cpu(path, "disable").run(None, feeds)  # the CPU EP's float path
    [actual] = npu.run(None, feeds)
    diff = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
    assert diff.max() <= 1 and len(np.unique(expected)) > 32


def test_a_scale_along_k_is_refused(sessions):
    spec = QdqSpec(k=64, n=96, exact_arithmetic=True, seed=1)
    scales, zps = row_params(np.random.default_rng(0), 64, True, np.int8)
    path = sessions.save(model(spec, (4, 64), 1, scales, zps))
    _, records = sessions.npuflow(path, "all", {"device": "host"})
    assert claimed(records) == 0
    assert "per_axis_activation" in refusal_reasons(records)
