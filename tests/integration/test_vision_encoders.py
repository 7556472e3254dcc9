"""Vision-transformer encoders claimed by structure (issue #5): every committed fixture, both
exporters, three optimization levels, against the CPU EP; near-miss graphs refused; the knobs.

The fixtures are real `transformers` exports (tools/fixtures/export_vision.py, random weights,
fixed seed); these tests only read them and never need PyTorch."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from conftest import ROOT, claimed, refusal_reasons

FIXTURES = ROOT / "tests" / "fixtures" / "vision"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
MODELS = sorted(MANIFEST["files"])
ENCODER_ONLY = [m for m in MODELS if MANIFEST["files"][m]["encoder_only"]]
BAR = 0.99999


def cosine(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    norm = np.linalg.norm(a) * np.linalg.norm(b)
    assert norm > 0, "an all-zero output cannot show agreement"
    return float(a @ b / norm)


def pixels(path, batch=1, seed=0):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shape = [batch if not isinstance(d, int) else d for d in session.get_inputs()[0].shape]
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return {session.get_inputs()[0].name: data}


def vision_claims(records):
    return [c for r in records for c in r["claims"] if c["kind"] == "vision_encoder"]


def vision_refusals(records):
    return [x["reason"] for r in records if r.get("matcher") == "vision" for x in r["refusals"]]


def test_manifest_lists_every_fixture_with_its_hash_and_versions():
    on_disk = sorted(p.name for p in FIXTURES.glob("*.onnx"))
    assert on_disk == MODELS
    for name, entry in MANIFEST["files"].items():
        data = (FIXTURES / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert len(data) <= 4 * 1024 * 1024, name
    for key in ("torch", "transformers", "onnx", "onnxscript"):
        assert MANIFEST["versions"][key]
    families = {e["family"] for e in MANIFEST["files"].values()}
    assert families == {"vit", "clip", "siglip", "dinov2", "depth_anything"}
    assert {e["exporter"] for e in MANIFEST["files"].values()} == {"torchscript", "dynamo"}


@pytest.mark.parametrize("level", ["disable", "basic", "all"])
@pytest.mark.parametrize("model", MODELS)
def test_fixture_is_claimed_and_matches_the_cpu_ep(sessions, model, level):
    path = str(FIXTURES / model)
    entry = MANIFEST["files"][model]
    npu, records = sessions.npuflow(path, level=level)
    claims = vision_claims(records)
    assert len(claims) == 1, vision_refusals(records)
    claim = claims[0]
    assert claim["family"] == entry["family"]
    assert claim["layers"] == (4 if entry["family"] == "depth_anything" else 2)
    assert claim["hidden"] == 64 and claim["heads"] == 4 and claim["heads_source"] == "graph"
    if entry["family"] == "depth_anything":
        taps = [e for e in claim["exits"] if e["norm"]]
        assert sorted(e["stream_index"] for e in taps) == [1, 2, 3, 4]
    feed = pixels(path)
    cpu = sessions.cpu(path, level=level)
    for name, ref, got in zip([o.name for o in cpu.get_outputs()], cpu.run(None, feed),
                              npu.run(None, feed)):
        assert got.shape == ref.shape
        assert cosine(ref, got) >= BAR, (model, level, name)


SIM_BAR = 0.9999


@pytest.mark.parametrize("model", MODELS)
def test_fixture_on_the_simulator_matches_the_cpu_ep(sessions, model, capfd):
    """The same encoders on `sim`: projections in the NPU's fp16 with fp32 results, every call
    on the simulated device (the profile shows calls and no refusal or failed submit)."""
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, level="all", options={"device": "sim", "prof": "1"})
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    feed = pixels(path)
    cpu = sessions.cpu(path, level="all")
    for name, ref, got in zip([o.name for o in cpu.get_outputs()], cpu.run(None, feed),
                              npu.run(None, feed)):
        assert cosine(ref, got) >= SIM_BAR, (model, name)
    del npu  # the profile prints when the session ends
    import gc
    gc.collect()
    err = capfd.readouterr().err
    profile = re.search(r"sim profile: (\d+) calls \((\d+) refused, (\d+) failed", err)
    assert profile, err[-2000:]
    assert int(profile.group(1)) > 0 and profile.group(2) == "0" and profile.group(3) == "0"
    assert "refused a" not in err  # no projection fell back to the host


def test_failed_device_calls_fall_back_to_the_host_and_still_match(sessions, capfd):
    path = str(FIXTURES / "clip_dynamo.onnx")
    npu, records = sessions.npuflow(path, level="all",
                                    options={"device": "sim", "sim_fail_every": "3"})
    assert len(vision_claims(records)) == 1
    feed = pixels(path)
    cpu = sessions.cpu(path, level="all")
    for ref, got in zip(cpu.run(None, feed), npu.run(None, feed)):
        assert cosine(ref, got) >= SIM_BAR
    err = capfd.readouterr().err
    assert "such calls run on the host (reported once)" in err
    assert err.count("such calls run on the host") == 1


@pytest.mark.parametrize("model", [m for m in MODELS if "torchscript" in m][:3])
def test_a_batch_of_two_images_matches(sessions, model):
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, level="disable")
    assert len(vision_claims(records)) == 1
    feed = pixels(path, batch=2, seed=3)
    ref = sessions.cpu(path, level="disable").run(None, feed)
    got = npu.run(None, feed)
    for r, g in zip(ref, got):
        assert g.shape == r.shape and r.shape[0] == 2
        assert cosine(r[1], g[1]) >= BAR and cosine(r[0], g[0]) >= BAR


# The TorchScript DINOv2 export interpolates its position embedding (bicubic Resize) from the
# token count of the claimed embedding: that embedding stays on the CPU EP (see the claim's note).
EMBEDDING_ON_CPU = {"dinov2_encoder_torchscript.onnx"}


def test_an_embedding_left_on_the_cpu_ep_is_said_and_fails_fallback_off(sessions):
    path = str(FIXTURES / "dinov2_encoder_torchscript.onnx")
    _, records = sessions.npuflow(path, level="basic")
    [claim] = vision_claims(records)
    assert not claim["from_pixels"] and "CPU EP" in claim["note"]
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        sessions.npuflow(path, level="basic", config={"session.disable_cpu_ep_fallback": "1"})


@pytest.mark.parametrize("model", sorted(set(ENCODER_ONLY) - EMBEDDING_ON_CPU))
def test_encoder_only_models_run_with_the_cpu_fallback_off(sessions, model):
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, level="basic",
                                    config={"session.disable_cpu_ep_fallback": "1"})
    assert len(vision_claims(records)) == 1
    feed = pixels(path)
    ref = sessions.cpu(path, level="basic").run(None, feed)[0]
    assert cosine(ref, npu.run(None, feed)[0]) >= BAR


def test_the_renamed_reexport_still_claims(sessions):
    renamed = onnx.load(str(FIXTURES / "vit_renamed.onnx"))
    original = onnx.load(str(FIXTURES / "vit_torchscript.onnx"))
    assert not {n.name for n in renamed.graph.node} & {n.name for n in original.graph.node}
    assert not ({i.name for i in renamed.graph.initializer} &
                {i.name for i in original.graph.initializer})
    _, records = sessions.npuflow(str(FIXTURES / "vit_renamed.onnx"), level="disable")
    assert [c["family"] for c in vision_claims(records)] == ["vit"]


# Near misses: edits of the dynamo ViT that the plan cannot run as the graph says.

def vit_dynamo():
    return onnx.load(str(FIXTURES / "vit_dynamo.onnx"))


def first_attention_projections(model):
    """The first tensor read by three MatMuls with constant weights (layer 0's q, k, v)."""
    inits = {i.name for i in model.graph.initializer}
    readers = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in inits:
            readers.setdefault(node.input[0], []).append(node)
    return next(nodes for nodes in readers.values() if len(nodes) == 3)


def producer(model, name):
    return next(n for n in model.graph.node if name in n.output)


def rewire_v_to_the_stream(model):
    q, k, v = first_attention_projections(model)
    norm = producer(model, v.input[0])
    assert norm.op_type == "LayerNormalization"
    v.input[0] = norm.input[0]  # V reads the un-normalized stream
    return model


def insert_unsupported_op(model):
    q, k, v = first_attention_projections(model)
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    out = softmax.output[0]
    softmax.output[0] = out + "_pre"
    model.graph.node.insert(list(model.graph.node).index(softmax) + 1,
                            helper.make_node("Sin", [out + "_pre"], [out], name="inserted_sin"))
    return model


def different_activation(model):
    erf = [n for n in model.graph.node if n.op_type == "Erf"]
    assert erf, "the dynamo export decomposes GELU with Erf"
    erf[0].op_type = "Tanh"  # 0.5 x (1 + tanh(x / sqrt 2)): not a GELU the plan knows
    return model


def additive_mask(model):
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    tokens = 17
    mask = np.zeros((1, 1, tokens, tokens), np.float32)
    mask[..., -3:] = -1e4  # hide the last three keys
    model.graph.initializer.append(numpy_helper.from_array(mask, "near_miss_mask"))
    scores = softmax.input[0]
    softmax.input[0] = scores + "_masked"
    model.graph.node.insert(list(model.graph.node).index(softmax),
                            helper.make_node("Add", [scores, "near_miss_mask"],
                                             [scores + "_masked"], name="inserted_mask"))
    return model


NEAR_MISSES = {
    "rewired_edge": (rewire_v_to_the_stream, {"attention_inputs", "block_shape", "no_block"}),
    "unsupported_op": (insert_unsupported_op, {"attention_shape", "no_block", "block_shape"}),
    "different_activation": (different_activation, {"unsupported_activation"}),
    "attention_mask": (additive_mask, {"attention_mask"}),
}


@pytest.mark.parametrize("level", ["disable", "basic"])
@pytest.mark.parametrize("case", sorted(NEAR_MISSES))
def test_near_misses_are_refused_and_run_unchanged(sessions, case, level):
    edit, reasons = NEAR_MISSES[case]
    model = edit(vit_dynamo())
    onnx.checker.check_model(model)
    path = sessions.save(model)
    npu, records = sessions.npuflow(path, level=level)
    assert vision_claims(records) == []
    refused = vision_refusals(records)
    assert refused and set(refused) <= reasons, refused
    feed = pixels(path)
    for ref, got in zip(sessions.cpu(path, level=level).run(None, feed), npu.run(None, feed)):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_vision_knob_off_is_the_control_arm(sessions):
    path = str(FIXTURES / "clip_dynamo.onnx")
    npu, records = sessions.npuflow(path, options={"vision": "0"})
    assert vision_claims(records) == []
    assert vision_refusals(records) == ["disabled_by_knob"]


def test_heads_knob_overrides_and_a_wrong_value_is_refused(sessions):
    path = str(FIXTURES / "siglip_dynamo.onnx")
    _, records = sessions.npuflow(path, options={"heads": "4"})
    assert [(c["heads"], c["heads_source"]) for c in vision_claims(records)] == [(4, "knob")]
    _, records = sessions.npuflow(path, options={"heads": "2"})
    assert vision_claims(records) == []
    assert vision_refusals(records) == ["attention_layout"]
    _, records = sessions.npuflow(path, options={"heads": "3"})
    assert vision_refusals(records) == ["heads_unknown"]
    detail = [x["detail"] for r in records for x in r["refusals"]][0]
    assert "NPUFLOW_HEADS" in detail
