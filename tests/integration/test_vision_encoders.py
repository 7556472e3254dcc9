"""Vision-transformer encoders claimed by structure (issue #5): every committed fixture, both
exporters, three optimization levels, against the CPU EP; near-miss graphs refused; the knobs.

The fixtures are real `transformers` exports (tools/fixtures/export_vision.py, random weights,
fixed seed); these tests only read them and never need PyTorch."""
from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from gates import assert_every_call_on_the_device, assert_matches, ended_session_profile
from vision_fixtures import (ENCODER_ONLY, FIXTURES, MANIFEST, MODELS, pixels, vision_claims,
                             vision_refusals)


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
    assert families == {"vit", "clip", "siglip", "dinov2", "dinov2_registers", "depth_anything"}
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
    # Registers are an attribute of the dinov2 family (test_register_tokens.py checks them).
    assert claim["family"] == entry["family"].removesuffix("_registers")
    assert claim["layers"] == (4 if entry["family"] == "depth_anything" else 2)
    assert claim["hidden"] == 64 and claim["heads"] == 4 and claim["heads_source"] == "graph"
    if entry["family"] == "depth_anything":
        taps = [e for e in claim["exits"] if e["norm"]]
        assert sorted(e["stream_index"] for e in taps) == [1, 2, 3, 4]
    feed = pixels(path)
    cpu = sessions.cpu(path, level=level)
    for name, ref, got in zip([o.name for o in cpu.get_outputs()], cpu.run(None, feed),
                              npu.run(None, feed)):
        assert_matches(ref, got, "host", f"{model} {level} {name}")


@pytest.mark.parametrize("model", MODELS)
def test_fixture_on_the_simulator_matches_the_cpu_ep(sessions, model, capfd):
    """The same encoders on `sim`: projections in the NPU's fp16 with fp32 results, every call
    on the simulated device (the profile shows calls and no refusal, failed submit or fallback)."""
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, level="all", options={"device": "sim", "prof": "1"})
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    feed = pixels(path)
    cpu = sessions.cpu(path, level="all")
    for name, ref, got in zip([o.name for o in cpu.get_outputs()], cpu.run(None, feed),
                              npu.run(None, feed)):
        # Depth Anything's depth is behind its DPT head's 30 device convolutions (gates.py).
        bar = "sim_chain" if name == "predicted_depth" else "sim"
        assert_matches(ref, got, bar, f"{model} {name}")
    del npu  # the profile prints when the session ends
    assert_every_call_on_the_device(ended_session_profile(capfd))


def test_failed_device_calls_fall_back_to_the_host_and_still_match(sessions, capfd):
    path = str(FIXTURES / "clip_dynamo.onnx")
    npu, records = sessions.npuflow(path, level="all",
                                    options={"device": "sim", "sim_fail_every": "3", "prof": "1"})
    assert len(vision_claims(records)) == 1
    feed = pixels(path)
    cpu = sessions.cpu(path, level="all")
    for name, ref, got in zip([o.name for o in cpu.get_outputs()], cpu.run(None, feed),
                              npu.run(None, feed)):
        assert_matches(ref, got, "sim", name)
    del npu
    profile = ended_session_profile(capfd)
    # Every third submit fails: a third of the calls (rounded down) ran on the host instead.
    assert profile.sim_calls > 0 and profile.failed_submits == profile.sim_calls // 3 > 0
    assert "such calls run on the host (reported once)" in profile.text
    assert profile.text.count("such calls run on the host") == 1


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
        assert_matches(r[0], g[0], "host", f"{model} image 0")
        assert_matches(r[1], g[1], "host", f"{model} image 1")


def with_dynamic_image_size(path: str) -> onnx.ModelProto:
    """The model with symbolic image height and width (and no stored intermediate shapes)."""
    model = onnx.load(path)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    del model.graph.value_info[:]
    return model


def test_an_interpolated_position_embedding_is_folded_and_claimed_from_the_pixels(sessions):
    """TorchScript's DINOv2 export interpolates its position embedding (bicubic Resize) to the
    patch grid computed from the image size. With a static size the Resize keeps the grid it
    has: the embedding is a constant the plan folds, and the encoder is claimed whole."""
    path = str(FIXTURES / "dinov2_encoder_torchscript.onnx")
    npu, records = sessions.npuflow(path, level="basic",
                                    config={"session.disable_cpu_ep_fallback": "1"})
    [claim] = vision_claims(records)
    assert claim["from_pixels"], claim["note"]
    feed = pixels(path, batch=2, seed=5)
    ref = sessions.cpu(path, level="basic").run(None, feed)[0]
    assert_matches(ref, npu.run(None, feed)[0], "host", "dinov2_encoder_torchscript")


def test_an_embedding_left_on_the_cpu_ep_is_said_and_fails_fallback_off(sessions):
    """With a symbolic image size the interpolation depends on the run: the embedding stays on
    the CPU EP (said in the claim's note), the blocks are claimed, and a session that may not
    fall back is refused."""
    path = sessions.save(with_dynamic_image_size(str(FIXTURES / "dinov2_encoder_torchscript.onnx")))
    npu, records = sessions.npuflow(path, level="basic")
    [claim] = vision_claims(records)
    assert not claim["from_pixels"] and "CPU EP" in claim["note"]
    feed = pixels(str(FIXTURES / "dinov2_encoder_torchscript.onnx"))
    ref = sessions.cpu(path, level="basic").run(None, feed)[0]
    assert_matches(ref, npu.run(None, feed)[0], "host", "dinov2 with a dynamic image size")
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        sessions.npuflow(path, level="basic", config={"session.disable_cpu_ep_fallback": "1"})


@pytest.mark.parametrize("model", sorted(ENCODER_ONLY))
def test_encoder_only_models_run_with_the_cpu_fallback_off(sessions, model):
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, level="basic",
                                    config={"session.disable_cpu_ep_fallback": "1"})
    assert len(vision_claims(records)) == 1
    feed = pixels(path)
    ref = sessions.cpu(path, level="basic").run(None, feed)[0]
    assert_matches(ref, npu.run(None, feed)[0], "host", model)


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


# Fused QKV: one projection with N = 3D whose output q, k and v select parts of. Built from the
# committed ViT fixtures by graph surgery (every exported fixture has separate projections): each
# layer's q, k, v weights and biases are concatenated into one MatMul + Add, whose output is split
# by a Split, three Slices, or timm's Reshape [B, T, 3, H, dh] + Transpose + Gather.

FUSED_FIXTURES = ["vit_dynamo.onnx", "vit_torchscript.onnx"]
FUSED_FORMS = ["split", "slices", "gather"]
HEADS = 4  # every fixture: hidden 64, 4 heads


def fuse_qkv(model, form, swap_kv=False, misaligned=False):
    """Replaces each layer's three projections by one fused projection split as `form`.
    swap_kv: k reads the v block and v the k block (a different model: must be refused).
    misaligned: (slices) k reads columns [D/2, 3D/2), straddling q and k (must be refused)."""
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    nodes = list(g.node)

    def consumers(value):
        return [n for n in nodes if value in n.input]

    readers = {}
    for node in nodes:
        if node.op_type == "MatMul" and node.input[1] in inits:
            readers.setdefault(node.input[0], []).append(node)
    triples = [mms for mms in readers.values() if len(mms) == 3]
    assert len(triples) == 2, "the ViT fixtures have two layers"
    removed, inserts = set(), []
    for layer, mms in enumerate(triples):
        roles = {}
        for mm in mms:
            [add] = consumers(mm.output[0])
            assert add.op_type == "Add"
            bias = next(i for i in add.input if i in inits)
            role = next(r for r in ("query", "key", "value") if f".{r}." in bias)
            roles[role] = (mm, add, bias)
        parts = [roles[r] for r in ("query", "key", "value")]
        weight = np.concatenate([numpy_helper.to_array(inits[p[0].input[1]]) for p in parts], 1)
        bias = np.concatenate([numpy_helper.to_array(inits[p[2]]) for p in parts])
        d = weight.shape[0]
        assert weight.shape == (d, 3 * d) and bias.shape == (3 * d,)
        pre = f"fused_qkv{layer}"
        g.initializer.extend([numpy_helper.from_array(weight, pre + ".weight"),
                              numpy_helper.from_array(bias, pre + ".bias")])
        new = [helper.make_node("MatMul", [mms[0].input[0], pre + ".weight"], [pre + "_mm"],
                                name=pre + "_matmul"),
               helper.make_node("Add", [pre + "_mm", pre + ".bias"], [pre + "_out"],
                                name=pre + "_add")]
        order = [0, 2, 1] if swap_kv else [0, 1, 2]  # which block each of q, k, v reads
        outs = [p[1].output[0] for p in parts]
        for mm, add, _ in parts:
            removed.update([id(mm), id(add)])
        if form == "split":
            g.initializer.append(numpy_helper.from_array(np.array([d, d, d], np.int64),
                                                         pre + "_sizes"))
            split_outs = [None] * 3
            for part, block in enumerate(order):
                split_outs[block] = outs[part]
            new.append(helper.make_node("Split", [pre + "_out", pre + "_sizes"], split_outs,
                                        name=pre + "_split", axis=-1))
        elif form == "slices":
            for part, block in enumerate(order):
                start = block * d - (d // 2 if misaligned and part == 1 else 0)
                consts = {"starts": [start], "ends": [start + d], "axes": [-1]}
                for key, value in consts.items():
                    g.initializer.append(numpy_helper.from_array(
                        np.array(value, np.int64), f"{pre}_{part}_{key}"))
                new.append(helper.make_node(
                    "Slice", [pre + "_out"] + [f"{pre}_{part}_{k}" for k in consts],
                    [outs[part]], name=f"{pre}_slice{part}"))
        else:  # timm: qkv.reshape(B, T, 3, H, dh).permute(2, 0, 3, 1, 4); q, k, v = qkv.unbind(0)
            g.initializer.append(numpy_helper.from_array(
                np.array([0, -1, 3, HEADS, d // HEADS], np.int64), pre + "_heads"))
            new += [helper.make_node("Reshape", [pre + "_out", pre + "_heads"], [pre + "_5d"],
                                     name=pre + "_reshape"),
                    helper.make_node("Transpose", [pre + "_5d"], [pre + "_3bhtd"],
                                     name=pre + "_transpose", perm=[2, 0, 3, 1, 4])]
            for part, block in enumerate(order):
                [reshape] = consumers(outs[part])
                [transpose] = consumers(reshape.output[0])
                assert reshape.op_type == "Reshape" and transpose.op_type == "Transpose"
                perm = list(transpose.attribute[0].ints)
                assert perm in ([0, 2, 1, 3], [0, 2, 3, 1])  # [0, 2, 3, 1]: TorchScript's K^T
                removed.update([id(reshape), id(transpose)])
                g.initializer.append(numpy_helper.from_array(np.array(block, np.int64),
                                                             f"{pre}_{part}_index"))
                head = f"{pre}_head{part}" if perm == [0, 2, 3, 1] else transpose.output[0]
                new.append(helper.make_node("Gather", [pre + "_3bhtd", f"{pre}_{part}_index"],
                                            [head], name=f"{pre}_gather{part}", axis=0))
                if head != transpose.output[0]:  # k.transpose(-2, -1)
                    new.append(helper.make_node("Transpose", [head], [transpose.output[0]],
                                                name=f"{pre}_kt{part}", perm=[0, 1, 3, 2]))
        first = min(nodes.index(mm) for mm in mms)
        inserts.append((nodes[first], new))
    rebuilt = []
    for node in nodes:
        for anchor, new in inserts:
            if node is anchor:
                rebuilt += new
        if id(node) not in removed:
            rebuilt.append(node)
    del g.node[:]
    g.node.extend(rebuilt)
    used = {i for n in g.node for i in n.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    del g.value_info[:]  # stale shapes of removed values; ORT infers them again
    onnx.checker.check_model(model)
    return model


def fused_path(sessions, fixture, form, **edit):
    return sessions.save(fuse_qkv(onnx.load(str(FIXTURES / fixture)), form, **edit))


@pytest.mark.parametrize("form", FUSED_FORMS)
@pytest.mark.parametrize("fixture", FUSED_FIXTURES)
def test_fused_qkv_surgery_preserves_the_model(sessions, fixture, form):
    original = str(FIXTURES / fixture)
    fused = onnx.load(fused_path(sessions, fixture, form))
    ops = [n.op_type for n in fused.graph.node]
    before = [n.op_type for n in onnx.load(original).graph.node]
    assert ops.count("MatMul") == before.count("MatMul") - 4  # 3 projections -> 1, two layers
    selector = {"split": "Split", "slices": "Slice", "gather": "Gather"}[form]
    assert ops.count(selector) >= (2 if form == "split" else 6)
    feed = pixels(original)
    ref = sessions.cpu(original, level="disable").run(None, feed)
    got = sessions.cpu(sessions.save(fused), level="disable").run(None, feed)
    for r, x in zip(ref, got):
        assert_matches(r, x, "host", f"{fixture} fused as {form} on the CPU EP")


@pytest.mark.parametrize("level", ["disable", "all"])
@pytest.mark.parametrize("form", FUSED_FORMS)
@pytest.mark.parametrize("fixture", FUSED_FIXTURES)
def test_fused_qkv_is_claimed_and_matches_the_cpu_ep(sessions, fixture, form, level):
    path = fused_path(sessions, fixture, form)
    npu, records = sessions.npuflow(path, level=level)
    claims = vision_claims(records)
    assert len(claims) == 1, vision_refusals(records)
    [claim] = claims
    assert claim["family"] == "vit" and claim["layers"] == 2 and claim["fused_qkv_layers"] == 2
    assert claim["hidden"] == 64 and claim["heads"] == HEADS and claim["heads_source"] == "graph"
    qkv = [w for w in claim["work"] if w["name"].endswith(".qkv")]
    assert [(w["k"], w["n"]) for w in qkv] == [(64, 192)] * 2
    feed = pixels(path)
    cpu = sessions.cpu(path, level=level)
    for name, ref, got in zip([o.name for o in cpu.get_outputs()], cpu.run(None, feed),
                              npu.run(None, feed)):
        assert_matches(ref, got, "host", f"{fixture} {form} {level} {name}")


@pytest.mark.parametrize("form", FUSED_FORMS)
def test_fused_qkv_on_the_simulator_matches_the_cpu_ep(sessions, form, capfd):
    path = fused_path(sessions, "vit_dynamo.onnx", form)
    npu, records = sessions.npuflow(path, level="all", options={"device": "sim", "prof": "1"})
    assert [c["fused_qkv_layers"] for c in vision_claims(records)] == [2], vision_refusals(records)
    feed = pixels(path)
    cpu = sessions.cpu(path, level="all")
    for name, ref, got in zip([o.name for o in cpu.get_outputs()], cpu.run(None, feed),
                              npu.run(None, feed)):
        assert_matches(ref, got, "sim", f"{form} {name}")
    del npu
    assert_every_call_on_the_device(ended_session_profile(capfd))


FUSED_NEAR_MISSES = {
    "swapped_kv_split": ("split", {"swap_kv": True}, {"fused_qkv_order"}),
    "swapped_kv_gather": ("gather", {"swap_kv": True}, {"fused_qkv_order"}),
    "misaligned_slices": ("slices", {"misaligned": True}, {"fused_qkv_split"}),
}


@pytest.mark.parametrize("level", ["disable", "basic"])
@pytest.mark.parametrize("case", sorted(FUSED_NEAR_MISSES))
def test_fused_qkv_near_misses_are_refused_and_run_unchanged(sessions, case, level):
    form, edit, reasons = FUSED_NEAR_MISSES[case]
    path = fused_path(sessions, "vit_dynamo.onnx", form, **edit)
    npu, records = sessions.npuflow(path, level=level)
    assert vision_claims(records) == []
    refused = vision_refusals(records)
    assert refused and set(refused) <= reasons, refused
    feed = pixels(path)
    ref = sessions.cpu(path, level=level).run(None, feed)
    original = sessions.cpu(str(FIXTURES / "vit_dynamo.onnx"), level=level).run(None, feed)[0]
    assert np.abs(ref[0] - original).max() > 1e-3  # the edit changes what the model computes
    for r, got in zip(ref, npu.run(None, feed)):
        np.testing.assert_allclose(got, r, rtol=1e-5, atol=1e-5)
