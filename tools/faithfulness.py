"""Cosine and relative L2 error of every vision fixture's outputs, npuflow against the ONNX
Runtime CPU EP, per exporter and optimization level (the tables in docs/faithfulness.md). Where
the claimed encoder exits LayerNorm'd taps to a head left on the CPU EP (Depth Anything), the
taps are added as graph outputs and measured too.

    NPUFLOW_BUILD_DIR=build .venv/bin/python tools/faithfulness.py [DIR ...]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build")).resolve()
LEVELS = {"disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
          "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def agreement(ref, got) -> tuple[float, float]:
    """(cosine, relative L2 error ||ref - got|| / ||ref||)."""
    ref = np.asarray(ref, np.float64).ravel()
    got = np.asarray(got, np.float64).ravel()
    return (float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got))),
            float(np.linalg.norm(ref - got) / np.linalg.norm(ref)))


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
    so.add_provider_for_devices(devices, {"report": str(report), "claim": "all", **(options or {})})
    npu = ort.InferenceSession(path, sess_options=so)
    records = [json.loads(x) for x in report.read_text().splitlines()] if report.exists() else []
    names = [o.name for o in cpu.get_outputs()]
    ref = cpu.run(None, feed)
    got = npu.run(None, feed)
    return {n: agreement(r, g) for n, r, g in zip(names, ref, got)}, records


def norm_taps(records) -> list[str]:
    """The LayerNorm'd values a claimed encoder exits after its layers, when it exits several."""
    claims = [c for r in records for c in r["claims"] if c["kind"] == "vision_encoder"]
    taps = sorted((e for c in claims for e in c["exits"] if e["norm"] and e["stream_index"] > 0),
                  key=lambda e: e["stream_index"])
    return [e["value"] for e in taps] if len(taps) > 1 else []


def with_taps(path: Path, taps) -> str:
    """A copy of the model that also returns the taps; returns its path."""
    model = onnx.load(str(path))
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    model.graph.output.extend(inferred[name] for name in taps)
    out = Path(tempfile.mkdtemp()) / path.name
    onnx.save(model, str(out))
    return str(out)


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
    print("| fixture | level | encoder claim | outputs: cosine vs CPU EP (1-cos, relative L2) |")
    print("|---|---|---|---|")
    for d in dirs:
        for path in sorted(d.glob("*.onnx")):
            _, records = run(str(path), "disable", devices, {"device": device})
            taps = norm_taps(records)
            measured = with_taps(path, taps) if taps else str(path)
            for level in LEVELS:
                cos, records = run(measured, level, devices, {"device": device})
                claims = [c for r in records for c in r["claims"] if c["kind"] == "vision_encoder"]
                refusals = [x["reason"] for r in records if r.get("matcher") == "vision"
                            for x in r["refusals"]]
                claim = (f"{claims[0]['family']} L={claims[0]['layers']} H={claims[0]['heads']}"
                         if claims else f"refused {refusals}")
                tap_names = {name: f"tap {i + 1}" for i, name in enumerate(taps)}
                outs = ", ".join(
                    f"{tap_names.get(k, k)} {c:.9f} (1-cos {1 - c:.1e}, relL2 {r:.1e})"
                    for k, (c, r) in cos.items())
                print(f"| {path.name} | {level} | {claim} | {outs} |", flush=True)


if __name__ == "__main__":
    main()
