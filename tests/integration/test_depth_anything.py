"""Depth Anything: npuflow claims the DINOv2 backbone and exits four LayerNorm'd hidden states
(the taps) to the DPT neck and head, whose convolutions and transposes are claimed node by node
(test_conv_claim.py, test_conv_transpose.py) and whose other ops stay on the CPU EP. Each tap is
gated on its own, not only the depth map computed from all four, on `host` and on `sim`."""
from __future__ import annotations

import pytest

from conftest import claimed
from gates import (agreement, assert_every_call_on_the_device, assert_matches,
                   ended_session_profile)
from vision_fixtures import (DEPTH_MODELS, FIXTURES, norm_taps, pixels, tapped, vision_claims,
                             vision_refusals)


def test_the_depth_map_follows_the_image(sessions):
    """A depth map that is the same for every image would let any encoder pass the depth gate."""
    for model in DEPTH_MODELS:
        cpu = sessions.cpu(str(FIXTURES / model))
        first, second = (cpu.run(None, pixels(FIXTURES / model, seed=s))[0] for s in (0, 1))
        assert agreement(first, second).cosine < 0.99, model
        assert 0 < (first > 0).mean() < 1, "the ReLU should clip some of the map, not all"


@pytest.mark.parametrize("device", ["host", "sim"])
@pytest.mark.parametrize("level", ["disable", "basic", "all"])
@pytest.mark.parametrize("model", DEPTH_MODELS)
def test_every_tap_and_the_depth_match_the_cpu_ep(sessions, model, level, device, capfd):
    path, taps = tapped(sessions, model)
    options = {"device": device, "prof": "1"} if device == "sim" else {"device": device}
    npu, records = sessions.npuflow(path, level=level, options=options)
    claims = vision_claims(records)
    assert len(claims) == 1, vision_refusals(records)
    assert norm_taps(claims[0]) == taps  # the added outputs are the values the encoder exits
    cpu = sessions.cpu(path, level=level)
    names = [o.name for o in cpu.get_outputs()]
    assert names == ["predicted_depth", *taps]
    feed = pixels(path)
    # The DPT head's convolutions are claimed too: on sim the depth is a chain of fp16 nodes.
    assert claimed([r for r in records if r["matcher"] == "conv"]) == 30
    for name, ref, got in zip(names, cpu.run(None, feed), npu.run(None, feed)):
        bar = "sim_chain" if device == "sim" and name == "predicted_depth" else device
        assert_matches(ref, got, bar, f"{model} {level} {name}")
    if device == "sim":
        del npu
        assert_every_call_on_the_device(ended_session_profile(capfd))


def test_with_the_dpt_head_on_the_cpu_ep_the_depth_keeps_sims_own_bar(sessions):
    """Without the convolution claims (conv=0) only the encoder and the two transposes run in fp16:
    the depth map then meets sim's bar itself, which is what the looser end-to-end bar above owes
    to the DPT head's chain of 30 device convolutions, not to the encoder."""
    for model in DEPTH_MODELS:
        path, _ = tapped(sessions, model)
        npu, records = sessions.npuflow(path, options={"device": "sim", "conv": "0"})
        assert not [r for r in records if r["matcher"] == "conv"]
        feed = pixels(path)
        ref = sessions.cpu(path).run(["predicted_depth"], feed)[0]
        assert_matches(ref, npu.run(["predicted_depth"], feed)[0], "sim", f"{model} depth")
