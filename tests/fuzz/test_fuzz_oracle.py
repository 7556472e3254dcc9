"""The fuzz oracle's own references must be right, and its rescue steps must not hide a claim
that computes something else.

- The float64 evaluation (ONNX's reference evaluator) agrees with the CPU EP on convolutions in
  every auto_pad form at random sizes and strides, and on every committed fixture it evaluates
  in seconds: ONNX 1.20's evaluator pads VALID as SAME from the wrong dims, so the fuzzer
  rewrites auto_pad as explicit pads first.
- The float64 evaluation is not consulted where the CPU EP's own fp32 evaluation of the claim
  overflows (float64 would vouch for a kernel that ignores fp32's range).
- A claim that is wrong (the sim corrupting one element of every device call) is a mismatch
  after every rescue (unoptimized CPU EP, the claims' exits, float64, fp16 operands,
  ill-conditioning), also on a model whose float64 evaluation does run; and so is one on the
  fuzz finds that only the CPU EP at level basic, or fp16's own error, saved.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuzz import feed_spec, with_base
from fuzz_child import cpu_ep_at, float64_reference, fp32_overflow, make_feeds
from fuzz_oracle import MATCHING, MISMATCH, classify
from fuzz_runner import run_jobs
from fuzz_seeds import FIXTURES, all_seeds, fixture_path


def conv_model(rng: random.Random):
    """A Conv with a drawn auto_pad, kernel, stride, dilation and input size, its feeds, and what
    the configuration was."""
    mode = rng.choice(["VALID", "SAME_UPPER", "SAME_LOWER", "NOTSET"])
    kernel = [rng.randint(1, 5) for _ in range(2)]
    strides = [1, 1] if rng.random() < 0.3 else [rng.randint(1, 4) for _ in range(2)]
    # ONNX Runtime runs no dilation with SAME padding.
    dilations = [1, 1] if mode.startswith("SAME") else [rng.randint(1, 2) for _ in range(2)]
    size = [rng.randint((k - 1) * d + 1, 19) for k, d in zip(kernel, dilations)]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations}
    if mode == "NOTSET":
        attrs["pads"] = [rng.randint(0, k - 1) for k in kernel * 2]
    else:
        attrs["auto_pad"] = mode
    data = np.random.default_rng(rng.randrange(2**31))
    x = data.standard_normal([1, 3, *size]).astype(np.float32)
    w = data.standard_normal([4, 3, *kernel]).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, {"x": x}, attrs


def cpu_ep(model: onnx.ModelProto, feeds: dict) -> list:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def test_float64_reference_pads_convolutions_as_onnx_defines():
    rng = random.Random(20261202)
    forms = set()
    for _ in range(60):
        model, feeds, attrs = conv_model(rng)
        [want] = cpu_ep(model, feeds)
        [got] = float64_reference(model, feeds)
        assert got.shape == want.shape, attrs
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(attrs))
        forms.add((attrs.get("auto_pad", "NOTSET"), max(attrs["strides"]) > 1))
    assert len(forms) == 8, forms  # every form, with and without a stride


def without_resize(path) -> bool:
    """The evaluator's Resize takes minutes (DINOv2's interpolated position embedding, Depth
    Anything's head): those fixtures are what the fuzzer counts as unjudged when it needs them."""
    return all(n.op_type != "Resize" for n in onnx.load(str(path)).graph.node)


@pytest.mark.parametrize("fixture", sorted(p.stem for p in FIXTURES.glob("*.onnx")
                                           if without_resize(p)))
def test_float64_reference_of_a_fixture_matches_the_cpu_ep(fixture):
    model = onnx.load(str(FIXTURES / f"{fixture}.onnx"))
    feeds = make_feeds(feed_spec(model, {"batch": 1}), 1, "normal")
    wanted = cpu_ep(model, feeds)
    got = float64_reference(model, feeds)
    assert got is not None and len(got) == len(wanted)
    for want, value in zip(wanted, got):
        np.testing.assert_allclose(value, want, rtol=1e-3, atol=1e-3)


def scaled_model(scale: float):
    """y = LayerNorm-like centring of x * scale * scale: finite for a small scale, past fp32's
    range in the product (and Inf minus Inf after it) for a large one."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["a"]), helper.make_node("Mul", ["a", "s"], ["b"]),
             helper.make_node("ReduceMean", ["b"], ["m"], axes=[-1]),
             helper.make_node("Sub", ["b", "m"], ["y"])]
    graph = helper.make_graph(
        nodes, "scaled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(np.array(scale, np.float32), "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_fp32_overflow_names_where_the_cpu_ep_leaves_fp32s_range():
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    assert fp32_overflow(ort, scaled_model(1e3), {"x": x}) is None
    assert fp32_overflow(ort, scaled_model(1e30), {"x": x}).endswith("not finite at b")
    x[1, 2] = np.nan
    assert fp32_overflow(ort, scaled_model(1.0), {"x": x}).endswith("not finite at a")


@pytest.mark.parametrize("kernels", ["auto", "portable"])
@pytest.mark.parametrize("seed_model", ["siglip_encoder_torchscript", "qdq_mlp_m5"])
def test_a_wrong_claim_is_a_mismatch_after_every_rescue(seed_model, kernels, tmp_path):
    """The sim corrupting one element of every device call: the encoder's float64 check runs
    (its Conv is VALID-padded), and the QDQ MLP's exits are judged again with the claimed region
    cut and fed the CPU EP's entries (its third group reads what the CPU EP made of the second's
    output)."""
    seed = next(s for s in all_seeds() if s.name == seed_model)
    model = tmp_path / "model.onnx"
    onnx.save(seed.model(), str(model))
    job = {"id": 0, "model": str(model), "level": "disable",
           "feeds": feed_spec(seed.model(), dict(seed.dim_values)), "feed_seed": 5,
           "feed_kind": "normal", "run_on": ["sim"], "host_kernels": kernels,
           "extra_options": {"sim_corrupt_every": "1"}, "report_dir": str(tmp_path / "reports")}
    (tmp_path / "reports").mkdir()
    [result] = run_jobs([job], tmp_path / "run", hang_s=300)
    outcome = result["devices"]["sim"]
    assert outcome["claims"] >= 1, outcome
    assert outcome["class"] == MISMATCH, outcome


def test_a_mutant_beyond_the_memory_cap_is_rejected_not_a_crash(tmp_path, monkeypatch):
    """A child runs under an address-space cap: a tensor blown up to 4 GiB (a fuzzer find, a
    Depth Anything Resize scale of 7e4, took 22 GB and the kernel's OOM killer) fails its
    allocation in ONNX Runtime, and the CPU EP's failure rejects the mutant."""
    monkeypatch.setenv("FUZZ_CHILD_MEMORY_GB", "2")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["big"]),
         helper.make_node("ReduceSum", ["big"], ["y"], keepdims=0)], "huge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array([2**30], np.int64), "shape")])
    model = tmp_path / "huge.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    job = {"id": 0, "model": str(model), "level": "disable",
           "feeds": [["x", TensorProto.FLOAT, [1]]], "feed_seed": 1, "feed_kind": "normal",
           "run_on": ["host"], "report_dir": str(tmp_path / "reports")}
    (tmp_path / "reports").mkdir()
    [result] = run_jobs([job], tmp_path / "run", hang_s=300)
    assert "allocate" in result.get("cpu_error", ""), result


def rescue_needed_here(meta: dict, model: Path, rescue: str) -> str | None:
    """The rescue a find needs on this machine: a CPU EP level as rescue is needed only where
    this CPU's kernels at the find's level disagree with that level (the u8s8 saturation of
    QLinearMatMul depends on VNNI)."""
    if rescue not in ("disable", "basic"):
        return rescue
    feeds = make_feeds(meta["feeds"], meta["feed_seed"], meta["feed_kind"])
    job = {"model": str(model)}
    at_level = cpu_ep_at(ort, job, feeds, meta["level"])
    at_rescue = cpu_ep_at(ort, job, feeds, rescue)
    agree = classify(at_rescue, at_level, 1, "sim")[0] == MATCHING
    return None if agree else rescue


@pytest.mark.parametrize("case, rescue", [
    # ONNX Runtime's basic rewrites merged two Q/DQ pairs of different scales, and at level all
    # the CPU EP's QLinearMatMul saturates (u8s8 without VNNI): only level basic is the graph the
    # claim was given. On a CPU with VNNI level all computes what basic does, and the claim
    # matches it without a rescue.
    ("mismatch-host-qdq_float_io_m5-1318462384-6156", "basic"),
    # A final LayerNorm gamma of 7e4 in five of 64 channels: fp16 GEMM operands themselves miss
    # the sim's relative L2 bar (1.5e-3 against 1e-3).
    ("mismatch-sim-siglip_encoder_dynamo-1318462384-7522", "fp16-error"),
])
def test_a_rescue_that_saves_a_fuzz_find_does_not_save_a_wrong_claim(case, rescue, tmp_path):
    """The find passes only through its rescue, and the sim corrupting one element of every
    device call fails that rescue too."""
    regressions = Path(__file__).resolve().parent / "regressions"
    meta = json.loads((regressions / f"{case}.json").read_text())
    model = onnx.load(str(regressions / f"{case}.onnx"))
    if "base" in meta:
        model = with_base(model, onnx.load(str(fixture_path(meta["base"]))))
    onnx.save(model, str(tmp_path / "model.onnx"))
    outcomes = {}
    for corrupt in ("0", "1"):
        reports = tmp_path / f"reports-{corrupt}"
        reports.mkdir()
        job = {"id": 0, "model": str(tmp_path / "model.onnx"), "level": meta["level"],
               "feeds": meta["feeds"], "feed_seed": meta["feed_seed"],
               "feed_kind": meta["feed_kind"], "run_on": ["sim"], "host_kernels": "auto",
               "extra_options": {"sim_corrupt_every": corrupt}, "report_dir": str(reports)}
        [result] = run_jobs([job], tmp_path / f"run-{corrupt}", hang_s=300)
        outcomes[corrupt] = result["devices"]["sim"]
    assert outcomes["0"]["class"] == MATCHING, outcomes["0"]
    assert outcomes["0"].get("reference") == rescue_needed_here(meta, tmp_path / "model.onnx",
                                                                rescue), outcomes["0"]
    assert outcomes["1"]["claims"] >= 1 and outcomes["1"]["class"] == MISMATCH, outcomes["1"]
