"""Encoders quantized by onnxruntime.quantization.quantize_dynamic (issue #13, item 1): every
vision fixture family and exporter, and the real all-MiniLM-L6-v2, per tensor and per channel,
int8 and uint8 weights. Each is claimed as one encoder node whose dynamic int8 linears run
natively inside it (graph/quantized_view.h), in every `quant` mode, and no MatMulInteger group is
claimed on its own.

Gates, against the CPU EP running the same quantized model with its MatMulIntegers computed
exactly (gates.exact_integer_model: on x86 without VNNI the CPU EP's u8 x s8 kernels saturate
int16 pair sums, and an int8-weight encoder's embeddings move to cosine 0.98 from the graph's
definition; with VNNI the two are the same):
- one input per run: cosine >= min(0.9999, how far the CPU EP's own one-ulp runs move);
- a batch (where the fixture takes one), whose shared ranges make it more sensitive still
  (test_quantized_text_models.py): cosine to the fp32 model that was quantized within 0.005 of
  the CPU EP's own; and the ranges are the batch's, as DynamicQuantizeLinear defines them:
  npuflow's output is at least twice as close to the CPU EP's batch output as to the CPU EP's
  outputs of each input alone (a plan that quantized each input over its own range would be the
  other way round).
Text outputs are compared over their real tokens only.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import QuantType, quantize_dynamic

from conftest import ROOT, refusal_reasons
from gates import (agreement, assert_every_call_on_the_device, ended_session_profile,
                   exact_integer_model, one_ulp_moves)
from text_fixtures import tokenized
from vision_fixtures import FIXTURES, pixels, vision_claims, vision_refusals

MINILM = ROOT / "third_party" / "text-models" / "all-minilm-l6-v2"
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "NPUs run encoders.",
             "A much longer sentence about running transformer encoders on an edge device.", "Hi"]
VISION = sorted(p.stem for p in FIXTURES.glob("*.onnx")
                if p.stem.endswith(("_encoder_dynamo", "_encoder_torchscript")) or
                p.stem.startswith("depth_anything_"))
# (per channel, weight type): every vision fixture takes one, in turn; MiniLM takes all four.
FORMS = [(False, QuantType.QInt8), (True, QuantType.QInt8), (False, QuantType.QUInt8),
         (True, QuantType.QUInt8)]
LEVELS = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def form_id(form) -> str:
    per_channel, weight = form
    return f"{'channel' if per_channel else 'tensor'}-{'int8' if weight == QuantType.QInt8 else 'uint8'}"


CASES = [(name, FORMS[i % len(FORMS)]) for i, name in enumerate(VISION)] + \
    [("minilm", form) for form in FORMS]


def source_of(case) -> str:
    return f"{MINILM}.onnx" if case == "minilm" else str(FIXTURES / f"{case}.onnx")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dynamic")
    cache = {}

    def build(case, form):
        if (case, form) not in cache:
            source = source_of(case)
            out = str(folder / f"{case}-{form_id(form)}.onnx")
            per_channel, weight = form
            # The vision fixtures' patch Conv would become a ConvInteger; their transformer
            # recipes quantize the MatMuls. MiniLM takes quantize_dynamic's defaults (its
            # embedding tables too).
            quantize_dynamic(source, out, per_channel=per_channel, weight_type=weight,
                             op_types_to_quantize=None if case == "minilm" else ["MatMul"])
            cache[case, form] = out
        return cache[case, form]
    return build


def inputs_of(case, path):
    """(a batch, or None where the model takes one input only, and each input alone)."""
    if case == "minilm":
        batch = tokenized(MINILM.parent / f"{MINILM.name}-tokenizer.json", SENTENCES)
    else:
        batch = pixels(path, batch=2, seed=3)
        name = next(iter(batch))
        if batch[name].shape[0] < 2:
            return None, [pixels(path, seed=3), pixels(path, seed=4)]
        batch[name][1] *= 4.0  # a second image with its own, wider range
    count = next(iter(batch.values())).shape[0]
    return batch, [{k: v[i:i + 1] for k, v in batch.items()} for i in range(count)]


def real(feeds, values):
    return values[feeds["attention_mask"].astype(bool)] if "attention_mask" in feeds else values


def cpu_session(model, level="all"):
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def floor_of(path, level, feeds_list) -> float:
    """min(0.9999, the worst cosine of the CPU EP's one-ulp runs to its own run)."""
    cpu = cpu_session(path, level)
    worst = 1.0
    for moved in one_ulp_moves(path):
        other = cpu_session(moved, level)
        for feeds in feeds_list:
            worst = min(worst, agreement(real(feeds, cpu.run(None, feeds)[0]),
                                         real(feeds, other.run(None, feeds)[0])).cosine)
    # The same flip can be both theirs and ours: equal to the last digits.
    return min(0.9999, worst - 1e-6)


def check_claim(path, records):
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    assert vision_claims(records)[0]["dequantized"] is True
    integer = [r for r in records if r["matcher"] == "integer"]
    assert not [c for r in integer for c in r["claims"]], "a group was claimed on its own"
    groups = sum(n.op_type == "MatMulInteger" for n in onnx.load(path).graph.node)
    assert groups > 0 and refusal_reasons(integer) == ["inside_quantized_encoder"] * groups


def check_outputs(path, level, npu, case):
    exact = exact_integer_model(path)
    cpu = cpu_session(exact, level)
    batch, singles = inputs_of(case, path)
    floor = floor_of(exact, level, singles + ([batch] if batch else []))
    for feeds in singles:
        got = agreement(real(feeds, cpu.run(None, feeds)[0]), real(feeds, npu.run(None, feeds)[0]))
        assert got.cosine >= floor, f"one input: {got} (floor {floor:.6f})"
    if batch is None:
        return
    got = real(batch, npu.run(None, batch)[0])
    shared = agreement(real(batch, cpu.run(None, batch)[0]), got)
    alone = agreement(real(batch, np.concatenate([cpu.run(None, f)[0] for f in singles])), got)
    fp32 = real(batch, cpu_session(source_of(case)).run(None, batch)[0])
    theirs = agreement(fp32, real(batch, cpu.run(None, batch)[0])).cosine
    ours = agreement(fp32, got).cosine
    print(f"{case}: batch {shared}; against the inputs run alone {alone}; cosine to fp32: CPU EP "
          f"{theirs:.6f}, npuflow {ours:.6f}")
    assert ours >= theirs - 0.005, f"batch: cosine to fp32 {ours:.6f}, the CPU EP's {theirs:.6f}"
    assert shared.rel_l2 * 2 <= alone.rel_l2, f"not the batch's ranges: {shared} vs alone {alone}"


@pytest.mark.parametrize("case, form", CASES, ids=[f"{c}-{form_id(f)}" for c, f in CASES])
def test_dynamic_int8_encoder_is_one_node(sessions, quantized, case, form):
    path = quantized(case, form)
    npu, records = sessions.npuflow(path, options={"device": "host"})
    check_claim(path, records)
    check_outputs(path, "all", npu, case)


@pytest.mark.parametrize("level", ["disable", "basic"])
@pytest.mark.parametrize("case", ["vit_encoder_torchscript", "minilm"])
def test_every_level(sessions, quantized, case, level):
    path = quantized(case, FORMS[1])
    npu, records = sessions.npuflow(path, level=level, options={"device": "host"})
    check_claim(path, records)
    check_outputs(path, level, npu, case)


@pytest.mark.parametrize("mode", ["w8a8", "strict"])
def test_every_quant_mode_claims_it(sessions, quantized, mode):
    path = quantized("minilm", FORMS[0])
    npu, records = sessions.npuflow(path, options={"device": "host", "quant": mode})
    check_claim(path, records)
    check_outputs(path, "all", npu, "minilm")


@pytest.mark.parametrize("case", ["vit_encoder_dynamo", "minilm"])
def test_on_the_simulator(sessions, quantized, case, capfd):
    path = quantized(case, FORMS[2])
    npu, records = sessions.npuflow(path, options={"device": "sim", "prof": "1"})
    check_claim(path, records)
    check_outputs(path, "all", npu, case)
    del npu
    assert_every_call_on_the_device(ended_session_profile(capfd))


def test_the_vision_knob_is_the_control_arm(sessions, quantized):
    """vision=0: no encoder node, every group claimed on its own, bit for bit the CPU EP's (with
    its MatMulIntegers exact)."""
    path = quantized("minilm", FORMS[0])
    npu, records = sessions.npuflow(path, options={"device": "host", "vision": "0"})
    assert not vision_claims(records)
    integer = [c for r in records if r["matcher"] == "integer" for c in r["claims"]]
    assert len(integer) == sum(n.op_type == "MatMulInteger" for n in onnx.load(path).graph.node)
    batch, _ = inputs_of("minilm", path)
    np.testing.assert_array_equal(npu.run(None, batch)[0],
                                  cpu_session(exact_integer_model(path)).run(None, batch)[0])
