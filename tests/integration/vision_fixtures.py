"""The committed vision-encoder fixtures (tests/fixtures/vision) and what the tests read from
them: the manifest, a seeded input, the claim records, and graph edits shared by several tests."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper

from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "vision"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
MODELS = sorted(MANIFEST["files"])
ENCODER_ONLY = [m for m in MODELS if MANIFEST["files"][m]["encoder_only"]]
DEPTH_MODELS = [m for m in MODELS if MANIFEST["files"][m]["family"] == "depth_anything"]


def pixels(path, batch=1, seed=0):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shape = [batch if not isinstance(d, int) else d for d in session.get_inputs()[0].shape]
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return {session.get_inputs()[0].name: data}


def vision_claims(records):
    return [c for r in records for c in r["claims"] if c["kind"] == "vision_encoder"]


def vision_refusals(records):
    return [x["reason"] for r in records if r.get("matcher") == "vision" for x in r["refusals"]]


def norm_taps(claim) -> list[str]:
    """The values the claimed encoder exits through a LayerNorm after a layer (Depth Anything's
    four taps to the neck), in layer order."""
    taps = sorted((e for e in claim["exits"] if e["norm"] and e["stream_index"] > 0),
                  key=lambda e: e["stream_index"])
    return [e["value"] for e in taps]


def with_extra_outputs(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """A copy of model that also returns the named interior values (float tensors)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for name in names:
        assert name in inferred, f"{name} is not a value of the graph"
        assert inferred[name].type.tensor_type.elem_type == TensorProto.FLOAT, name
        copy.graph.output.append(inferred[name])
    onnx.checker.check_model(copy)
    return copy


def initializer(model: onnx.ModelProto, name: str):
    return next(i for i in model.graph.initializer if i.name == name)


def scale_initializer(model: onnx.ModelProto, name: str, factor: float) -> None:
    tensor = initializer(model, name)
    tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) * np.float32(factor),
                                            name))


def tapped(sessions, model: str, edit=None):
    """A copy of the fixture that also returns its four taps, named as the claim of the fixture
    (at level `disable`: the graph's own names) names them. edit(graph, claim), if given, changes
    the copy first. Returns (path, tap names)."""
    path = str(FIXTURES / model)
    _, records = sessions.npuflow(path, level="disable")
    [claim] = vision_claims(records)
    taps = norm_taps(claim)
    assert len(taps) == 4, claim["exits"]
    graph = onnx.load(path)
    if edit:
        edit(graph, claim)
    return sessions.save(with_extra_outputs(graph, taps)), taps
