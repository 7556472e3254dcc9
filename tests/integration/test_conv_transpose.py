"""ConvTranspose in any graph (issue #14 item 3): every 2-D, group-1 float ConvTranspose with a
constant weight whose attributes the device admits is claimed, and each claimed node agrees with
the CPU EP's within the gates (cosine >= 0.99999 and relative L2 <= 1e-5 on the host's fp32 path,
cosine >= 0.9999 and relative L2 <= 1e-3 on sim's fp16 one), per node: every ConvTranspose output
is made a graph output, so an error the layers after it would hide still shows.

Models: the pix2pix-style U-Net generator of tools/fixtures/export_unet.py (both exporters), the
DPT head of the Depth Anything fixture (its encoder claimed too), and a seeded matrix of single
ConvTranspose graphs over strides, kernels, dilations, asymmetric pads, output padding, bias,
batch and image size, up to and past the contract's edge."""
from __future__ import annotations

import gc
import json
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import CLI, ROOT, claimed, refusal_reasons
from convolution_cases import DEVICES, assert_claimed_alone_within_the_gate, single_convolution
from gates import agreement, assert_matches
from test_verified_claims import verify_summary
from vision_fixtures import vision_claims

UNETS = ROOT / "tests" / "fixtures" / "conv"
SAMS = ROOT / "tests" / "fixtures" / "sam"
VISION = ROOT / "tests" / "fixtures" / "vision"


def conv_records(records):
    return [r for r in records if r.get("matcher") == "conv_transpose"]


def expose_conv_transposes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """The model with every ConvTranspose output also a graph output (type float, shape free)."""
    names = [n.output[0] for n in model.graph.node if n.op_type == "ConvTranspose"]
    outputs = {o.name for o in model.graph.output}
    for name in names:
        if name not in outputs:
            model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return model, names


def per_node_agreement(sessions, path, feeds, names, options, device):
    """Runs the CPU EP and one npuflow session on `device` on each feed of `feeds` (a dict, or a
    list of them: one session sees every shape); asserts every ConvTranspose output agrees and
    returns the claim records and the worst agreement."""
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options={"device": device, **options})
    out_names = [o.name for o in npu.get_outputs()]
    worst = None
    for feed in feeds if isinstance(feeds, list) else [feeds]:
        ref = dict(zip(out_names, cpu.run(out_names, feed)))
        got = dict(zip(out_names, npu.run(out_names, feed)))
        for name in names:
            measured = assert_matches(ref[name], got[name], device, f"ConvTranspose '{name}'")
            if worst is None or measured.rel_l2 > worst.rel_l2:
                worst = measured
        for name in out_names:
            assert np.isfinite(got[name]).all() == np.isfinite(ref[name]).all(), name
    return records, worst


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("device", DEVICES)
def test_unet_generator_every_conv_transpose_claimed_and_within_the_gate(sessions, exporter,
                                                                          device):
    model, names = expose_conv_transposes(onnx.load(str(UNETS / f"unet_{exporter}.onnx")))
    assert len(names) == 5
    path = sessions.save(model)
    rng = np.random.default_rng(7)
    # TorchScript's export keeps the image size dynamic: a second size in the same session.
    sizes = [(2, 32, 32)] + ([(1, 64, 32)] if exporter == "torchscript" else [])
    feeds = [{"image": rng.standard_normal((batch, 3, height, width)).astype(np.float32)}
             for batch, height, width in sizes]
    records, worst = per_node_agreement(sessions, path, feeds, names, {}, device)
    [record] = conv_records(records)
    assert record["candidates"] == 5 and len(record["claims"]) == 5, record["refusals"]
    if device == "sim":
        # fp16 operands: an error as small as fp32's would mean the device never ran.
        assert worst.rel_l2 > 1e-5, worst


@pytest.mark.parametrize("device", DEVICES)
def test_depth_anything_dpt_head_conv_transposes_claimed_beside_the_encoder(sessions, device):
    model, names = expose_conv_transposes(
        onnx.load(str(VISION / "depth_anything_torchscript.onnx")))
    assert names, "the Depth Anything fixture has no ConvTranspose"
    path = sessions.save(model)
    pixels = np.random.default_rng(3).standard_normal((1, 3, 56, 56)).astype(np.float32)
    records, _ = per_node_agreement(sessions, path, {"pixel_values": pixels}, names, {}, device)
    [record] = conv_records(records)
    assert len(record["claims"]) == len(names), record["refusals"]
    assert any(r.get("matcher") == "vision" and r["claims"] for r in records)


def sam_prompts(count: int = 5, seed: int = 4):
    """`count` single-point prompts on one random image, and one two-point prompt (foreground and
    background) beside them: the feeds of tools/fixtures/export_sam.py's tiny SAM."""
    rng = np.random.default_rng(seed)
    image = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    feeds = [{"pixel_values": image,
              "input_points": rng.uniform(0, 64, (1, 1, 1, 2)).astype(np.float32),
              "input_labels": np.ones((1, 1, 1), np.int64)} for _ in range(count)]
    feeds.append({"pixel_values": image,
                  "input_points": rng.uniform(0, 64, (1, 1, 2, 2)).astype(np.float32),
                  "input_labels": np.array([[[1, 0]]], np.int64)})
    return feeds


def mask_iou(a, b) -> float:
    a, b = a > 0, b > 0
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("device", DEVICES)
def test_sam_mask_decoder_conv_transposes_and_masks_match_the_cpu_ep(sessions, exporter, device):
    """SAM's mask decoder upscales its embedding by two 2x2 stride-2 ConvTransposes: both claimed
    and gated per node, and the whole model's masks (the image encoder's blocks claimed too, see
    test_sam_encoder.py; prompt encoder and the rest of the decoder on the CPU EP) agree with the
    CPU EP's: IoU >= 0.999 over the prompts' masks together, and within a mask a
    pixel may flip only where the CPU EP's logit is within 0.02 of the threshold (one pixel of
    this fixture's 32x32 masks is 1e-3 of IoU, so a per-mask bar would measure the grid)."""
    model, names = expose_conv_transposes(onnx.load(str(SAMS / f"sam_tiny_{exporter}.onnx")))
    assert len(names) == 2
    path = sessions.save(model)
    feeds = sam_prompts()
    records, _ = per_node_agreement(sessions, path, feeds, names, {}, device)
    [record] = conv_records(records)
    assert len(record["claims"]) == 2, record["refusals"]
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options={"device": device})
    assert [c["family"] for c in vision_claims(records)] == ["sam"]
    refs, gots = [], []
    for feed in feeds:
        ref_iou, ref_masks = cpu.run(["iou_scores", "pred_masks"], feed)
        got_iou, got_masks = npu.run(["iou_scores", "pred_masks"], feed)
        flipped = (ref_masks > 0) != (got_masks > 0)
        assert np.all(np.abs(ref_masks[flipped]) < 0.02), ref_masks[flipped]
        assert_matches(ref_masks, got_masks, device, "SAM masks")
        np.testing.assert_allclose(got_iou, ref_iou, rtol=1e-3, atol=1e-4)
        refs.append(ref_masks)
        gots.append(got_masks)
    assert mask_iou(np.stack(refs), np.stack(gots)) >= 0.999


def single_conv_transpose(rng, case: dict) -> onnx.ModelProto:
    return single_convolution("ConvTranspose", rng, case)


def output_size(case: dict, axis: int) -> int:
    h = case["size"][axis]
    return (case["strides"][axis] * (h - 1) + case["output_padding"][axis] +
            case["dilations"][axis] * (case["kernel"][axis] - 1) + 1 - case["pads"][axis] -
            case["pads"][axis + 2])


def random_case(rng) -> dict:
    """A random ConvTranspose the contract admits, with a non-empty output."""
    while True:
        case = draw_case(rng)
        if output_size(case, 0) > 0 and output_size(case, 1) > 0:
            return case


def draw_case(rng) -> dict:
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    sy, sx = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dy, dx = int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2]))
    # Pads within the dilated kernel's reach on the smaller side, anything on the other.
    reach_y, reach_x = dy * (kh - 1), dx * (kw - 1)
    top, left = int(rng.integers(0, reach_y + 1)), int(rng.integers(0, reach_x + 1))
    bottom = top if rng.random() < 0.5 else int(rng.integers(top, top + 3))
    right = left if rng.random() < 0.5 else int(rng.integers(left, left + 3))
    return dict(ic=int(rng.choice([1, 3, 8, 17, 32, 40])), oc=int(rng.choice([1, 4, 16, 19, 33])),
                kernel=(kh, kw), strides=[sy, sx], dilations=[dy, dx],
                pads=[top, left, bottom, right],
                output_padding=[int(rng.integers(0, sy)), int(rng.integers(0, sx))],
                bias=bool(rng.random() < 0.6), opset=int(rng.choice([11, 13, 17, 21])),
                batch=int(rng.integers(1, 3)), size=(int(rng.integers(1, 14)), int(rng.integers(1, 14))))


MATRIX_SEED = 20261204
MATRIX = 24


@pytest.mark.parametrize("index", range(MATRIX))
def test_random_single_conv_transposes_claimed_and_within_the_gate(sessions, index):
    rng = np.random.default_rng(MATRIX_SEED + index)
    case = random_case(rng)
    model = single_conv_transpose(rng, case)
    path = sessions.save(model)
    batch, (h, w) = case["batch"], case["size"]
    x = rng.standard_normal((batch, case["ic"], h, w)).astype(np.float32)

    def run_on(device):
        records, worst = per_node_agreement(sessions, path, {"x": x}, ["y"], {}, device)
        return records, worst.rel_l2

    assert_claimed_alone_within_the_gate(case, "conv_transpose", run_on)


# (mutation of the base case, the refusal key): what the claim must leave to the CPU EP.
BASE = dict(ic=8, oc=16, kernel=(4, 4), strides=[2, 2], pads=[1, 1, 1, 1], bias=True)
REFUSALS = [
    (dict(group=2, bias=False), "grouped"),
    (dict(ic=8, oc=1, group=8, bias=False), "depthwise"),
    (dict(output_padding=[2, 0]), "attributes"),  # not below the stride: the CPU EP's error too
    (dict(pads=[4, 1, 4, 1]), "device_contract"),  # beyond dil (k - 1) = 3 on both sides
    (dict(dilations=[1, 1], kernel=(1, 1), pads=[1, 0, 1, 0]), "device_contract"),
]


@pytest.mark.parametrize("mutation,reason", REFUSALS)
def test_refused_conv_transposes_run_on_the_cpu_ep_with_the_reason(sessions, mutation, reason):
    rng = np.random.default_rng(11)
    case = {**BASE, **mutation}
    model = single_conv_transpose(rng, case)
    path = sessions.save(model)
    npu, records = sessions.npuflow(path, options={"device": "sim"})
    assert claimed(conv_records(records)) == 0
    assert reason in refusal_reasons(conv_records(records))
    x = rng.standard_normal((1, 8, 5, 5)).astype(np.float32)
    try:
        ref = sessions.cpu(path).run(None, {"x": x})[0]
    except Exception as error:  # noqa: BLE001 - the CPU EP rejects the node: so must npuflow
        with pytest.raises(type(error)):
            npu.run(None, {"x": x})
        return
    np.testing.assert_array_equal(npu.run(None, {"x": x})[0], ref)


def test_contract_edge_pad_equal_to_the_reach_is_claimed_one_more_is_refused(sessions):
    rng = np.random.default_rng(5)
    for pad, expect_claim in ((3, True), (4, False)):
        case = {**BASE, "pads": [pad, pad, pad, pad], "strides": [3, 3]}
        path = sessions.save(single_conv_transpose(rng, case))
        _, records = sessions.npuflow(path, options={"device": "sim"})
        assert claimed(conv_records(records)) == int(expect_claim), (pad, records)


def test_weight_as_input_auto_pad_and_output_shape_are_refused(sessions):
    rng = np.random.default_rng(6)
    base = single_conv_transpose(rng, BASE)
    mutants = {}
    same = onnx.ModelProto()
    same.CopyFrom(base)
    del same.graph.node[0].attribute[:]
    same.graph.node[0].attribute.extend([helper.make_attribute("auto_pad", "SAME_UPPER"),
                                         helper.make_attribute("strides", [2, 2])])
    mutants["auto_pad"] = same
    shaped = onnx.ModelProto()
    shaped.CopyFrom(base)
    shaped.graph.node[0].attribute.append(helper.make_attribute("output_shape", [10, 10]))
    mutants["output_shape"] = shaped
    as_input = onnx.ModelProto()
    as_input.CopyFrom(base)
    weight = as_input.graph.initializer[0]
    as_input.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT,
                                                              list(weight.dims)))
    del as_input.graph.initializer[0]
    mutants["weight_not_constant"] = as_input
    for reason, model in mutants.items():
        _, records = sessions.npuflow(sessions.save(model), options={"device": "sim"})
        assert claimed(conv_records(records)) == 0, reason
        assert reason in refusal_reasons(conv_records(records)), (reason, records)


def test_auto_pad_valid_is_claimed_unpadded(sessions):
    rng = np.random.default_rng(8)
    model = single_conv_transpose(rng, BASE)
    node = model.graph.node[0]
    kept = [a for a in node.attribute if a.name != "pads"]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute("auto_pad", "VALID")])
    path = sessions.save(model)
    x = {"x": rng.standard_normal((1, 8, 5, 5)).astype(np.float32)}
    for device in DEVICES:
        records, _ = per_node_agreement(sessions, path, x, ["y"], {}, device)
        [claim] = conv_records(records)[0]["claims"]
        assert claim["pads"] == [0, 0, 0, 0]


def test_knob_off_claims_no_conv_transpose(sessions):
    path = str(UNETS / "unet_torchscript.onnx")
    _, records = sessions.npuflow(path, options={"device": "sim", "conv_transpose": "0"})
    assert not conv_records(records)


SUMMARY = re.compile(r"ConvTranspose summary: (\d+) claimed nodes on (\w+), (\d+) images on the "
                     r"device, (\d+) on the host by choice, (\d+) fallen back to the host")


def test_device_failures_fall_back_to_the_host_and_the_output_stays_within_the_gate(sessions,
                                                                                    capfd):
    model, names = expose_conv_transposes(onnx.load(str(UNETS / "unet_torchscript.onnx")))
    path = sessions.save(model)
    feeds = {"image": np.random.default_rng(9).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    capfd.readouterr()
    records, _ = per_node_agreement(sessions, path, feeds, names,
                                    {"sim_fail_every": "2", "log": "verbose"}, "sim")
    gc.collect()
    err = capfd.readouterr().err
    [summary] = SUMMARY.findall(err)
    nodes, device, on_device, on_host, fell_back = summary
    assert (int(nodes), device) == (5, "sim")
    assert int(fell_back) > 0 and int(on_device) > 0 and int(on_host) == 0, summary
    assert "run on the host in fp32" in err  # the fallback's one warning


def test_intra_op_spinning_warning_only_while_spinning(sessions, capfd):
    path = str(UNETS / "unet_torchscript.onnx")
    warning = "session.intra_op.allow_spinning=0"
    for config, expected in (({}, True), ({"session.intra_op.allow_spinning": "0"}, False)):
        capfd.readouterr()
        session, _ = sessions.npuflow(path, options={"device": "sim"}, config=config)
        del session
        gc.collect()
        assert (warning in capfd.readouterr().err) == expected, config


def test_explain_lists_the_claimed_conv_transposes_and_the_refusals(tmp_path):
    rng = np.random.default_rng(12)
    model = single_conv_transpose(rng, {**BASE, "group": 2, "bias": False})
    refused = tmp_path / "grouped.onnx"
    onnx.save(model, str(refused))
    for path, expect in ((UNETS / "unet_dynamo.onnx", "5 of 5 ConvTranspose nodes claimed"),
                         (refused, "0 of 1 ConvTranspose nodes claimed")):
        result = subprocess.run([str(CLI), "explain", str(path), "--knob", "device=sim"],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert expect in result.stdout, result.stdout
    assert "grouped" in result.stdout and "group=2" in result.stdout, result.stdout




@pytest.mark.parametrize("corrupt,verify", [(True, False), (True, True), (False, True)])
def test_verify_catches_a_miscomputing_device_on_every_conv_transpose(sessions, capfd, corrupt,
                                                                      verify):
    """`verify=1` checks each claimed ConvTranspose's first device run against the host and
    disables a wrong one; without it, a device that silently miscomputes (sim_corrupt_every=1)
    reaches the output, which shows the check is what keeps it out. SAM's transposes have no
    padding, so the corrupted first GEMM element lands in the output (a padded node crops it)."""
    model, names = expose_conv_transposes(onnx.load(str(SAMS / "sam_tiny_dynamo.onnx")))
    path = sessions.save(model)
    feeds = sam_prompts(1)[0]
    options = {"device": "sim", "prof": "1", **({"sim_corrupt_every": "1"} if corrupt else {}),
               **({"verify": "1"} if verify else {})}
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options=options)
    assert claimed(conv_records(records)) == 2
    ref = dict(zip(names, cpu.run(names, feeds)))
    got = dict(zip(names, npu.run(names, feeds)))
    del npu
    gc.collect()
    err = capfd.readouterr().err
    worst = max(agreement(ref[n], got[n]).rel_l2 for n in names)
    if corrupt and not verify:
        assert worst > 1e-1, worst  # the corruption reaches the output
        return
    for name in names:
        assert_matches(ref[name], got[name], "sim", name)
    checked, disabled, _ = verify_summary(err)
    # The two transposes and, claimed beside them, SAM's image encoder and its three convolutions
    # (patch embedding, neck: test_conv_claim.py).
    assert (checked, disabled) == (6, 6 if corrupt else 0), err[-3000:]


def cost_table(tmp_path, rows) -> str:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"machine": "test", "rows": [
        {"kind": "conv_transpose", "model": f"measured {m}x{k}x{n}", "rows": m, "k": k, "n": n,
         "flops": 2.0 * m * k * n, "npuflow_ms": npuflow_ms, "cpu_ep_ms": cpu_ep_ms}
        for m, k, n, npuflow_ms, cpu_ep_ms in rows]}))
    return str(path)


def test_claim_faster_keeps_a_conv_transpose_only_where_its_nearest_measured_shape_was_faster(
        sessions, tmp_path):
    """claim=faster judges a ConvTranspose by the nearest measured shape in the claim's GEMM terms
    (input pixels, IC, OC KH KW; bench/conv_transpose.py writes them): the base case's is
    25 x 8 x 256. A faster row keeps it, a slower one or none declines it, with the reason."""
    path = sessions.save(single_conv_transpose(np.random.default_rng(13), BASE))
    near, far = (25, 8, 256), (4096, 512, 2048)
    for rows, expected in (([(*near, 1.0, 2.0), (*far, 3.0, 1.0)], None),
                           ([(*near, 3.0, 1.0), (*far, 1.0, 3.0)], "slower_than_cpu_ep"),
                           ([], "no_measured_cost")):
        _, records = sessions.npuflow(path, options={
            "device": "host", "claim": "faster", "claim_costs": cost_table(tmp_path, rows)})
        [record] = conv_records(records)
        if expected is None:
            assert len(record["claims"]) == 1, record["refusals"]
        else:
            assert not record["claims"] and refusal_reasons([record]) == [expected], record
