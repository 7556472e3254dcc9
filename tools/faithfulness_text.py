"""The text-encoder table of docs/faithfulness.md: the real all-MiniLM-L6-v2 and e5-small-v2
(tools/setup.sh fetches them) on a padded batch of real sentences, npuflow against the CPU EP on
`host`, `sim` and `sim` with attention on the device (`attention=device`, librocketnpu's flash
attention) at each optimization level.

    NPUFLOW_BUILD_DIR=build .venv/bin/python tools/faithfulness_text.py
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from gates import agreement  # noqa: E402
from test_text_encoders import MODELS, REAL, batch, mean_pool  # noqa: E402

LEVELS = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def main():
    build = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
    ort.register_execution_provider_library("npuflow", str(build / "lib" /
                                                           "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    print("| model | level | device | worst token cosine | relative L2 | worst pooled cosine |")
    print("|---|---|---|---|---|---|")
    for stem in sorted(REAL):
        path = str(MODELS / f"{stem}.onnx")
        feed = batch(stem)
        mask = feed["attention_mask"]
        for level, value in LEVELS.items():
            options = ort.SessionOptions()
            options.graph_optimization_level = value
            options.log_severity_level = 3
            [ref] = ort.InferenceSession(path, options,
                                         providers=["CPUExecutionProvider"]).run(None, feed)
            for device, knobs in (("host", {"device": "host"}), ("sim", {"device": "sim"}),
                                  ("sim, attention=device",
                                   {"device": "sim", "attention": "device"})):
                options = ort.SessionOptions()
                options.graph_optimization_level = value
                options.log_severity_level = 3
                options.add_provider_for_devices(devices, knobs)
                [got] = ort.InferenceSession(path, options).run(None, feed)
                tokens = zip(ref.reshape(-1, ref.shape[-1]), got.reshape(-1, got.shape[-1]))
                worst = min(agreement(r, g).cosine for r, g in tokens)
                pooled = (mean_pool(ref, mask) * mean_pool(got, mask)).sum(axis=1).min()
                print(f"| {stem} | {level} | {device} | {worst:.9f} | "
                      f"{agreement(ref, got).rel_l2:.1e} | {pooled:.9f} |")


if __name__ == "__main__":
    main()
