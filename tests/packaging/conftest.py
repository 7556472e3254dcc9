"""Shared by the packaging tests: the repository, the build, and models written outside it (a
copy of an encoder-only fixture and a generated QDQ model), so that what runs them never needs a
file of the source tree."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
VERSION = (ROOT / "VERSION").read_text().strip()
# Encoder-only (pixels in, hidden states out): claimed whole, so it runs with
# session.disable_cpu_ep_fallback=1.
ENCODER_FIXTURE = ROOT / "tests" / "fixtures" / "vision" / "siglip_encoder_dynamo.onnx"


def packaging_tool(*args: str) -> str:
    return subprocess.run(["bash", str(ROOT / "tools" / "setup_packaging.sh"), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="session")
def outside_models(tmp_path_factory) -> dict[str, Path]:
    """In a temporary folder: 'encoder' (the fixture's copy), 'qdq' (one A8W8 group, int8 in and
    out) and 'qdq_float' (the same group behind a QuantizeLinear and before a DequantizeLinear,
    float in and out, the form quantize_static emits)."""
    from qdq_models import QdqSpec, single_group_model  # the generator, run here in the dev venv
    import onnx

    folder = tmp_path_factory.mktemp("models")
    encoder = folder / "encoder.onnx"
    shutil.copyfile(ENCODER_FIXTURE, encoder)
    models = {"encoder": encoder}
    for name, float_io in (("qdq", False), ("qdq_float", True)):
        models[name] = folder / f"{name}.onnx"
        onnx.save(single_group_model(QdqSpec(k=256, n=192), rows=32, float_io=float_io),
                  str(models[name]))
    return models
