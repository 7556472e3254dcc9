"""The gates reject wrong models. npuflow runs a fixture whose weights were mutated, and its
outputs are gated against the CPU EP's on the unmutated fixture, as if npuflow had computed them
from the right model: the gate must fail. A uniform gain error keeps the cosine at 1, so only the
relative L2 bound catches it. The device gate rejects sessions whose calls did not all reach the
device."""
from __future__ import annotations

import onnx
import pytest
from onnx import numpy_helper

from conftest import claimed
from gates import (BARS, agreement, assert_every_call_on_the_device, assert_matches,
                   ended_session_profile)
from qdq_models import QdqSpec, make_activations, single_group_model
from vision_fixtures import (DEPTH_MODELS, FIXTURES, initializer, pixels, scale_initializer,
                             tapped, vision_claims)

GAIN = 1.01
NEGATION = -3.0


def scale_final_norm(model: onnx.ModelProto) -> onnx.ModelProto:
    """Scales the final LayerNorm's gamma and beta by GAIN: every output is GAIN times right."""
    output = model.graph.output[0].name
    norm = next(n for n in model.graph.node if output in n.output)
    assert norm.op_type == "LayerNormalization", norm.op_type
    for name in norm.input[1:3]:
        scale_initializer(model, name, GAIN)
    return model


def claimed_weights(model: onnx.ModelProto, claim) -> list[str]:
    """The constant weights of the claimed encoder's MatMuls, in graph order."""
    inits = {i.name for i in model.graph.initializer}
    nodes = set(claim["nodes"])
    return [n.input[1] for n in model.graph.node
            if n.name in nodes and n.op_type == "MatMul" and n.input[1] in inits]


def negate_every_encoder_projection(model: onnx.ModelProto, claim) -> None:
    """Every projection weight of the encoder times -3 (issue #8's example)."""
    weights = claimed_weights(model, claim)
    assert len(weights) == 6 * claim["layers"]  # q, k, v, o, fc1, fc2
    for name in weights:
        scale_initializer(model, name, NEGATION)


def negate_last_mlp_projection(model: onnx.ModelProto, claim) -> None:
    """The last layer's MLP down-projection times -3: only the last tap and the depth change."""
    name = claimed_weights(model, claim)[-1]
    assert numpy_helper.to_array(initializer(model, name)).shape == (4 * 64, 64)
    scale_initializer(model, name, NEGATION)


def options_for(device: str) -> dict:
    return {"device": device, "prof": "1"} if device == "sim" else {"device": device}


def check_device(device: str, capfd) -> None:
    """On sim, the session the caller dropped ran every call on the device."""
    if device == "sim":
        assert_every_call_on_the_device(ended_session_profile(capfd))


@pytest.mark.parametrize("device", ["host", "sim"])
def test_a_uniform_gain_passes_the_cosine_but_not_the_gate(sessions, device, capfd):
    original = str(FIXTURES / "vit_encoder_dynamo.onnx")
    mutated = sessions.save(scale_final_norm(onnx.load(original)))
    feed = pixels(original)
    ref = sessions.cpu(original).run(None, feed)[0]
    npu, records = sessions.npuflow(mutated, options=options_for(device))
    assert len(vision_claims(records)) == 1
    got = npu.run(None, feed)[0]
    del npu
    check_device(device, capfd)
    measured = agreement(ref, got)
    print(f"\nvit_encoder_dynamo, final LayerNorm x{GAIN}, {device}: {measured}")
    min_cosine, max_rel_l2 = BARS[device]
    assert measured.cosine >= min_cosine  # a cosine gate alone would pass this wrong model
    assert measured.rel_l2 == pytest.approx(GAIN - 1, rel=0.05)
    with pytest.raises(AssertionError, match="relative L2 error above"):
        assert_matches(ref, got, device, "gain")


def depth_outputs(sessions, model: str, edit, device: str, capfd):
    """(output, CPU EP on the fixture, npuflow on the edited fixture) for the depth map and the
    four taps."""
    original, taps = tapped(sessions, model)
    mutated, _ = tapped(sessions, model, edit=edit)
    npu, records = sessions.npuflow(mutated, options=options_for(device))
    assert len(vision_claims(records)) == 1
    cpu = sessions.cpu(original)
    names = [o.name for o in cpu.get_outputs()]
    assert names == ["predicted_depth", *taps]
    feed = pixels(original)
    outputs = list(zip(["depth", "tap 1", "tap 2", "tap 3", "tap 4"], cpu.run(None, feed),
                       npu.run(None, feed)))
    del npu
    check_device(device, capfd)
    return outputs


@pytest.mark.parametrize("device", ["host", "sim"])
@pytest.mark.parametrize("model", DEPTH_MODELS)
def test_negated_projections_fail_every_tap_and_the_depth(sessions, model, device, capfd):
    outputs = depth_outputs(sessions, model, negate_every_encoder_projection, device, capfd)
    for label, ref, got in outputs:
        print(f"\n{model}, every projection x{NEGATION}, {device}, {label}: {agreement(ref, got)}")
        with pytest.raises(AssertionError, match="cosine below"):
            assert_matches(ref, got, device, label)
        assert agreement(ref, got).cosine < 0.99  # far off, not near the bar


@pytest.mark.parametrize("device", ["host", "sim"])
@pytest.mark.parametrize("model", DEPTH_MODELS)
def test_the_tap_gates_find_the_layer_that_differs(sessions, model, device, capfd):
    outputs = depth_outputs(sessions, model, negate_last_mlp_projection, device, capfd)
    for label, ref, got in outputs:
        print(f"\n{model}, last fc2 x{NEGATION}, {device}, {label}: {agreement(ref, got)}")
        if label in ("tap 1", "tap 2", "tap 3"):  # before the mutated layer
            assert_matches(ref, got, device, label)
        else:
            with pytest.raises(AssertionError, match="cosine below"):
                assert_matches(ref, got, device, label)


def test_the_device_gate_rejects_calls_run_on_the_host(sessions, capfd):
    """Below min_rows the fused QDQ MatMul computes on the host: the sim gate must say so."""
    spec = QdqSpec(k=1024, n=1024, exact_arithmetic=True, per_channel=True, zp_x=-40, zp_w=-25,
                   zp_y=-7)
    path = sessions.save(single_group_model(spec))
    npu, records = sessions.npuflow(path, options={"device": "sim", "prof": "1"})
    assert claimed(records) == 1
    for m in (1, 5, 64):
        npu.run(None, {"x": make_activations(spec, m, seed=m)})
    del npu
    profile = ended_session_profile(capfd)
    assert profile.qdq_host_row_calls > 0 and profile.sim_calls > 0
    with pytest.raises(AssertionError, match="did not run on the device"):
        assert_every_call_on_the_device(profile)


def test_the_device_gate_rejects_failed_submits(sessions, capfd):
    path = str(FIXTURES / "vit_encoder_dynamo.onnx")
    npu, records = sessions.npuflow(path, options={"device": "sim", "sim_fail_every": "2",
                                                   "prof": "1"})
    assert len(vision_claims(records)) == 1
    npu.run(None, pixels(path))
    del npu
    profile = ended_session_profile(capfd)
    assert profile.failed_submits > 0
    with pytest.raises(AssertionError, match="did not run on the device"):
        assert_every_call_on_the_device(profile)


def test_the_device_gate_rejects_a_session_on_the_host(sessions, capfd):
    """An encoder that ran on `host` prints no simulator profile: no proof of device calls."""
    path = str(FIXTURES / "vit_encoder_dynamo.onnx")
    npu, _ = sessions.npuflow(path, options={"device": "host", "prof": "1"})
    npu.run(None, pixels(path))
    del npu
    with pytest.raises(AssertionError, match="expected one ended sim session"):
        ended_session_profile(capfd)


def test_the_unmutated_fixture_passes_the_same_gate(sessions):
    """The control arm: the gate that rejects the mutations accepts the fixture itself."""
    original = str(FIXTURES / "vit_encoder_dynamo.onnx")
    feed = pixels(original)
    npu, _ = sessions.npuflow(original)
    assert_matches(sessions.cpu(original).run(None, feed)[0], npu.run(None, feed)[0], "host")
