"""A model quantized by onnxruntime.quantization.quantize_static (QDQ format) from an fp32 MLP this
test builds itself: npuflow claims its MatMul groups and matches the CPU EP."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

from conftest import claimed

HIDDEN, FFN = 256, 512


def fp32_mlp(seed=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((HIDDEN, FFN)) / np.sqrt(HIDDEN)).astype(np.float32)
    w2 = (rng.standard_normal((FFN, HIDDEN)) / np.sqrt(FFN)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
             helper.make_node("Relu", ["h"], ["a"], name="act"),
             helper.make_node("MatMul", ["a", "w2"], ["y"], name="down")]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", HIDDEN])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


class Calibration(CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.batches = iter([{"x": rng.standard_normal((32, HIDDEN)).astype(np.float32)}
                             for _ in range(8)])

    def get_next(self):
        return next(self.batches, None)


@pytest.mark.parametrize("activation_type", [QuantType.QInt8, QuantType.QUInt8], ids=["s8", "u8"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_quantize_static_model(sessions, tmp_path, per_channel, activation_type):
    fp32_path = tmp_path / "mlp.onnx"
    onnx.save(fp32_mlp(), str(fp32_path))
    qdq_path = tmp_path / "mlp.qdq.onnx"
    quantize_static(str(fp32_path), str(qdq_path), Calibration(), quant_format=QuantFormat.QDQ,
                    per_channel=per_channel, activation_type=activation_type,
                    weight_type=QuantType.QInt8)
    npu, records = sessions.npuflow(str(qdq_path))
    assert claimed(records) == 2, records
    # The reference is the CPU EP's float path (DequantizeLinear, float MatMul, QuantizeLinear:
    # the ONNX definition). Its integer kernels at ORT_ENABLE_ALL are not always that on x86
    # without VNNI (u8 x s8 pair sums saturate in int16), so they are compared with it only where
    # they agree with it.
    float_path = sessions.cpu(str(qdq_path), level="disable")
    integer_path = sessions.cpu(str(qdq_path))
    x = np.random.default_rng(2).standard_normal((64, HIDDEN)).astype(np.float32)
    expected, actual = float_path.run(None, {"x": x})[0], npu.run(None, {"x": x})[0]
    cpu_ep_integer = integer_path.run(None, {"x": x})[0]
    # The groups are exact up to one LSB of their int8 outputs; a 1-LSB step of the first group
    # can move the second by a few LSB of its output scale.
    y_scale = next(numpy_helper.to_array(t) for t in onnx.load(str(qdq_path)).graph.initializer
                   if t.name.startswith("y_scale"))
    lsb = np.abs(actual - expected) / float(y_scale)
    assert lsb.max() <= 4, f"worst {lsb.max():.2f} LSB"
    assert np.mean(lsb < 0.5) > 0.99
    # Where the CPU EP's integer kernels are within the same bounds of its float path, npuflow is
    # within them of the integer kernels too.
    cpu_lsb = np.abs(cpu_ep_integer - expected) / float(y_scale)
    if cpu_lsb.max() <= 4 and np.mean(cpu_lsb < 0.5) > 0.99:
        assert (np.abs(actual - cpu_ep_integer) / float(y_scale)).max() <= 8
    cosine = float(np.dot(actual.ravel(), expected.ravel()) /
                   (np.linalg.norm(actual) * np.linalg.norm(expected)))
    assert cosine > 0.9999
