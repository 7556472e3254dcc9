"""Cosine of every vision fixture's outputs, npuflow against the ONNX Runtime CPU EP, per
exporter and optimization level (the table in docs/faithfulness.md).

    NPUFLOW_BUILD_DIR=build .venv/bin/python tools/faithfulness.py [DIR ...]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build")).resolve()
LEVELS = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def cosine(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def pixels_for(path: str, batch: int = 1, seed: int = 0):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    shape = [batch if not isinstance(d, int) else d for d in session.get_inputs()[0].shape]
    return {session.get_inputs()[0].name: np.random.default_rng(seed).standard_normal(shape)
            .astype(np.float32)}


def run(path: str, level: str, devices, options=None, batch=1):
    feed = pixels_for(path, batch)
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = 2
    cpu = ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    report = Path(tempfile.mkdtemp()) / "report.jsonl"
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.intra_op_num_threads = 2
    so.add_provider_for_devices(devices, {"report": str(report), **(options or {})})
    npu = ort.InferenceSession(path, sess_options=so)
    records = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    names = [o.name for o in cpu.get_outputs()]
    ref = cpu.run(None, feed)
    got = npu.run(None, feed)
    return {n: cosine(r, g) for n, r, g in zip(names, ref, got)}, records


def main():
    ort.register_execution_provider_library("npuflow", str(BUILD / "lib" / "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    args = sys.argv[1:]
    device = "host"
    if "--device" in args:
        at = args.index("--device")
        device = args[at + 1]
        del args[at:at + 2]
    dirs = [Path(p) for p in args] or [ROOT / "tests" / "fixtures" / "vision"]
    print(f"device: {device}")
    print("| fixture | level | encoder claim | outputs: cosine vs CPU EP |")
    print("|---|---|---|---|")
    for d in dirs:
        for path in sorted(d.glob("*.onnx")):
            for level in LEVELS:
                cos, records = run(str(path), level, devices, {"device": device})
                claims = [c for r in records for c in r["claims"] if c["kind"] == "vision_encoder"]
                refusals = [x["reason"] for r in records if r.get("matcher") == "vision"
                            for x in r["refusals"]]
                claim = (f"{claims[0]['family']} L={claims[0]['layers']} H={claims[0]['heads']}"
                         if claims else f"refused {refusals}")
                outs = ", ".join(f"{k} {v:.9f} (1-cos {1 - v:.1e})" for k, v in cos.items())
                print(f"| {path.name} | {level} | {claim} | {outs} |", flush=True)


if __name__ == "__main__":
    main()
