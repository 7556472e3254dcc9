"""DINOv2 with register tokens (issue #8): the matcher claims the R constant rows the embedding
inserts after its first P tokens and the kernel inserts them there. The committed fixtures
(dinov2_registers_*, gated with every other fixture in test_vision_encoders.py) insert 3
registers after the class token; here the insert is moved to other positions, and near misses
(rows from a runtime input, an insert on the channel axis, tokens reordered around the insert)
are refused and run unchanged."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import CLI
from gates import assert_every_call_on_the_device, assert_matches, ended_session_profile
from vision_fixtures import FIXTURES, MODELS, initializer, pixels, vision_claims, vision_refusals

REGISTER_MODELS = [m for m in MODELS if m.startswith("dinov2_registers")]
ENCODER = "dinov2_registers_encoder_dynamo.onnx"
REGISTERS, TOKENS, HIDDEN = 3, 17, 64  # the fixtures' config: 16 patches + the class token


def test_there_are_register_fixtures_of_both_exporters():
    assert len(REGISTER_MODELS) == 4
    assert {m.rsplit("_", 1)[1] for m in REGISTER_MODELS} == {"dynamo.onnx", "torchscript.onnx"}


@pytest.mark.parametrize("level", ["disable", "basic", "all"])
@pytest.mark.parametrize("model", REGISTER_MODELS + ["dinov2_dynamo.onnx"])
def test_the_claim_reports_the_registers_and_where_they_go(sessions, model, level):
    _, records = sessions.npuflow(str(FIXTURES / model), level=level)
    [claim] = vision_claims(records)
    assert claim["family"] == "dinov2" and claim["from_pixels"]
    with_registers = model.startswith("dinov2_registers")
    assert claim["registers"] == (REGISTERS if with_registers else 0)
    assert claim["register_position"] == (1 if with_registers else 0)


def test_explain_says_how_many_registers_and_where():
    out = subprocess.run([str(CLI), "explain", str(FIXTURES / ENCODER)], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "1 of 1 vision encoders claimed" in out
    assert f"registers: {REGISTERS} after token 1" in out


def register_concat(graph: onnx.GraphProto):
    """The Concat that inserts the registers, the embedding it reads and the register rows."""
    cat = next(n for n in graph.node if n.op_type == "Concat" and len(n.input) == 3
               and helper.get_attribute_value(n.attribute[0]) == 1)
    producers = {o: n for n in graph.node for o in n.output}
    embedding = producers[cat.input[0]].input[0]
    return cat, embedding, cat.input[1]


def replace_insert(graph: onnx.GraphProto, pieces, axis=1):
    """Rewrites the register insert as Concat(pieces, axis): each piece is the register rows'
    name or (begin, end, slice_axis) of the embedding. The old slices go."""
    cat, embedding, rows = register_concat(graph)
    dead = set(cat.input) - {rows}
    for node in [n for n in graph.node if set(n.output) & dead]:
        graph.node.remove(node)
    at = list(graph.node).index(cat)
    graph.node.remove(cat)
    inputs, nodes = [], []
    for i, piece in enumerate(pieces):
        if isinstance(piece, str):
            inputs.append(rows if piece == "registers" else piece)
            continue
        begin, end, slice_axis = piece
        names = [f"piece{i}_{k}" for k in ("begin", "end", "axis")]
        for name, value in zip(names, (begin, end, slice_axis)):
            if value == "shape":  # the end read from the embedding's shape, as TorchScript does
                graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64),
                                                                 f"piece{i}_dim"))
                nodes += [helper.make_node("Shape", [embedding], [f"piece{i}_shape"]),
                          helper.make_node("Gather", [f"piece{i}_shape", f"piece{i}_dim"],
                                           [name], axis=0)]
                continue
            graph.initializer.append(numpy_helper.from_array(np.array([value], np.int64), name))
        nodes.append(helper.make_node("Slice", [embedding] + names, [f"piece{i}"],
                                      name=f"piece{i}"))
        inputs.append(f"piece{i}")
    nodes.append(helper.make_node("Concat", inputs, list(cat.output), axis=axis,
                                  name="register_insert"))
    for offset, node in enumerate(nodes):
        graph.node.insert(at + offset, node)


def inserted_at(position: int, end=np.iinfo(np.int64).max) -> onnx.ModelProto:
    model = onnx.load(str(FIXTURES / ENCODER))
    pieces = ([(0, position, 1)] if position > 0 else []) + ["registers"]
    pieces += [(position, end, 1)] if position < TOKENS else []
    replace_insert(model.graph, pieces)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("level", ["disable", "basic", "all"])
@pytest.mark.parametrize("position", [0, 2, TOKENS])
def test_registers_inserted_elsewhere_are_claimed_and_match(sessions, position, level):
    path = sessions.save(inserted_at(position))
    npu, records = sessions.npuflow(path, level=level,
                                    config={"session.disable_cpu_ep_fallback": "1"})
    [claim] = vision_claims(records)
    assert claim["registers"] == REGISTERS and claim["register_position"] == position
    feed = pixels(path)
    ref = sessions.cpu(path, level=level).run(None, feed)[0]
    got = npu.run(None, feed)[0]
    assert got.shape == (1, TOKENS + REGISTERS, HIDDEN)
    assert_matches(ref, got, "host", f"registers at {position}, {level}")


@pytest.mark.parametrize("level", ["disable", "basic"])
def test_a_slice_that_ends_at_the_token_count_read_from_the_shape(sessions, level):
    path = sessions.save(inserted_at(2, end="shape"))
    npu, records = sessions.npuflow(path, level=level)
    [claim] = vision_claims(records)
    assert claim["registers"] == REGISTERS and claim["register_position"] == 2
    feed = pixels(path)
    assert_matches(sessions.cpu(path, level=level).run(None, feed)[0], npu.run(None, feed)[0],
                   "host", f"shape-derived end, {level}")


def test_registers_inserted_elsewhere_on_the_simulator(sessions, capfd):
    path = sessions.save(inserted_at(2))
    npu, records = sessions.npuflow(path, level="all", options={"device": "sim", "prof": "1"})
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    feed = pixels(path)
    assert_matches(sessions.cpu(path, level="all").run(None, feed)[0], npu.run(None, feed)[0],
                   "sim", "registers at 2")
    del npu  # the profile prints when the session ends
    assert_every_call_on_the_device(ended_session_profile(capfd))


def registers_from_an_input(model):
    _, _, rows = register_concat(model.graph)
    model.graph.initializer.remove(initializer(model, rows))
    model.graph.input.append(
        helper.make_tensor_value_info(rows, TensorProto.FLOAT, [1, REGISTERS, HIDDEN]))
    return model


def registers_on_the_channel_axis(model):
    # On the TorchScript export, whose reshapes follow the token count it is given.
    half = np.random.default_rng(5).standard_normal((1, TOKENS, HIDDEN // 2)).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(half, "channel_rows"))
    replace_insert(model.graph, [(0, HIDDEN // 2, 2), "channel_rows"], axis=2)
    return model


def tokens_reordered_around_the_registers(model):
    replace_insert(model.graph, [(1, TOKENS, 1), "registers", (0, 1, 1)])
    return model


NEAR_MISSES = {
    "runtime_rows": (registers_from_an_input, ENCODER, "are not constant"),
    "channel_axis": (registers_on_the_channel_axis, "dinov2_registers_encoder_torchscript.onnx",
                     "not on the token axis"),
    "reordered_tokens": (tokens_reordered_around_the_registers, ENCODER, "whole and in order"),
}


@pytest.mark.parametrize("level", ["disable", "basic"])
@pytest.mark.parametrize("case", sorted(NEAR_MISSES))
def test_register_near_misses_are_refused_and_run_unchanged(sessions, case, level):
    edit, fixture, detail = NEAR_MISSES[case]
    model = edit(onnx.load(str(FIXTURES / fixture)))
    onnx.checker.check_model(model)
    path = sessions.save(model)
    npu, records = sessions.npuflow(path, level=level)
    assert vision_claims(records) == []
    refusals = [x for r in records if r.get("matcher") == "vision" for x in r["refusals"]]
    assert [x["reason"] for x in refusals] == ["registers"], refusals
    assert detail in refusals[0]["detail"]
    feed = pixels(path)
    for extra in npu.get_inputs()[1:]:
        feed[extra.name] = np.random.default_rng(7).standard_normal(
            [d if isinstance(d, int) else 1 for d in extra.shape]).astype(np.float32)
    for ref, got in zip(sessions.cpu(path, level=level).run(None, feed), npu.run(None, feed)):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def with_an_all_true_mask(model):
    """transformers 5.x exports of DINOv2 with registers: the scores get Where(mask, 0, -max) of
    an all-true boolean mask, and SDPA guards fully masked rows with Where(IsNaN(P), 0, P)."""
    graph = model.graph
    tokens = TOKENS + REGISTERS
    graph.initializer.extend([
        numpy_helper.from_array(np.ones((1, 1, tokens, tokens), bool), "keep_all"),
        numpy_helper.from_array(np.array(0, np.float32), "mask_zero"),
        numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "mask_min")])
    for i, softmax in enumerate([n for n in graph.node if n.op_type == "Softmax"]):
        scores, probs = softmax.input[0], softmax.output[0]
        softmax.input[0], softmax.output[0] = f"masked{i}", f"raw_probs{i}"
        at = list(graph.node).index(softmax)
        graph.node.insert(at, helper.make_node("Where", ["keep_all", "mask_zero", "mask_min"],
                                               [f"mask{i}"], name=f"mask{i}"))
        graph.node.insert(at + 1, helper.make_node("Add", [scores, f"mask{i}"], [f"masked{i}"],
                                                   name=f"add_mask{i}"))
        graph.node.insert(at + 3, helper.make_node("IsNaN", [f"raw_probs{i}"], [f"nan{i}"],
                                                   name=f"nan{i}"))
        graph.node.insert(at + 4, helper.make_node("Where", [f"nan{i}", "mask_zero",
                                                             f"raw_probs{i}"], [probs],
                                                   name=f"nan_guard{i}"))
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("level", ["disable", "basic", "all"])
def test_an_all_true_mask_and_the_nan_guard_are_claimed_as_no_mask(sessions, level):
    path = sessions.save(with_an_all_true_mask(onnx.load(str(FIXTURES / ENCODER))))
    npu, records = sessions.npuflow(path, level=level,
                                    config={"session.disable_cpu_ep_fallback": "1"})
    [claim] = vision_claims(records)
    assert claim["attention_bias"] is False
    feed = pixels(path)
    assert_matches(sessions.cpu(path, level=level).run(None, feed)[0], npu.run(None, feed)[0],
                   "host", f"all-true mask, {level}")
