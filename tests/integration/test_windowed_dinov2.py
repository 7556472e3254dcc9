"""Windowed DINOv2, RF-DETR's backbone (issue #14 item 2), exported from the `rfdetr` package's own
module at random weights (tools/fixtures/export_windowed.py). The embedding and its partition
into windows stay on the CPU EP; the claim covers every block: the windowed ones over the windows
as sequences, the global ones over each image's windows merged (attention_groups). Gated against
the CPU EP on host and sim at every optimization level, and near misses (a merge that interleaves
the windows) are not claimed as a merge and still match."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from conftest import CLI, ROOT
from gates import assert_every_call_on_the_device, assert_matches, ended_session_profile
from test_verified_claims import verify_summary
from vision_fixtures import vision_claims, vision_refusals

sys.path.insert(0, str(ROOT / "tools" / "fixtures"))
import matrix_spec  # noqa: E402  (the cache root, the pins, the fixtures venvs)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "windowed"
# stem -> (image size, windows per side, global block indexes, window tokens)
CONFIGS = {
    "windowed_2x2": (56, 2, [1, 3], 1 + 4),
    "windowed_4x4": (112, 4, [0, 3], 1 + 3 + 4),
}
MODELS = [f"{stem}_{exporter}.onnx" for stem in CONFIGS for exporter in ("torchscript", "dynamo")]


def config(model: str):
    return CONFIGS[model.rsplit("_", 1)[0]]


def feed(size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


# stem -> (backbone, Conv claims, ConvTranspose claims): RF-DETR's projector after a backbone of
# CONFIGS. Conv: the patch embedding (the windowed claim starts after the embedding), and per
# pyramid level a CSP block of eight (1x1 in, three bottlenecks of two 3x3, 1x1 out); P5 adds its
# 3x3 stride-2 convolution, P3 its 2x2 stride-2 ConvTranspose.
PROJECTED = {"rfdetr_p4": ("windowed_2x2", 1 + 8, 0), "rfdetr_p3p5": ("windowed_4x4", 1 + 17, 1)}
PROJECTED_MODELS = [f"{stem}_{exporter}.onnx" for stem in PROJECTED
                    for exporter in ("torchscript", "dynamo")]


def test_the_fixtures_are_there():
    assert sorted(p.name for p in FIXTURES.glob("*.onnx")) == sorted(MODELS + PROJECTED_MODELS)


def claims_of(records, matcher: str) -> list[dict]:
    return [c for r in records if r.get("matcher") == matcher for c in r["claims"]]


@pytest.mark.parametrize("model", PROJECTED_MODELS)
def test_rfdetr_projector_convolutions_are_claimed_and_each_checked(sessions, capfd, model):
    """The CSP projector's convolutions claimed where the device has conv (issue #14 item 2),
    beside the windowed encoder: every Conv and ConvTranspose of the model a claim, none refused;
    on sim, verify=1 checks each claim against the host on its own input and disables none; the
    pyramid levels within each device's gate (sim's chain bar: up to 18 fp16 convolutions follow
    the encoder)."""
    backbone, convs, transposes = PROJECTED[model.rsplit("_", 1)[0]]
    size = CONFIGS[backbone][0]
    path = str(FIXTURES / model)
    pixels = feed(size, seed=2)
    refs = sessions.cpu(path, level="all").run(None, pixels)
    for device in ("host", "sim"):
        options = {"device": device, **({"verify": "1", "prof": "1"} if device == "sim" else {})}
        capfd.readouterr()
        npu, records = sessions.npuflow(path, level="all", options=options)
        assert [c["family"] for c in vision_claims(records)] == ["dinov2_windowed"]
        assert len(claims_of(records, "conv")) == convs
        assert len(claims_of(records, "conv_transpose")) == transposes
        refused = [x for r in records if r.get("matcher") in ("conv", "conv_transpose")
                   for x in r["refusals"]]
        assert not refused, refused
        for i, (ref, got) in enumerate(zip(refs, npu.run(None, pixels))):
            assert_matches(ref, got, "host" if device == "host" else "sim_chain",
                           f"{model} pyramid level {i}")
        del npu
        if device == "sim":
            gc.collect()
            checked, disabled, _ = verify_summary(capfd.readouterr().err)
            assert (checked, disabled) == (1 + convs + transposes, 0)


@pytest.mark.parametrize("model", ["windowed_2x2_dynamo.onnx", "windowed_4x4_torchscript.onnx"])
def test_explain_names_the_windows_and_the_global_blocks(model):
    _, windows, global_blocks, window_tokens = config(model)
    out = subprocess.run([str(CLI), "explain", str(FIXTURES / model)], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "1 of 1 vision encoders claimed" in out and "dinov2_windowed" in out, out
    assert f"partition into {window_tokens}-token windows" in out
    blocks = ", ".join(map(str, global_blocks))
    assert f"global blocks {blocks} attend over {windows * windows} windows each" in out, out


# The TorchScript graph computes its window partition's shapes at run time; unoptimized, shape
# inference leaves the windows' token count unknown (ORT's constant folding resolves it).
CASES = [(m, level) for m in MODELS for level in ("disable", "basic", "all")
         if not (level == "disable" and m.endswith("torchscript.onnx"))]


@pytest.mark.parametrize("model,level", CASES)
def test_every_block_is_claimed_with_its_windows_and_matches_on_host(sessions, model, level):
    size, windows, global_blocks, window_tokens = config(model)
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, level=level)
    [claim] = vision_claims(records)
    assert claim["family"] == "dinov2_windowed" and not claim["from_pixels"]
    groups = [windows * windows if i in global_blocks else 1 for i in range(4)]
    assert claim["attention_groups"] == groups
    assert f"{window_tokens}-token windows" in claim["note"]
    pixels = feed(size)
    refs = sessions.cpu(path, level=level).run(None, pixels)
    gots = npu.run(None, pixels)
    assert len(refs) == len(gots) >= 1
    for i, (ref, got) in enumerate(zip(refs, gots)):
        assert_matches(ref, got, "host", f"{model} stage output {i}, {level}")


@pytest.mark.parametrize("model", MODELS)
def test_the_simulator_runs_every_call_within_its_gate(sessions, capfd, model):
    size = config(model)[0]
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, level="all", options={"device": "sim", "prof": "1"})
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    pixels = feed(size, seed=1)
    refs = sessions.cpu(path, level="all").run(None, pixels)
    for i, (ref, got) in enumerate(zip(refs, npu.run(None, pixels))):
        assert_matches(ref, got, "sim", f"{model} stage output {i}")
    del npu  # the profile prints when the session ends
    assert_every_call_on_the_device(ended_session_profile(capfd))


@pytest.mark.parametrize("model", [m for m in MODELS if m.endswith("torchscript.onnx")])
def test_an_unresolved_window_size_is_refused_and_runs_unchanged(sessions, model):
    path = str(FIXTURES / model)
    # conv=0: the refused encoder's patch embedding would be claimed as a Conv of its own.
    npu, records = sessions.npuflow(path, level="disable", options={"conv": "0"})
    assert not vision_claims(records)
    assert vision_refusals(records) == ["no_block"]
    pixels = feed(config(model)[0])
    refs = sessions.cpu(path, level="disable").run(None, pixels)
    for ref, got in zip(refs, npu.run(None, pixels)):
        np.testing.assert_array_equal(ref, got)


def global_merges(graph: onnx.GraphProto, windows: int):
    """The Reshapes that merge an image's windows into one sequence ([N, T, D] -> [N/g, g T, D])."""
    inferred = onnx.shape_inference.infer_shapes(onnx.ModelProto(graph=graph, opset_import=[
        helper.make_opsetid("", 18)]))
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in inferred.graph.value_info}
    return [n for n in graph.node if n.op_type == "Reshape" and len(dims.get(n.input[0], [])) == 3
            and len(dims.get(n.output[0], [])) == 3
            and dims[n.input[0]][0] == windows * windows * dims[n.output[0]][0]
            and dims[n.output[0]][1] == windows * windows * dims[n.input[0]][1]]


@pytest.mark.parametrize("level", ["disable", "all"])
def test_a_merge_that_interleaves_the_windows_is_not_one(sessions, level):
    """The first global block's merge goes through [T, N, D] first: its sequence then interleaves
    the windows' tokens. That is no regrouping of consecutive sequences, so the claim must stop
    before that block (or not be made) and the output must still be the CPU EP's."""
    model = onnx.load(str(FIXTURES / "windowed_2x2_dynamo.onnx"))
    merges = global_merges(model.graph, windows=2)
    assert len(merges) == 2, [n.name for n in merges]
    merge = merges[0]
    interleaved = merge.input[0] + "_interleaved"
    at = list(model.graph.node).index(merge)
    model.graph.node.insert(at, helper.make_node("Transpose", [merge.input[0]], [interleaved],
                                                 perm=[1, 0, 2], name="interleave"))
    merge.input[0] = interleaved
    onnx.checker.check_model(model)
    path = sessions.save(model)
    npu, records = sessions.npuflow(path, level=level)
    for claim in vision_claims(records):
        assert 4 not in claim["attention_groups"], claim["attention_groups"]
    pixels = feed(56, seed=2)
    refs = sessions.cpu(path, level=level).run(None, pixels)
    for i, (ref, got) in enumerate(zip(refs, npu.run(None, pixels))):
        assert_matches(ref, got, "host", f"interleaved merge, stage output {i}")


# --- generated configurations ---------------------------------------------------------------
# MATRIX_COUNT configurations drawn from MATRIX_SEED by tools/fixtures/export_windowed.py
# (matrix_config: widths, heads, depths, 1-4 windows per side, registers, which blocks are
# windowed, which stages are out, exporter, opset, attention), generated into the cache once.
# `make test-windowed-matrix` runs a larger draw (NPUFLOW_WINDOWED_SEED / _COUNT).
MATRIX_SEED = int(os.environ.get("NPUFLOW_WINDOWED_SEED", "7"))
MATRIX_COUNT = int(os.environ.get("NPUFLOW_WINDOWED_COUNT", "12"))
EXPORTER = ROOT / "tools" / "fixtures" / "export_windowed.py"


@pytest.fixture(scope="module")
def matrix():
    return matrix_spec.generated_matrix(
        "windowed-matrix", EXPORTER, MATRIX_SEED, MATRIX_COUNT,
        ("FIX_TORCH", "FIX_TRANSFORMERS_NEXT", "FIX_ONNXSCRIPT", "PY_ONNX", "RFDETR_VERSION"),
        "next")


def test_the_generated_configurations_cover_the_axes(matrix):
    _, models = matrix
    assert len(models) == MATRIX_COUNT
    assert {m["num_windows"] for m in models} >= {1, 2, 3, 4}
    assert {m["exporter"] for m in models} == {"torchscript", "dynamo"}
    assert {m["attention"] for m in models} == {"eager", "sdpa"}
    assert any(m["num_register_tokens"] for m in models)
    global_blocks = [i for m in models for i in range(int(m["out_features"][-1][5:]))
                     if i not in m["window_block_indexes"] and m["num_windows"] > 1]
    assert len(global_blocks) >= 5


@pytest.mark.parametrize("index", range(MATRIX_COUNT))
def test_a_generated_configuration_is_claimed_whole_and_matches(matrix, sessions, index):
    directory, models = matrix
    model = models[index]
    path = str(directory / model["file"])
    depth = int(model["out_features"][-1][5:])  # the blocks past the last stage out are not run
    windows = model["num_windows"] ** 2
    groups = [1 if i in model["window_block_indexes"] else windows for i in range(depth)]
    pixels = feed(model["image"], seed=index)
    level = "basic" if index % 2 else "all"
    refs = sessions.cpu(path, level=level).run(None, pixels)
    for device in ("host", "sim"):
        npu, records = sessions.npuflow(path, level=level, options={"device": device})
        [claim] = vision_claims(records)
        assert claim["attention_groups"] == groups, model
        assert claim["layers"] == depth
        for i, (ref, got) in enumerate(zip(refs, npu.run(None, pixels))):
            assert_matches(ref, got, device, f"{model['file']} stage output {i}, {level}")
