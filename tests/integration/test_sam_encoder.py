"""SAM's ViT-Det image encoder (issue #14 item 1): the blocks on the channels-last token grid are
claimed from the grid on (the patch and position embedding stay on the CPU EP, and so does the
conv neck), windowed blocks with their Pad / 6-D partition and crop proven by index replay, global
blocks, and the decomposed relative-position bias read off its two Einsums into the kernel's
tables. Gated against the CPU EP on host and sim, on the committed tiny SAM (both exporters, every
optimization level) and on image encoders generated from random configurations (window sizes that
do and do not divide the grid, windows past the grid, relative positions on and off, eager and SDPA
attention, both exporters, one or two images). Near misses are refused with their reason and run
unchanged. The whole model's masks are gated in test_conv_transpose.py."""
from __future__ import annotations

import functools
import gc
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import CLI, ROOT
from gates import assert_every_call_on_the_device, assert_matches, ended_session_profile
from test_verified_claims import verify_summary
from vision_fixtures import vision_claims, vision_refusals, with_extra_outputs

sys.path.insert(0, str(ROOT / "tools" / "fixtures"))
import matrix_spec  # noqa: E402  (the cache root, the pins, the fixtures venvs)

SAMS = ROOT / "tests" / "fixtures" / "sam"
MODELS = ["sam_tiny_torchscript.onnx", "sam_tiny_dynamo.onnx"]
LEVELS = ["disable", "basic", "all"]


def feed(seed: int = 0, points: int = 5):
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.standard_normal((1, 3, 64, 64)).astype(np.float32),
            "input_points": rng.uniform(0, 64, (1, 1, points, 2)).astype(np.float32),
            "input_labels": rng.integers(0, 2, (1, 1, points)).astype(np.int64)}


def with_encoder_output(sessions, model: str, level: str) -> tuple[str, str]:
    """A copy of the fixture that also returns the claimed encoder's output (its one exit: the
    last block's output, which the neck reads), named as the claim at `level` names it."""
    path = str(SAMS / model)
    _, records = sessions.npuflow(path, level=level)
    [claim] = vision_claims(records)
    [exit_value] = [e["value"] for e in claim["exits"]]
    return sessions.save(with_extra_outputs(onnx.load(path), [exit_value])), exit_value


@pytest.mark.parametrize("model", MODELS)
def test_explain_names_the_grid_its_windows_and_the_relative_positions(model):
    out = subprocess.run([str(CLI), "explain", str(SAMS / model)], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "1 of 1 vision encoders claimed" in out and " sam " in out, out
    assert "claim starts at the 8x8 token grid" in out, out
    assert ("8x8 token grid: blocks 0 attend in 4x4 windows, blocks 1 over the whole grid; "
            "relative positions in 2 blocks") in out, out


# The unoptimized TorchScript graph computes its q/k scale from shapes at run time and gathers its
# relative-position tables by Range-computed indices from a resized table; ORT's constant folding
# (level basic and up) makes both constants. Unfolded, it is refused (below).
CASES = [(m, level) for m in MODELS for level in LEVELS
         if not (level == "disable" and m.endswith("torchscript.onnx"))]


@pytest.mark.parametrize("model,level", CASES)
def test_every_block_is_claimed_and_the_encoder_matches_on_host(sessions, model, level):
    path, exit_value = with_encoder_output(sessions, model, level)
    npu, records = sessions.npuflow(path, level=level)
    [claim] = vision_claims(records)
    assert claim["family"] == "sam" and not claim["from_pixels"]
    assert claim["layers"] == 2 and claim["heads"] == 2 and claim["hidden"] == 32
    assert claim["grid"] == [8, 8] and claim["grid_windows"] == [4, 0]
    assert claim["rel_pos_layers"] == 2
    inputs = feed(seed=1)
    names = [o.name for o in npu.get_outputs()]
    refs = dict(zip(names, sessions.cpu(path, level=level).run(None, inputs)))
    gots = dict(zip(names, npu.run(None, inputs)))
    assert_matches(refs[exit_value], gots[exit_value], "host", f"{model} encoder, {level}")
    assert_matches(refs["pred_masks"], gots["pred_masks"], "host", f"{model} masks, {level}")


@pytest.mark.parametrize("model", MODELS)
def test_the_simulator_runs_every_call_within_its_gate(sessions, capfd, model):
    path, exit_value = with_encoder_output(sessions, model, "all")
    npu, records = sessions.npuflow(path, options={"device": "sim", "prof": "1"})
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    inputs = feed(seed=2)
    names = [o.name for o in npu.get_outputs()]
    ref = dict(zip(names, sessions.cpu(path).run(None, inputs)))[exit_value]
    got = dict(zip(names, npu.run(None, inputs)))[exit_value]
    assert_matches(ref, got, "sim", f"{model} encoder")
    del npu  # the profile prints when the session ends
    assert_every_call_on_the_device(ended_session_profile(capfd))


def test_the_unfolded_torchscript_graph_is_refused_and_runs_unchanged(sessions):
    path = str(SAMS / "sam_tiny_torchscript.onnx")
    npu, records = sessions.npuflow(path, level="disable")
    assert not vision_claims(records)
    assert vision_refusals(records) == ["attention_shape"]
    inputs = feed(seed=4)
    for ref, got in zip(sessions.cpu(path, level="disable").run(None, inputs), npu.run(None, inputs)):
        assert_matches(ref, got, "host", "unfolded TorchScript SAM")


# Near misses on the dynamo graph: each edit keeps a valid model that computes something else, so
# the matcher must refuse it by meaning, with its reason, and the model must run unchanged.
def mutate_rows_term_to_columns(graph: onnx.GraphProto):
    """The rows term's Einsum contracts over the query's columns instead (both terms columns)."""
    einsum = next(n for n in graph.node if n.op_type == "Einsum")
    equation = next(a for a in einsum.attribute if a.name == "equation")
    assert equation.s == b"bhwc,hkc->bhwk"
    equation.s = b"bhwc,wkc->bhwk"


def mutate_unpartition_order(graph: onnx.GraphProto):
    """The windows go back with their window rows and window columns swapped."""
    unpartition = [n for n in graph.node if n.op_type == "Transpose"
                   and list(next(a for a in n.attribute if a.name == "perm").ints)
                   == [0, 1, 3, 2, 4, 5]][1]  # the first partitions, the second unpartitions
    unpartition.attribute[0].CopyFrom(onnx.helper.make_attribute("perm", [0, 2, 3, 1, 4, 5]))


def mutate_rel_pos_reads_keys(graph: onnx.GraphProto):
    """The relative-position bias reads the keys' split instead of the queries'."""
    einsum = next(n for n in graph.node if n.op_type == "Einsum")
    view = next(n for n in graph.node if einsum.input[0] in n.output)
    squeezes = [n for n in graph.node if n.op_type == "Squeeze"]
    assert view.input[0] == squeezes[0].output[0]
    view.input[0] = squeezes[1].output[0]


@pytest.mark.parametrize("mutate,reason", [(mutate_rows_term_to_columns, "rel_pos_bias"),
                                           (mutate_unpartition_order, "window_partition"),
                                           (mutate_rel_pos_reads_keys, "rel_pos_bias")])
def test_a_near_miss_is_refused_with_its_reason_and_runs_unchanged(sessions, mutate, reason):
    model = onnx.load(str(SAMS / "sam_tiny_dynamo.onnx"))
    mutate(model.graph)
    onnx.checker.check_model(model)
    path = sessions.save(model)
    npu, records = sessions.npuflow(path)
    assert not vision_claims(records)
    assert vision_refusals(records) == [reason]
    inputs = feed(seed=3)
    for ref, got in zip(sessions.cpu(path).run(None, inputs), npu.run(None, inputs)):
        assert_matches(ref, got, "host", f"{mutate.__name__}")


# --- ViT-B, SAM's real size ------------------------------------------------------------------
def vit_b_path() -> Path:
    """SamModel at SamConfig's defaults (tools/fixtures/export_sam.py --vit-b), exported into the
    cache once per pinned version of the exporter's stack and of the exporter itself."""
    pins = matrix_spec.pins()
    parts = [f"{k}={pins[k]}" for k in ("FIX_TORCH", "FIX_TRANSFORMERS", "PY_ONNX")]
    parts.append(hashlib.sha1(EXPORTER.read_bytes()).hexdigest())
    key = hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]
    path = matrix_spec.cache_root() / f"sam-vit-b-{key}.onnx"
    if not path.exists():
        partial = path.with_name(path.name + ".partial")
        subprocess.run([matrix_spec.venv_python("pinned"), str(EXPORTER), "--vit-b", str(partial)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        partial.rename(path)
    return path


@pytest.mark.full_suite_only(reason="a 4096-token grid through 12 blocks takes minutes under the "
                             "sanitizers; test_every_block_is_claimed_and_the_encoder_matches_on_"
                             "host runs the same code at test size")
def test_vit_b_is_claimed_whole_and_matches_on_host_and_sim(sessions):
    """ViT-B: 1024x1024 pixels, a 64x64 grid padded to 70x70 for windows of 14, global blocks 2, 5,
    8 and 11. The encoder's output is gated on both devices, and the mask of a point prompt too
    (IoU >= 0.999 against the CPU EP's)."""
    model = onnx.load(str(vit_b_path()))
    _, records = sessions.npuflow(sessions.save(model), options={"device": "host"})
    [claim] = vision_claims(records)
    assert claim["family"] == "sam" and claim["layers"] == 12 and claim["hidden"] == 768
    assert claim["grid"] == [64, 64] and claim["rel_pos_layers"] == 12
    assert claim["grid_windows"] == [0 if i in (2, 5, 8, 11) else 14 for i in range(12)]
    [exit_value] = [e["value"] for e in claim["exits"]]
    path = sessions.save(with_extra_outputs(model, [exit_value]))
    del model
    rng = np.random.default_rng(5)
    inputs = {"pixel_values": rng.standard_normal((1, 3, 1024, 1024)).astype(np.float32),
              "input_points": rng.uniform(0, 1024, (1, 1, 1, 2)).astype(np.float32),
              "input_labels": np.ones((1, 1, 1), np.int64)}
    names = ["iou_scores", "pred_masks", exit_value]
    ref = dict(zip(names, sessions.cpu(path).run(names, inputs)))
    for device in ("host", "sim"):
        npu, records = sessions.npuflow(path, options={"device": device})
        assert len(vision_claims(records)) == 1
        got = dict(zip(names, npu.run(names, inputs)))
        assert_matches(ref[exit_value], got[exit_value], device, "ViT-B encoder")
        masks_ref, masks_got = ref["pred_masks"] > 0, got["pred_masks"] > 0
        iou = (masks_ref & masks_got).sum() / max((masks_ref | masks_got).sum(), 1)
        assert iou >= 0.999, f"{device}: mask IoU {iou}"
        del npu


# --- generated image encoders ----------------------------------------------------------------
# MATRIX_COUNT configurations drawn from MATRIX_SEED by tools/fixtures/export_sam.py --matrix,
# generated into the cache once, under the pinned transformers; the first NEXT_COUNT of them again
# under the current 5.x (FIX_TRANSFORMERS_NEXT). `make test-sam-matrix` runs a larger draw.
MATRIX_SEED = int(os.environ.get("NPUFLOW_SAM_SEED", "11"))
MATRIX_COUNT = int(os.environ.get("NPUFLOW_SAM_COUNT", "12"))
NEXT_COUNT = int(os.environ.get("NPUFLOW_SAM_NEXT_COUNT", "6"))
EXPORTER = ROOT / "tools" / "fixtures" / "export_sam.py"
COUNTS = {"pinned": MATRIX_COUNT, "next": NEXT_COUNT}
TRANSFORMERS_PIN = {"pinned": "FIX_TRANSFORMERS", "next": "FIX_TRANSFORMERS_NEXT"}


@functools.cache
def generated(version: str):
    return matrix_spec.generated_matrix(
        "sam-matrix" if version == "pinned" else "sam-matrix-next", EXPORTER, MATRIX_SEED,
        COUNTS[version], ("FIX_TORCH", TRANSFORMERS_PIN[version], "FIX_ONNXSCRIPT", "PY_ONNX"),
        version)


@pytest.fixture(scope="module")
def matrix():
    return generated("pinned")


def expected_windows(config: dict) -> list[int]:
    """Each block's window as the claim reports it: 0 for a global block, and for a window that
    is the grid itself (one window, no padding: the whole grid attends either way)."""
    grid = config["image_size"] // config["patch_size"]
    window = config["window_size"]
    return [0 if i in config["global_attn_indexes"] or window == grid else window
            for i in range(config["num_hidden_layers"])]


def test_the_generated_configurations_cover_the_axes(matrix):
    _, models = matrix
    assert len(models) == MATRIX_COUNT
    grids = [(m["image_size"] // m["patch_size"], m["window_size"]) for m in models]
    assert any(g % w for g, w in grids) and any(w > g for g, w in grids)
    assert {m["exporter"] for m in models} == {"torchscript", "dynamo"}
    assert {m["attention"] for m in models} == {"eager", "sdpa"}
    assert {m["batch"] for m in models} == {1, 2}
    assert any(not m["use_rel_pos"] for m in models) and any(m["global_attn_indexes"]
                                                             for m in models)


def expected_convs(config: dict) -> list[tuple]:
    """(kernel h, kernel w, ic, oc, strides, pads) of the image encoder's convolutions, each a
    Conv claim of its own: the patch embedding (3 colour planes, kernel and stride the patch) and
    the neck (a 1x1 to output_channels, then a padded 3x3)."""
    patch, hidden, out = config["patch_size"], config["hidden_size"], config["output_channels"]
    return sorted([(patch, patch, 3, hidden, patch, patch, 0, 0, 0, 0),
                   (1, 1, hidden, out, 1, 1, 0, 0, 0, 0), (3, 3, out, out, 1, 1, 1, 1, 1, 1)])


@pytest.mark.parametrize("version,index", [(v, i) for v, count in COUNTS.items()
                                           for i in range(count)])
def test_a_generated_configuration_is_claimed_whole_and_matches(sessions, capfd, version, index):
    directory, models = generated(version)
    config = models[index]
    path = str(directory / config["file"])
    size = config["image_size"]
    rng = np.random.default_rng(index)
    pixels = {"pixel_values": rng.standard_normal((config["batch"], 3, size, size))
              .astype(np.float32)}
    level = "basic" if index % 2 else "all"
    [ref] = sessions.cpu(path, level=level).run(None, pixels)
    for device in ("host", "sim"):
        # On sim, verify=1 checks each claimed node's first run against the host on its own
        # input: the encoder and each of the three convolutions.
        options = {"device": device, **({"verify": "1", "prof": "1"} if device == "sim" else {})}
        capfd.readouterr()
        npu, records = sessions.npuflow(path, level=level, options=options)
        [claim] = vision_claims(records)
        assert claim["family"] == "sam" and claim["layers"] == config["num_hidden_layers"]
        assert claim["grid_windows"] == expected_windows(config), config
        assert claim["rel_pos_layers"] == (claim["layers"] if config["use_rel_pos"] else 0)
        [conv_record] = [r for r in records if r.get("matcher") == "conv"]
        convs = sorted((*c["kernel"], c["ic"], c["oc"], *c["strides"], *c["pads"])
                       for c in conv_record["claims"])
        assert convs == expected_convs(config), (convs, conv_record["refusals"])
        [got] = npu.run(None, pixels)
        assert_matches(ref, got, device, f"{version} {config['file']} image embedding, {level}")
        del npu
        if device == "sim":
            gc.collect()
            assert verify_summary(capfd.readouterr().err)[:2] == (4, 0)
