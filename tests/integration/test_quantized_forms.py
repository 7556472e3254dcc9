"""The other forms quantized encoders reach users in (issue #13, item 3), as the tools write them:

- int8 weights per channel with only the MatMuls quantized (the transformer recipes' choice);
- int4 weights per channel, from quantize_static (QInt4 weights; before opset 21 it puts the
  4-bit DequantizeLinear nodes in ONNX Runtime's com.microsoft domain);
- block-wise 4-bit weights, from MatMulNBitsQuantizer's QDQ format (DequantizeLinear with
  axis 0 and a block_size, the weight-only form of LLM and encoder int4 exports; opset 21):
  asymmetric uint4 with zero points in blocks of 32 (its default) and of 16, and symmetric int4
  without zero points in blocks of 128 (longer than the fixture ViT's K of 64: one short block);
- uint8 activations (quantize_static's default), int16 and uint16 activations (for which it moves
  the model to opset 21), symmetric int8 activations (zero points all 0), every Q/DQ in the
  com.microsoft domain (UseQDQContribOps, what ONNX Runtime's QNN and Vitis AI recipes set), and
  uint8 weights per tensor (the pre-per-channel default).

Each is claimed as one encoder node in NPUFLOW_QUANT=fp16, on host and sim. Gates: against the
float reading (the model with its DequantizeLinears folded and its round trips dropped, run by the
CPU EP; see test_quantized_encoders.float_reading) at the device's bars, and against the fp32 model
that was quantized at cosine >= 0.999 where the quantization itself reaches it (int4 does not: the
measured cosine of the CPU EP's own run is then the floor, to 1e-5).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import version_converter
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from conftest import ROOT, generated_once
from gates import agreement, assert_matches
from test_quantized_encoders import (CALIBRATION, MINILM, SENTENCES, TEXT_MODELS, Batches, cpu_run,
                                     float_reading, minilm_opset17, qdq_claims, real_tokens,
                                     tokens)
from vision_fixtures import FIXTURES, pixels, vision_claims, vision_refusals

sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
from fuzz_child import fp16_operands  # noqa: E402
from fuzz_oracle import MATCHING, classify, fp16_error_bars  # noqa: E402

# Form -> how it is made: quantize_static's (activation, weight) types, or Blocks for
# MatMulNBitsQuantizer's QDQ output.
@dataclass(frozen=True)
class Blocks:
    size: int
    symmetric: bool


FORMS = {"int8_per_channel": (QuantType.QInt8, QuantType.QInt8),
         "int4_per_channel": (QuantType.QInt8, QuantType.QInt4),
         "uint4_blocks": Blocks(32, symmetric=False),
         "uint4_blocks_16": Blocks(16, symmetric=False),
         "int4_blocks_symmetric_128": Blocks(128, symmetric=True),
         "uint8_activations": (QuantType.QUInt8, QuantType.QInt8),
         "int16_activations": (QuantType.QInt16, QuantType.QInt8),
         "uint16_activations": (QuantType.QUInt16, QuantType.QInt8),
         "contrib_domain": (QuantType.QUInt8, QuantType.QInt8, {"UseQDQContribOps": True}),
         "symmetric_activations": (QuantType.QInt8, QuantType.QInt8,
                                   {"ActivationSymmetric": True, "WeightSymmetric": True}),
         "uint8_weights_per_tensor": (QuantType.QUInt8, QuantType.QUInt8, {}, False)}
MODELS = ["vit_encoder_torchscript", "minilm"]


def source_model(model: str) -> tuple[onnx.ModelProto, list, dict]:
    if model == "minilm":
        return minilm_opset17(), [tokens(CALIBRATION) for _ in range(2)], tokens(SENTENCES)
    path = FIXTURES / f"{model}.onnx"
    rng = np.random.default_rng(7)
    calibration = [{k: rng.standard_normal(v.shape).astype(np.float32)
                    for k, v in pixels(path).items()} for _ in range(4)]
    return onnx.load(str(path)), calibration, pixels(path, seed=3)


def form_path(folder, name: str, form: str) -> str:
    return str(folder / f"{name}-{form}.onnx")


def quantize(form: str, model: onnx.ModelProto, fp32: str, calibration, folder,
             name: str) -> str:
    """Writes model (saved at fp32) quantized in form under folder; returns its path."""
    out = form_path(folder, name, form)
    if isinstance(blocks := FORMS[form], Blocks):
        quantizer = MatMulNBitsQuantizer(version_converter.convert_version(model, 21),
                                         block_size=blocks.size, is_symmetric=blocks.symmetric,
                                         quant_format=QuantFormat.QDQ)
        quantizer.process()
        onnx.save(quantizer.model.model, out)
        return out
    activation, weight, options, per_channel = FORMS[form] + ({}, True)[len(FORMS[form]) - 2:]
    quantize_static(fp32, out, Batches(calibration), quant_format=QuantFormat.QDQ,
                    per_channel=per_channel, activation_type=activation, weight_type=weight,
                    op_types_to_quantize=["MatMul"], extra_options=options)
    return out


@pytest.fixture(scope="module")
def built():
    here = Path(__file__).parent
    sources = [Path(__file__), here / "test_quantized_encoders.py", here / "vision_fixtures.py",
               here / "text_fixtures.py", FIXTURES / "vit_encoder_torchscript.onnx",
               TEXT_MODELS / f"{MINILM}.onnx", TEXT_MODELS / f"{MINILM}-tokenizer.json"]
    return generated_once("quantized-forms", sources, build_forms)


def build_forms(folder, write: bool = True) -> dict:
    """(fp32 path, quantized path, feeds) per (model, form) under folder, written there unless
    `write` is false (the models are already there)."""
    out = {}
    for name in MODELS:
        model, calibration, feeds = source_model(name)
        fp32 = str(folder / f"{name}.onnx")
        if write:
            onnx.save(model, fp32)
        for form in FORMS:
            quantized = (quantize(form, model, fp32, calibration, folder, name) if write
                         else form_path(folder, name, form))
            out[name, form] = (fp32, quantized, feeds)
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
        for form, blocks in FORMS.items():
            if not isinstance(blocks, Blocks):
                continue
            dequantizers = dequantize_nodes(built[name, form][1])
            assert dequantizers and all(
                {(a.name, a.i) for a in n.attribute} >= {("block_size", blocks.size), ("axis", 0)}
                and len(n.input) == (2 if blocks.symmetric else 3) for n in dequantizers), form
            assert not any(n.op_type == "QuantizeLinear" for n in model[form].graph.node)
            assert (elem.INT4 if blocks.symmetric else elem.UINT4) in types[form], form
        assert {n.domain for n in dequantize_nodes(built[name, "int4_per_channel"][1])} == \
            {"com.microsoft"}
        assert elem.INT16 in types["int16_activations"]
        assert elem.UINT16 in types["uint16_activations"]
        assert elem.UINT8 in {t.data_type for t in model["uint8_activations"].graph.initializer}
        contrib = [n for n in model["contrib_domain"].graph.node
                   if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
        assert contrib and {n.domain for n in contrib} == {"com.microsoft"}
        zero_points = [t for t in model["symmetric_activations"].graph.initializer
                       if t.name.endswith("zero_point")]
        assert zero_points and all(not onnx.numpy_helper.to_array(t).any() for t in zero_points)
        per_tensor = model["uint8_weights_per_tensor"]
        weights = [t for t in per_tensor.graph.initializer if t.data_type == elem.UINT8 and t.dims]
        assert weights, "uint8 weights"
        scales = [t for t in per_tensor.graph.initializer if t.name.endswith("_scale")]
        assert scales and all(not t.dims for t in scales), "one scale per tensor"


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
