"""The ConvTranspose table of docs/faithfulness.md: every ConvTranspose node of the U-Net generator
fixtures (tests/fixtures/conv) and of the Depth Anything fixture's DPT head, npuflow against the
CPU EP on `host` and `sim`, per node (each ConvTranspose output made a graph output).

    NPUFLOW_BUILD_DIR=build .venv/bin/python tools/faithfulness_conv.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from gates import agreement  # noqa: E402
from test_conv_transpose import expose_conv_transposes  # noqa: E402

MODELS = [("U-Net, TorchScript", ROOT / "tests/fixtures/conv/unet_torchscript.onnx", "image",
           (2, 3, 32, 32)),
          ("U-Net, dynamo", ROOT / "tests/fixtures/conv/unet_dynamo.onnx", "image", (2, 3, 32, 32)),
          ("Depth Anything DPT head", ROOT / "tests/fixtures/vision/depth_anything_torchscript.onnx",
           "pixel_values", (1, 3, 56, 56))]


def main():
    build = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build")).resolve()
    ort.register_execution_provider_library("npuflow", str(build / "lib" /
                                                           "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    print("| model | ConvTranspose nodes | device | worst node cosine | worst relative L2 |")
    print("|---|---|---|---|---|")
    for title, path, input_name, shape in MODELS:
        model, names = expose_conv_transposes(onnx.load(str(path)))
        data = model.SerializeToString()
        feed = {input_name: np.random.default_rng(7).standard_normal(shape).astype(np.float32)}
        cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        ref = dict(zip(names, cpu.run(names, feed)))
        for device in ("host", "sim"):
            options = ort.SessionOptions()
            options.add_provider_for_devices(devices, {"device": device, "claim": "all"})
            got = dict(zip(names, ort.InferenceSession(data, options).run(names, feed)))
            measured = [agreement(ref[n], got[n]) for n in names]
            print(f"| {title} | {len(names)} | {device} | "
                  f"{min(m.cosine for m in measured):.9f} | "
                  f"{max(m.rel_l2 for m in measured):.1e} |")


if __name__ == "__main__":
    main()
