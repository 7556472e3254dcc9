"""The ConvTranspose table of docs/faithfulness.md: every ConvTranspose node of the U-Net generator
fixtures (tests/fixtures/conv), the Depth Anything fixture's DPT head and the tiny SAM's mask
decoder (tests/fixtures/sam, six prompts), npuflow against the CPU EP on `host` and `sim`, per node
(each ConvTranspose output made a graph output); for SAM also the masks' IoU over the prompts.

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
from test_conv_transpose import expose_conv_transposes, mask_iou, sam_prompts  # noqa: E402


def normal(name, shape):
    return [{name: np.random.default_rng(7).standard_normal(shape).astype(np.float32)}]


MODELS = [("U-Net, TorchScript", ROOT / "tests/fixtures/conv/unet_torchscript.onnx",
           normal("image", (2, 3, 32, 32))),
          ("U-Net, dynamo", ROOT / "tests/fixtures/conv/unet_dynamo.onnx",
           normal("image", (2, 3, 32, 32))),
          ("Depth Anything DPT head", ROOT / "tests/fixtures/vision/depth_anything_torchscript.onnx",
           normal("pixel_values", (1, 3, 56, 56))),
          ("SAM mask decoder, TorchScript", ROOT / "tests/fixtures/sam/sam_tiny_torchscript.onnx",
           sam_prompts()),
          ("SAM mask decoder, dynamo", ROOT / "tests/fixtures/sam/sam_tiny_dynamo.onnx",
           sam_prompts())]


def main():
    build = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build")).resolve()
    ort.register_execution_provider_library("npuflow", str(build / "lib" /
                                                           "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    print("| model | ConvTranspose nodes | device | worst node cosine | worst relative L2 | "
          "mask IoU |")
    print("|---|---|---|---|---|---|")
    for title, path, feeds in MODELS:
        model, names = expose_conv_transposes(onnx.load(str(path)))
        data = model.SerializeToString()
        masks = "pred_masks" if any(o.name == "pred_masks" for o in model.graph.output) else None
        wanted = names + ([masks] if masks else [])
        cpu = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        refs = [dict(zip(wanted, cpu.run(wanted, feed))) for feed in feeds]
        for device in ("host", "sim"):
            options = ort.SessionOptions()
            options.add_provider_for_devices(devices, {"device": device, "claim": "all"})
            session = ort.InferenceSession(data, options)
            gots = [dict(zip(wanted, session.run(wanted, feed))) for feed in feeds]
            measured = [agreement(ref[n], got[n]) for ref, got in zip(refs, gots) for n in names]
            iou = (f"{mask_iou(np.stack([r[masks] for r in refs]), np.stack([g[masks] for g in gots])):.4f}"
                   if masks else "")
            print(f"| {title} | {len(names)} | {device} | "
                  f"{min(m.cosine for m in measured):.9f} | "
                  f"{max(m.rel_l2 for m in measured):.1e} | {iou} |")


if __name__ == "__main__":
    main()
