"""npuflow against the ONNX Runtime CPU EP on quantized sentence encoders as users have them: the
real all-MiniLM-L6-v2 quantized by onnxruntime.quantization (QDQ int8 per channel with int8 and
with uint8 activations, and block-wise uint4 from MatMulNBitsQuantizer's QDQ format: the recipes
of tests/integration/test_quantized_forms.py), and the real dynamically quantized MiniLM-q and
e5-small-v2-q (the langchain4j jars).

Arms, in one process with the same intra-op thread count (2 by default), run alternately after a
warm-up, --runs times:
  cpu_ep     the CPU EP at ORT_ENABLE_ALL, its best on each form (QLinear fusions, MatMulNBits)
  fp16       npuflow, NPUFLOW_QUANT=fp16 (default): the encoder as one node
  w8a8       npuflow, NPUFLOW_QUANT=w8a8: the int8 QDQ groups native (QDQ int8 models only)
npuflow runs on the host device with claim=all, so the figure is what a claim costs. The table
gives the medians, the ratio CPU EP / arm (> 1: npuflow is faster) and each arm's cosine to the
fp32 model (the CPU EP's run of the quantized model beside it), over the real tokens.

--write-costs stores the fp16 arm's measurements as the cost table's `quantized_encoder` rows
(keyed by the claim's quant form: dynamic_int8 or qdq), which claim=faster reads for quantized
encoders (~/.cache/npuflow/claim-costs-<machine>.json, or --costs PATH; other kinds' rows kept).

    .venv/bin/python bench/quantized_encoders.py --runs 10 --write-costs
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "bench"))
from cost_table import claimed_flops, write_rows  # noqa: E402
BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
TEXT_Q = ROOT / "third_party" / "text-models-q"
# A batch of 8 sentences, right-padded to the longest (the real tokens decide the cosine).
SENTENCES = ["The quick brown fox jumps over the lazy dog near the quiet river bank.",
             "NPUs run transformer encoders on edge devices without changing the application.",
             "A much longer sentence about running quantized sentence embedding models on small "
             "boards, where memory bandwidth and integer arithmetic decide the speed.",
             "Hello there.", "What is the capital of France?",
             "Quantized models keep their weights in eight or four bits.",
             "The meeting was moved to Thursday afternoon because of the storm.",
             "Embeddings rank sentences by meaning."]


def build(folder: Path) -> list[tuple[str, str, str, dict, list[str]]]:
    """(label, fp32 path, quantized path, feeds, npuflow arms) per model."""
    import onnx
    from test_quantized_encoders import tokens
    from test_quantized_forms import quantize, source_model
    from text_fixtures import tokenized

    model, calibration, _ = source_model("minilm")
    feeds = tokens(SENTENCES)
    fp32 = str(folder / "minilm.onnx")
    onnx.save(model, fp32)
    rows = []
    for form, label, arms in (("int8_per_channel", "MiniLM QDQ int8/int8 per channel",
                               ["fp16", "w8a8"]),
                              ("uint8_activations", "MiniLM QDQ uint8/int8 per channel",
                               ["fp16", "w8a8"]),
                              ("uint4_blocks", "MiniLM QDQ uint4 blocks of 32", ["fp16"])):
        quantized = quantize(form, model, fp32, calibration, folder, "minilm")
        rows.append((label, fp32, quantized, feeds, arms))
    for stem, label in (("all-minilm-l6-v2-q", "MiniLM-q (dynamic int8)"),
                        ("e5-small-v2-q", "e5-small-v2-q (dynamic int8)")):
        path = TEXT_Q / f"{stem}.onnx"
        if not path.exists():
            print(f"  ({path} is missing: run tools/setup.sh)", flush=True)
            continue
        q_feeds = tokenized(TEXT_Q / f"{stem}-tokenizer.json", SENTENCES)
        rows.append((label, None, str(path), q_feeds, ["fp16"]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write-costs", action="store_true")
    parser.add_argument("--costs", type=Path, help="cost table path (default: the cache's)")
    args = parser.parse_args()

    import onnxruntime as ort
    from gates import agreement
    from test_quantized_encoders import real_tokens

    ort.register_execution_provider_library("npuflow",
                                            str(BUILD_DIR / "lib" / "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]

    def session(path, quant=None, report=None):
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        if quant is None:
            return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
        options = {"claim": "all", "device": "host", "quant": quant}
        if report is not None:
            options["report"] = str(report)
        so.add_provider_for_devices(devices, options)
        return ort.InferenceSession(path, sess_options=so)

    def encoder_claim(report):
        records = [json.loads(line) for line in report.read_text().splitlines()]
        claims = [c for r in records for c in r.get("claims", [])
                  if c.get("kind") == "vision_encoder" and c.get("dequantized")]
        return claims[0] if claims else None

    cost_rows = []

    print(f"{'model':<36} {'arm':<7} {'ms':>8} {'CPU EP / arm':>13} {'cosine to fp32':>15}")
    with tempfile.TemporaryDirectory() as folder:
        for label, fp32, path, feeds, arms in build(Path(folder)):
            report = Path(folder) / f"report-{len(cost_rows)}-{label.split()[0]}.jsonl"
            report.unlink(missing_ok=True)
            sessions = {"cpu_ep": session(path)} | {
                arm: session(path, arm, report if arm == "fp16" else None) for arm in arms}
            reference = None
            if fp32 is not None:
                reference = real_tokens(feeds, session(fp32).run(None, feeds)[0])
            outputs = {arm: s.run(None, feeds)[0] for arm, s in sessions.items()}  # warm-up
            times = {arm: [] for arm in sessions}
            for _ in range(args.runs):
                for arm, s in sessions.items():
                    start = time.perf_counter()
                    s.run(None, feeds)
                    times[arm].append((time.perf_counter() - start) * 1e3)
            cpu_ms = statistics.median(times["cpu_ep"])
            for arm in sessions:
                ms = statistics.median(times[arm])
                cosine = ("n/a (no fp32 model)" if reference is None else
                          f"{agreement(reference, real_tokens(feeds, outputs[arm])).cosine:.6f}")
                print(f"{label:<36} {arm:<7} {ms:>8.2f} {cpu_ms / ms:>12.2f}x {cosine:>15}",
                      flush=True)
            if reference is None:  # the dynamic models: npuflow against the CPU EP itself
                a = agreement(outputs["cpu_ep"], outputs["fp16"])
                print(f"{'':<36} npuflow against the CPU EP: cosine {a.cosine:.9f}", flush=True)
            claim = encoder_claim(report) if report.exists() else None
            if claim is None:
                print(f"  (no quantized encoder claimed in {label}: no cost row)", flush=True)
                continue
            batch, tokens = next(iter(feeds.values())).shape[:2]
            cost_rows.append(dict(kind="quantized_encoder", form=claim.get("quant_form", ""),
                                  model=label, family=claim.get("family", ""), tokens=int(tokens),
                                  hidden=claim.get("hidden", 0),
                                  flops=claimed_flops(claim, int(tokens)) * int(batch),
                                  npuflow_ms=statistics.median(times["fp16"]), cpu_ep_ms=cpu_ms))
    if args.write_costs:
        written = write_rows(args.costs, {"quantized_encoder"}, cost_rows, args.threads,
                             "bench/quantized_encoders.py --write-costs")
        print(f"wrote {len(cost_rows)} quantized_encoder rows to {written}")


if __name__ == "__main__":
    main()
