"""Regenerates the committed seed corpora of the libFuzzer targets (tests/fuzz_bytes/corpus/):
small QDQ models from tools/qdq_models.py, and the claim reports npuflow writes for them and for
one vision-encoder fixture. The knob seeds are hand-written and not touched.

    NPUFLOW_BUILD_DIR=build .venv/bin/python tests/fuzz_bytes/make_seeds.py
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
from qdq_models import QdqSpec, single_group_model  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
EP_NAME = "NpuflowExecutionProvider"

MODELS = {
    "qdq_int8_per_channel.onnx": (QdqSpec(k=64, n=32, zp_x=-3, zp_y=1), {}),
    "qdq_uint8_float_io.onnx": (QdqSpec(k=32, n=48, x_type=np.uint8, zp_x=128,
                                        per_channel=False), {"float_io": True}),
    "qdq_float_output.onnx": (QdqSpec(k=48, n=16, with_q=False), {}),
    "qdq_contrib_domain.onnx": (QdqSpec(k=32, n=32, domain="com.microsoft"), {}),
    "qdq_scales_along_k.onnx": (QdqSpec(k=32, n=32, scale_axis=0), {}),
}


def write_reports(models: list[Path]) -> None:
    build = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build")).resolve()
    ort.register_execution_provider_library("npuflow", str(build / "lib/libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    for model in models:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.jsonl"
            options = ort.SessionOptions()
            options.add_provider_for_devices(devices, {"report": str(report)})
            ort.InferenceSession(str(model), sess_options=options)
            (CORPUS / "json" / (model.stem + ".jsonl")).write_text(report.read_text())


def main() -> None:
    (CORPUS / "model").mkdir(parents=True, exist_ok=True)
    (CORPUS / "json").mkdir(parents=True, exist_ok=True)
    written = []
    for name, (spec, kwargs) in MODELS.items():
        path = CORPUS / "model" / name
        onnx.save(single_group_model(spec, **kwargs), str(path))
        written.append(path)
    write_reports(written + [ROOT / "tests/fixtures/vision/vit_encoder_torchscript.onnx"])
    print(f"wrote {len(written)} models and {len(written) + 1} reports under {CORPUS}")


if __name__ == "__main__":
    main()
