"""QOperator MatMuls with random full-range data: QLinearMatMul (the QDQ epilogue: exact sum,
one rounding of acc * s_a * s_w / s_y in double) and MatMulInteger with constant zero points
(int32 out). npuflow must equal the exact reference (numpy, int64) to the bit; against the CPU EP,
whose QLinearMatMul rescales in fp32 and whose u8s8 sums may saturate without VNNI, the differing
values are counted and each must be explained by a CPU EP difference from the exact result."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import claimed

NP = {TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8}


def random_int(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def zero_point(rng, dtype, shape=()):
    """Near the middle of the type's range, so full-range data is centred."""
    middle = 128 if dtype == np.uint8 else 0
    return (middle + rng.integers(-8, 9, size=shape)).astype(dtype)


def qlinear_model(rng, k, n, a_type, w_type, y_type, per_column):
    a_zp = zero_point(rng, NP[a_type])
    w = random_int(rng, NP[w_type], (k, n))
    w_scale = (rng.uniform(0.5, 2.0, n if per_column else ()) * 1e-3).astype(np.float32)
    w_zp = zero_point(rng, NP[w_type], n if per_column else ())
    a_scale, y_zp = np.float32(0.02), zero_point(rng, NP[y_type])
    y_scale = np.float32(0.02 * 1e-3 * np.sqrt(k) * 60)  # spreads the output over the range
    inits = [numpy_helper.from_array(np.asarray(v), name) for v, name in [
        (a_scale, "a_scale"), (a_zp, "a_zp"), (w, "w"), (w_scale, "w_scale"),
        (w_zp.astype(NP[w_type]), "w_zp"), (y_scale, "y_scale"),
        (np.asarray(y_zp, NP[y_type]), "y_zp")]]
    node = helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "w", "w_scale", "w_zp",
                                              "y_scale", "y_zp"], ["y"], name="qlinear")
    graph = helper.make_graph([node], "qop", [helper.make_tensor_value_info("a", a_type, [
        "m", k])], [helper.make_tensor_value_info("y", y_type, ["m", n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def qlinear_reference(model, a):
    p = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    acc = (a.astype(np.int64) - p["a_zp"].astype(np.int64)) @ (
        p["w"].astype(np.int64) - p["w_zp"].astype(np.int64))
    mult = np.float64(p["a_scale"]) * p["w_scale"].astype(np.float64) / np.float64(p["y_scale"])
    info = np.iinfo(p["y_zp"].dtype)
    value = np.rint(acc * mult).astype(np.int64) + np.int64(p["y_zp"])
    return np.clip(value, info.min, info.max).astype(p["y_zp"].dtype)


@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
@pytest.mark.parametrize("a_type,w_type,y_type", [
    (TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT8),
    (TensorProto.UINT8, TensorProto.UINT8, TensorProto.UINT8),
    (TensorProto.INT8, TensorProto.INT8, TensorProto.INT8)], ids=["u8s8u8", "u8u8u8", "s8s8s8"])
@pytest.mark.parametrize("device", ["host", "sim"])
def test_qlinearmatmul_is_exact(sessions, a_type, w_type, y_type, per_column, device):
    rng = np.random.default_rng(a_type * 100 + w_type * 10 + per_column)
    k, n = 384, 256
    model = qlinear_model(rng, k, n, a_type, w_type, y_type, per_column)
    path = sessions.save(model)
    npu, records = sessions.npuflow(path, "disable", {"device": device, "min_rows": "1"})
    assert claimed(records) == 1, records
    cpu = sessions.cpu(path, "disable")
    differ = total = worst = 0
    for m in (1, 5, 64):
        a = random_int(rng, NP[a_type], (m, k))
        exact = qlinear_reference(model, a)
        got, want = npu.run(None, {"a": a})[0], cpu.run(None, {"a": a})[0]
        np.testing.assert_array_equal(got, exact, err_msg=f"m={m}")
        assert len(np.unique(exact)) > 16, "the output scale saturates everything"
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        unexplained = (diff > 0) & (want == exact)
        assert not unexplained.any()
        differ += int((diff > 0).sum())
        worst = max(worst, int(diff.max()))
        total += diff.size
    print(f"QLinearMatMul {a_type}/{w_type}/{y_type} per_column={per_column} on {device}: "
          f"{differ} of {total} values differ from the CPU EP (at most {worst} LSB), each one "
          "where the CPU EP differs from the exact result")


def test_matmul_integer_with_constant_zero_points_is_exact(sessions):
    rng = np.random.default_rng(7)
    k, n = 512, 96
    w = random_int(rng, np.uint8, (k, n))
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.asarray(131, np.uint8), "a_zp"),
             numpy_helper.from_array(random_int(rng, np.uint8, (n,)), "w_zp")]
    node = helper.make_node("MatMulInteger", ["a", "w", "a_zp", "w_zp"], ["y"], name="mmi")
    graph = helper.make_graph([node], "mmi", [helper.make_tensor_value_info(
        "a", TensorProto.UINT8, [2, "m", k])], [helper.make_tensor_value_info(
            "y", TensorProto.INT32, [2, "m", n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = sessions.save(model)
    npu, records = sessions.npuflow(path, "all")
    assert claimed(records) == 1, records
    a = random_int(rng, np.uint8, (2, 9, k))
    exact = (a.astype(np.int64) - 131) @ (w.astype(np.int64) - numpy_helper.to_array(
        inits[2]).astype(np.int64))
    got = npu.run(None, {"a": a})[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, exact)
    np.testing.assert_array_equal(got, sessions.cpu(path, "all").run(None, {"a": a})[0])
