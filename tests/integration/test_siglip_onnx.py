"""tools/siglip_onnx.py writes the demo's SigLIP encoder without torch; its graph must be what the
encoder matcher claims by meaning, whole, and run faithfully on the host device and the simulator
(the small configuration here; `make demo` runs SigLIP-B/16 at 224 px)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import siglip_onnx
from vision_fixtures import vision_claims


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    model = siglip_onnx.build(siglip_onnx.SMALL)
    onnx.checker.check_model(model)
    path = tmp_path_factory.mktemp("siglip") / "siglip_small.onnx"
    onnx.save(model, str(path))
    return path


def test_the_base_configuration_is_siglip_b16():
    c = siglip_onnx.BASE
    assert (c.image, c.patch, c.hidden, c.layers, c.heads, c.ffn) == (224, 16, 768, 12, 12, 3072)
    assert c.tokens == 196


@pytest.mark.parametrize("device", ["host", "sim"])
def test_claimed_whole_and_faithful(sessions, small, device):
    cpu = sessions.cpu(str(small))
    npu, records = sessions.npuflow(str(small), options={"device": device, "claim": "all"})
    (claim,) = vision_claims(records)
    assert claim["family"] == "siglip" and claim["layers"] == 2 and claim["hidden"] == 64
    assert claim["heads"] == 4
    pixels = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    want = cpu.run(None, {"pixel_values": pixels})[0]
    got = npu.run(None, {"pixel_values": pixels})[0]
    cosine = float(np.dot(want.ravel(), got.ravel()) /
                   (np.linalg.norm(want) * np.linalg.norm(got)))
    assert cosine > (0.9999999 if device == "host" else 0.99999), cosine
