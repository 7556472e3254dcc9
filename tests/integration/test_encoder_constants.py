"""Constants that are valid ONNX but not what the encoder kernel reads (issue #8, item 6): a
LayerNorm scale, a bias or a LayerScale of one element broadcasts in ONNX, and a position
embedding may broadcast over tokens. The matcher refuses each (reason `constant_shape`), the
model runs unchanged on the CPU EP, and the unmutated model is still claimed."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from vision_fixtures import FIXTURES, pixels, vision_claims, vision_refusals


def initializer(model, name):
    return next(i for i in model.graph.initializer if i.name == name)


def replace(model, name, array):
    init = initializer(model, name)
    init.CopyFrom(numpy_helper.from_array(np.asarray(array, np.float32), name))


def first(model, op_type, constant_input=None):
    """The first `op_type` node (with a constant at input index `constant_input`)."""
    inits = {i.name for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != op_type:
            continue
        if constant_input is None or (len(node.input) > constant_input and
                                      node.input[constant_input] in inits):
            return node
    raise AssertionError(f"no {op_type} in the fixture")


def scalar_of(model, name):
    return numpy_helper.to_array(initializer(model, name)).ravel()[:1] * 1.5


def layernorm_scale(model):
    norm = first(model, "LayerNormalization", 1)
    replace(model, norm.input[1], scalar_of(model, norm.input[1]))


def layernorm_bias(model):
    norm = first(model, "LayerNormalization", 2)
    replace(model, norm.input[2], scalar_of(model, norm.input[2]) + 0.3)


def projection_bias(model):
    inits = {i.name for i in model.graph.initializer}
    add = next(n for n in model.graph.node if n.op_type == "Add" and
               any(i in inits and len(numpy_helper.to_array(initializer(model, i)).shape) == 1
                   for i in n.input))
    bias = next(i for i in add.input if i in inits)
    replace(model, bias, scalar_of(model, bias) + 0.2)


def layer_scale(model):
    inits = {i.name for i in model.graph.initializer}
    mul = next(n for n in model.graph.node if n.op_type == "Mul" and any(
        i in inits and "layer_scale" in i.lower() or (i in inits and "lambda" in i.lower())
        for i in n.input))
    scale = next(i for i in mul.input if i in inits)
    replace(model, scale, scalar_of(model, scale))


def broadcast_position_embedding(model):
    table = next(i for i in model.graph.initializer
                 if numpy_helper.to_array(i).ndim == 3 and numpy_helper.to_array(i).shape[1] > 1)
    values = numpy_helper.to_array(table)
    replace(model, table.name, values[:, :1, :])  # one row, broadcast over every token


CASES = {
    "layernorm_scale_1": ("vit_dynamo.onnx", layernorm_scale),
    "layernorm_bias_1": ("vit_dynamo.onnx", layernorm_bias),
    "projection_bias_1": ("vit_torchscript.onnx", projection_bias),
    "layer_scale_1": ("dinov2_dynamo.onnx", layer_scale),
    "position_embedding_broadcast": ("vit_dynamo.onnx", broadcast_position_embedding),
}


@pytest.mark.parametrize("level", ["disable", "all"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_broadcast_constants_are_refused_and_run_unchanged(sessions, case, level):
    fixture, edit = CASES[case]
    model = onnx.load(str(FIXTURES / fixture))
    edit(model)
    onnx.checker.check_model(model)
    path = sessions.save(model)
    cpu = sessions.cpu(path, level=level)
    feed = pixels(path)
    reference = cpu.run(None, feed)  # the CPU EP accepts the broadcast form
    npu, records = sessions.npuflow(path, level=level)
    assert vision_claims(records) == [], case
    refused = vision_refusals(records)
    assert refused, case
    # The element-count check names the constant; a broadcast bias may already fail the
    # linear-projection match (its bias must have N elements) before that.
    assert set(refused) <= {"constant_shape", "no_block", "attention_shape", "block_shape"}, refused
    for ref, got in zip(reference, npu.run(None, feed)):
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fixture", sorted({f for f, _ in CASES.values()}))
def test_the_unmutated_fixtures_are_claimed(sessions, fixture):
    _, records = sessions.npuflow(str(FIXTURES / fixture), level="all")
    assert len(vision_claims(records)) == 1, vision_refusals(records)
