"""The other forms quantized encoders reach users in (issue #13, item 3), as the tools write them:

- int8 weights per channel with only the MatMuls quantized (the transformer recipes' choice);
- int4 weights per channel, from quantize_static (QInt4 weights; before opset 21 it puts the
  4-bit DequantizeLinear nodes in ONNX Runtime's com.microsoft domain);
- block-wise uint4 weights, from MatMulNBitsQuantizer's QDQ format (DequantizeLinear with
  axis 0 and block_size 32, the weight-only form of LLM and encoder int4 exports; opset 21);
- uint8 activations (quantize_static's default) and int16 activations (for which it moves the
  model to opset 21).

Each is claimed as one encoder node in NPUFLOW_QUANT=fp16, on host and sim. Gates: against the
float reading (the model with its DequantizeLinears folded and its round trips dropped, run by the
CPU EP; see test_quantized_encoders.float_reading) at the device's bars, and against the fp32 model
that was quantized at cosine >= 0.999 where the quantization itself reaches it (int4 does not: the
measured cosine of the CPU EP's own run is then the floor, to 1e-5).
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import version_converter
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from conftest import ROOT
from gates import agreement, assert_matches
from test_quantized_encoders import (CALIBRATION, SENTENCES, Batches, cpu_run, float_reading,
                                     minilm_opset17, qdq_claims, real_tokens, tokens)
from vision_fixtures import FIXTURES, pixels, vision_claims, vision_refusals

sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
from fuzz_child import fp16_operands  # noqa: E402
from fuzz_oracle import MATCHING, classify, fp16_error_bars  # noqa: E402

# Form -> how it is made: quantize_static's (activation, weight) types, or "blocks" for
# MatMulNBitsQuantizer's QDQ output.
FORMS = {"int8_per_channel": (QuantType.QInt8, QuantType.QInt8),
         "int4_per_channel": (QuantType.QInt8, QuantType.QInt4),
         "uint4_blocks": "blocks",
         "uint8_activations": (QuantType.QUInt8, QuantType.QInt8),
         "int16_activations": (QuantType.QInt16, QuantType.QInt8)}
MODELS = ["vit_encoder_torchscript", "minilm"]
BLOCK = 32


def source_model(model: str) -> tuple[onnx.ModelProto, list, dict]:
    if model == "minilm":
        return minilm_opset17(), [tokens(CALIBRATION) for _ in range(2)], tokens(SENTENCES)
    path = FIXTURES / f"{model}.onnx"
    rng = np.random.default_rng(7)
    calibration = [{k: rng.standard_normal(v.shape).astype(np.float32)
                    for k, v in pixels(path).items()} for _ in range(4)]
    return onnx.load(str(path)), calibration, pixels(path, seed=3)


def quantize(form: str, model: onnx.ModelProto, calibration, folder, name: str) -> str:
    out = str(folder / f"{name}-{form}.onnx")
    if FORMS[form] == "blocks":
        quantizer = MatMulNBitsQuantizer(version_converter.convert_version(model, 21),
                                         block_size=BLOCK, is_symmetric=False,
                                         quant_format=QuantFormat.QDQ)
        quantizer.process()
        onnx.save(quantizer.model.model, out)
        return out
    activation, weight = FORMS[form]
    fp32 = str(folder / f"{name}-fp32.onnx")
    onnx.save(model, fp32)
    quantize_static(fp32, out, Batches(calibration), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=activation, weight_type=weight,
                    op_types_to_quantize=["MatMul"])
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_forms(tmp_path_factory.mktemp("forms"))


def build_forms(folder) -> dict:
    """(fp32 path, quantized path, feeds) per (model, form), written under folder."""
    out = {}
    for name in MODELS:
        model, calibration, feeds = source_model(name)
        fp32 = str(folder / f"{name}.onnx")
        onnx.save(model, fp32)
        for form in FORMS:
            out[name, form] = (fp32, quantize(form, model, calibration, folder, name), feeds)
    return out


def dequantize_nodes(path: str) -> list[onnx.NodeProto]:
    return [n for n in onnx.load(path).graph.node if n.op_type == "DequantizeLinear"]


def test_the_forms_are_what_the_tools_write(built):
    """The fixtures hold what each form is named for, so the claims below are about them."""
    elem = onnx.TensorProto
    for name in MODELS:
        model = {form: onnx.load(built[name, form][1]) for form in FORMS}
        types = {form: {t.data_type for t in m.graph.initializer} for form, m in model.items()}
        assert elem.INT4 in types["int4_per_channel"]
        assert elem.UINT4 in types["uint4_blocks"]
        blocks = [n for n in dequantize_nodes(built[name, "uint4_blocks"][1])]
        assert blocks and all({(a.name, a.i) for a in n.attribute} >= {("block_size", BLOCK),
                                                                       ("axis", 0)} for n in blocks)
        assert not any(n.op_type == "QuantizeLinear" for n in model["uint4_blocks"].graph.node)
        assert {n.domain for n in dequantize_nodes(built[name, "int4_per_channel"][1])} == \
            {"com.microsoft"}
        assert elem.INT16 in types["int16_activations"]
        assert elem.UINT8 in {t.data_type for t in model["uint8_activations"].graph.initializer}


@pytest.mark.parametrize("device", ["host", "sim"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", MODELS)
def test_each_form_is_one_encoder_node(sessions, built, name, form, device):
    fp32, qdq, feeds = built[name, form]
    npu, records = sessions.npuflow(qdq, level="all", options={"device": device})
    [claim] = vision_claims(records) or [None]
    assert claim is not None, vision_refusals(records)
    assert claim["dequantized"] is True
    assert not qdq_claims(records)
    got = npu.run(None, feeds)[0]
    float_model = float_reading(onnx.load(qdq))
    reading = cpu_run(float_model.SerializeToString(), feeds)
    if device == "sim":  # within twice what fp16 GEMM operands themselves miss the reading by
        emulated = cpu_run(fp16_operands(float_model).SerializeToString(), feeds)
        verdict, detail = classify([reading], [got], 1, "sim",
                                   fp16_error_bars([reading], [emulated], "sim"))
        assert verdict == MATCHING, f"{name} {form}: {detail}"
        return
    assert_matches(reading, got, device, f"{name} {form} against its float reading")
    reference = real_tokens(feeds, cpu_run(fp32, feeds))
    ours = agreement(reference, real_tokens(feeds, got)).cosine
    quantizer = agreement(reference, real_tokens(feeds, reading)).cosine
    assert ours >= min(0.999, quantizer - 1e-5), f"cosine {ours:.6f}, quantization {quantizer:.6f}"
