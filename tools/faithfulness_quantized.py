"""The QDQ-encoder tables of docs/faithfulness.md: the cases of
tests/integration/test_quantized_encoders.py (ViT and CLIP fixtures, all-MiniLM-L6-v2, quantized
by quantize_static per channel and per tensor) and the forms of test_quantized_forms.py (int4 per
channel, uint4 blocks, uint8 and int16 activations) under NPUFLOW_QUANT=fp16 at level all, on
`host` and `sim`, against their float reading and against the fp32 model; the CPU EP running the
QDQ model itself beside them.

    NPUFLOW_BUILD_DIR=build .venv/bin/python tools/faithfulness_quantized.py
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from gates import agreement  # noqa: E402
from test_quantized_encoders import (ACTIONS, QUERIES, SUBJECTS, build_quantized,  # noqa: E402
                                     cpu_run, float_reading, mean_pooled, real_tokens, tokens)
from test_quantized_forms import build_forms  # noqa: E402


def nearest(session, corpus) -> list:
    """Per query: (its nearest sentence, the set of its five nearest)."""
    def embed(sentences):
        feeds = tokens(sentences)
        return mean_pooled(session.run(None, feeds)[0], feeds["attention_mask"])
    scores = embed(QUERIES) @ embed(corpus).T
    return [(int(np.argmax(row)), set(np.argsort(-row)[:5].tolist())) for row in scores]


def print_rows(devices, case: str, form: str, fp32: str, qdq: str, feeds: dict):
    reading = cpu_run(float_reading(onnx.load(qdq)).SerializeToString(), feeds)
    reference = real_tokens(feeds, cpu_run(fp32, feeds))
    cpu_qdq = agreement(reference, real_tokens(feeds, cpu_run(qdq, feeds, "all")))
    for device in ("host", "sim"):
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.add_provider_for_devices(devices, {"device": device})
        got = ort.InferenceSession(qdq, sess_options=options).run(None, feeds)[0]
        a = agreement(reading, got)
        b = agreement(reference, real_tokens(feeds, got))
        print(f"| {case} | {form} | {device} | {a.cosine:.9f}, {a.rel_l2:.1e} | {b.cosine:.6f} | "
              f"{cpu_qdq.cosine:.6f} |")


def main():
    build = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
    ort.register_execution_provider_library("npuflow", str(build / "lib" /
                                                           "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    print("| case | weights | device | against its float reading (cosine, relative L2) | "
          "cosine to the fp32 model | the CPU EP's QDQ run: cosine to the fp32 model |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for (case, per_channel), (fp32, qdq, feeds) in build_quantized(Path(folder)).items():
            print_rows(devices, case, "per channel" if per_channel else "per tensor", fp32, qdq,
                       feeds)
            if case == "minilm_matmuls" and per_channel:
                ranking = (fp32, qdq)
        # 10 queries against 100 sentences: how often the nearest one, and the five nearest, are
        # the fp32 model's.
        corpus = [f"{s} {a}." for s in SUBJECTS for a in ACTIONS]
        want = nearest(ort.InferenceSession(ranking[0], providers=["CPUExecutionProvider"]), corpus)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.add_provider_for_devices(devices, {"device": "host"})
        for name, session in (
                ("npuflow (fp16)", ort.InferenceSession(ranking[1], sess_options=options)),
                ("the CPU EP's QDQ run", ort.InferenceSession(
                    ranking[1], providers=["CPUExecutionProvider"]))):
            got = nearest(session, corpus)
            top1 = sum(g[0] == w[0] for g, w in zip(got, want))
            top5 = sum(g[1] == w[1] for g, w in zip(got, want))
            print(f"minilm_matmuls per channel, {name}: nearest sentence as fp32's for {top1} of "
                  f"{len(want)} queries, five nearest for {top5}")
        print("\n| model | form | device | against its float reading (cosine, relative L2) | "
              "cosine to the fp32 model | the CPU EP's QDQ run: cosine to the fp32 model |")
        print("|---|---|---|---|---|---|")
        (Path(folder) / "forms").mkdir()
        for (name, form), (fp32, qdq, feeds) in build_forms(Path(folder) / "forms").items():
            print_rows(devices, name, form.replace("_", " "), fp32, qdq, feeds)


if __name__ == "__main__":
    main()
