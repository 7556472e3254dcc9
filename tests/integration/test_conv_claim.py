"""Conv in any graph (issue #14: SAM's neck "on the device where the device has conv", RF-DETR's
projector, a U-Net's encoder): every 2-D, group-1 float Conv with a constant weight that no other
claim holds is claimed, and each agrees with the CPU EP's within the gates (cosine >= 0.99999 and
relative L2 <= 1e-5 on the host's fp32 path, cosine >= 0.9999 and relative L2 <= 1e-3 on sim's fp16
one).

Per node two ways: a seeded matrix of single-Conv graphs over kernels, strides, dilations,
asymmetric pads, output channels off the device's group of 16, bias, opsets, batch and image size;
and, inside whole models (SAM, the pix2pix U-Net), `verify=1`, which checks every claimed node's
first device run against the host reference on the node's own input and would disable a wrong one.
The whole-model gates (SAM's masks, the U-Net's image) run with the Convs claimed."""
from __future__ import annotations

import gc
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import CLI, ROOT, claimed, refusal_reasons
from convolution_cases import DEVICES, assert_claimed_alone_within_the_gate, single_convolution
from gates import assert_matches
from test_conv_transpose import mask_iou, sam_prompts
from test_verified_claims import verify_summary

UNETS = ROOT / "tests" / "fixtures" / "conv"
SAMS = ROOT / "tests" / "fixtures" / "sam"


def conv_records(records):
    return [r for r in records if r.get("matcher") == "conv"]


def single_conv(rng, case: dict, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    return single_convolution("Conv", rng, case, dtype)


def output_size(case: dict, axis: int) -> int:
    span = (case["size"][axis] + case["pads"][axis] + case["pads"][axis + 2] -
            case["dilations"][axis] * (case["kernel"][axis] - 1) - 1)
    return span // case["strides"][axis] + 1 if span >= 0 else 0


def random_case(rng) -> dict:
    """A random Conv with a non-empty output."""
    while True:
        kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        top, left = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        symmetric = rng.random() < 0.5
        case = dict(ic=int(rng.choice([1, 3, 8, 17, 32, 40])),
                    oc=int(rng.choice([1, 4, 16, 19, 33, 64])), kernel=(kh, kw),
                    strides=[int(rng.integers(1, 4)), int(rng.integers(1, 4))],
                    dilations=[int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2]))],
                    pads=[top, left, top if symmetric else int(rng.integers(0, 4)),
                          left if symmetric else int(rng.integers(0, 4))],
                    bias=bool(rng.random() < 0.6), opset=int(rng.choice([11, 13, 17, 21])),
                    batch=int(rng.integers(1, 3)),
                    size=(int(rng.integers(1, 20)), int(rng.integers(1, 20))))
        if output_size(case, 0) > 0 and output_size(case, 1) > 0:
            return case


def agree(sessions, path, feeds, device, options=None):
    """CPU EP against npuflow on `device` for each feed; every output within the device's gate.
    Returns the claim records and the worst relative L2."""
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options={"device": device, **(options or {})})
    names = [o.name for o in npu.get_outputs()]
    worst = 0.0
    for feed in feeds:
        for name, ref, got in zip(names, cpu.run(names, feed), npu.run(names, feed)):
            worst = max(worst, assert_matches(ref, got, device, name).rel_l2)
    return records, worst


MATRIX_SEED = 20261205
MATRIX = 24


@pytest.mark.parametrize("index", range(MATRIX))
def test_random_single_convs_claimed_and_within_the_gate(sessions, index):
    rng = np.random.default_rng(MATRIX_SEED + index)
    case = random_case(rng)
    path = sessions.save(single_conv(rng, case))
    h, w = case["size"]
    x = rng.standard_normal((case["batch"], case["ic"], h, w)).astype(np.float32)
    assert_claimed_alone_within_the_gate(
        case, "conv", lambda device: agree(sessions, path, [{"x": x}], device))


def test_the_matrix_covers_the_axes():
    cases = [random_case(np.random.default_rng(MATRIX_SEED + i)) for i in range(MATRIX)]
    assert sum(c["pads"][:2] != c["pads"][2:] for c in cases) >= 5  # asymmetric pads
    assert sum(c["oc"] % 16 != 0 for c in cases) >= 5  # channels off the device's group
    assert sum(max(c["strides"]) > 1 for c in cases) >= 5
    assert sum(max(c["dilations"]) > 1 for c in cases) >= 5
    assert {c["batch"] for c in cases} == {1, 2}


BASE = dict(ic=8, oc=16, kernel=(3, 3), strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1],
            bias=True)
REFUSALS = [
    (dict(group=2, bias=False), "grouped"),
    (dict(oc=8, group=8, bias=False), "depthwise"),
]


@pytest.mark.parametrize("mutation,reason", REFUSALS)
def test_grouped_and_depthwise_convs_run_on_the_cpu_ep_with_the_reason(sessions, mutation,
                                                                        reason):
    rng = np.random.default_rng(11)
    path = sessions.save(single_conv(rng, {**BASE, **mutation}))
    npu, records = sessions.npuflow(path, options={"device": "sim"})
    assert claimed(conv_records(records)) == 0
    assert refusal_reasons(conv_records(records)) == [reason]
    x = {"x": rng.standard_normal((1, 8, 7, 7)).astype(np.float32)}
    np.testing.assert_array_equal(npu.run(None, x)[0], sessions.cpu(path).run(None, x)[0])


def test_near_misses_are_refused_with_their_reason_and_run_unchanged(sessions):
    rng = np.random.default_rng(6)
    base = single_conv(rng, BASE)
    mutants = {}
    same = onnx.ModelProto()
    same.CopyFrom(base)
    del same.graph.node[0].attribute[:]
    same.graph.node[0].attribute.append(helper.make_attribute("auto_pad", "SAME_UPPER"))
    mutants["auto_pad"] = same
    as_input = onnx.ModelProto()
    as_input.CopyFrom(base)
    weight = as_input.graph.initializer[0]
    as_input.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT,
                                                              list(weight.dims)))
    del as_input.graph.initializer[0]
    mutants["weight_not_constant"] = as_input
    one_d = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])], "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal((4, 8, 3)).astype(np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    one_d.ir_version = 8
    mutants["not_2d"] = one_d
    half = single_conv(rng, {**BASE, "bias": False}, TensorProto.FLOAT16)
    half.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        numpy_helper.to_array(half.graph.initializer[0]).astype(np.float16), "w"))
    mutants["unsupported_type"] = half
    for reason, model in mutants.items():
        path = sessions.save(model)
        npu, records = sessions.npuflow(path, options={"device": "sim"})
        assert claimed(conv_records(records)) == 0, reason
        assert reason in refusal_reasons(conv_records(records)), (reason, records)
        feed = {i.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in i.shape])
                .astype(np.float16 if i.type == "tensor(float16)" else np.float32)
                for i in npu.get_inputs()}
        np.testing.assert_array_equal(npu.run(None, feed)[0],
                                      sessions.cpu(path).run(None, feed)[0])


def test_knob_off_claims_no_conv(sessions):
    path = str(UNETS / "unet_torchscript.onnx")
    _, records = sessions.npuflow(path, options={"device": "sim", "conv": "0"})
    assert not conv_records(records)
    _, records = sessions.npuflow(path, options={"device": "sim"})
    assert claimed(conv_records(records)) == 5  # the encoder's down convolutions




@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_sam_neck_and_patch_convs_claimed_checked_per_node_and_the_masks_hold(sessions, capfd,
                                                                             exporter):
    """SAM's patch embedding and its neck's two convolutions (1x1, then 3x3 after LayerNorm2d)
    are claimed beside the image encoder and the mask decoder's transposes. verify=1 checks each
    claimed node's first sim run against the host on its own input (none disabled), and the
    masks of five point prompts and a two-point one keep IoU >= 0.999 against the CPU EP's."""
    path = str(SAMS / f"sam_tiny_{exporter}.onnx")
    feeds = sam_prompts()
    cpu = sessions.cpu(path)
    capfd.readouterr()
    npu, records = sessions.npuflow(path, options={"device": "sim", "verify": "1", "prof": "1"})
    [record] = conv_records(records)
    nodes = [c["node"] for c in record["claims"]]
    assert len(nodes) == 3 and record["candidates"] == 3, (nodes, record["refusals"])
    # By shape (exporters name them differently): the neck's 1x1 and padded 3x3 over the
    # encoder's 32 channels, the 8x8 stride-8 patch embedding of the 3 colour planes.
    shapes = sorted((*c["kernel"], c["ic"], c["oc"], *c["strides"], *c["pads"])
                    for c in record["claims"])
    assert shapes == [(1, 1, 32, 32, 1, 1, 0, 0, 0, 0), (3, 3, 32, 32, 1, 1, 1, 1, 1, 1),
                      (8, 8, 3, 32, 8, 8, 0, 0, 0, 0)], shapes
    refs, gots = [], []
    for feed in feeds:
        ref = cpu.run(["pred_masks"], feed)[0]
        got = npu.run(["pred_masks"], feed)[0]
        assert_matches(ref, got, "sim", "SAM masks")
        refs.append(ref)
        gots.append(got)
    assert mask_iou(np.stack(refs), np.stack(gots)) >= 0.999
    del npu
    gc.collect()
    err = capfd.readouterr().err
    checked, disabled, _ = verify_summary(err)
    # Three Convs, two ConvTransposes and the image encoder.
    assert (checked, disabled) == (6, 0), err[-3000:]


SUMMARY = re.compile(r"Conv summary: (\d+) claimed nodes on (\w+), (\d+) images on the "
                     r"device, (\d+) on the host by choice, (\d+) fallen back to the host")


def test_device_failures_fall_back_to_the_host_and_the_image_stays_within_the_gate(sessions,
                                                                                   capfd):
    path = str(UNETS / "unet_torchscript.onnx")
    rng = np.random.default_rng(9)
    feeds = [{"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}]
    capfd.readouterr()
    agree(sessions, path, feeds, "sim", {"sim_fail_every": "3", "log": "verbose"})
    gc.collect()
    err = capfd.readouterr().err
    [summary] = SUMMARY.findall(err)
    nodes, device, on_device, on_host, fell_back = summary
    assert (int(nodes), device) == (5, "sim")
    assert int(fell_back) > 0 and int(on_device) > 0 and int(on_host) == 0, summary


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_unet_generator_with_its_convs_claimed_matches_on_host_and_sim(sessions, exporter):
    """pix2pix's U-Net with its 5 down convolutions and 5 transposes claimed: the generated image
    within the gate of each device."""
    path = str(UNETS / f"unet_{exporter}.onnx")
    rng = np.random.default_rng(10)
    feeds = [{"image": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}]
    for device in DEVICES:
        records, worst = agree(sessions, path, feeds, device)
        assert claimed(conv_records(records)) == 5
        if device == "sim":
            assert worst > 1e-5, worst


def test_explain_lists_the_claimed_convs_and_the_refusals(tmp_path):
    rng = np.random.default_rng(12)
    refused = tmp_path / "grouped.onnx"
    onnx.save(single_conv(rng, {**BASE, "group": 2, "bias": False}), str(refused))
    for path, expect in ((SAMS / "sam_tiny_dynamo.onnx", "3 of 3 Conv nodes claimed"),
                         (refused, "0 of 1 Conv nodes claimed")):
        result = subprocess.run([str(CLI), "explain", str(path), "--knob", "device=sim"],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert expect in result.stdout, result.stdout
    assert "grouped" in result.stdout and "group=2" in result.stdout, result.stdout


def test_depth_anything_dpt_head_convs_each_checked_against_the_host_on_their_own_input(
        sessions, capfd):
    """The DPT head's 30 convolutions, claimed beside the encoder (which holds the patch
    embedding) and the two transposes: verify=1 checks each node's first sim run against the host
    on the same input, at sim's bar, and disables none. The depth map behind the chain is gated
    end to end in test_depth_anything.py."""
    path = str(ROOT / "tests" / "fixtures" / "vision" / "depth_anything_dynamo.onnx")
    capfd.readouterr()
    npu, records = sessions.npuflow(path, options={"device": "sim", "verify": "1", "prof": "1"})
    [record] = conv_records(records)
    assert len(record["claims"]) == 30 and record["candidates"] == 30, record["refusals"]
    pixels = np.random.default_rng(3).standard_normal((1, 3, 56, 56)).astype(np.float32)
    npu.run(None, {"pixel_values": pixels})
    del npu
    gc.collect()
    checked, disabled, _ = verify_summary(capfd.readouterr().err)
    assert (checked, disabled) == (33, 0)
