"""npuflow's host device against the ONNX Runtime CPU EP on the encoder families at real size
(random weights): ViT-B/16, CLIP-B/16, SigLIP-B/16 (224 px), DINOv2-S and Depth Anything V2 S
(518 px, 1370 tokens), BERT-base at 128 and 512 tokens, and RF-DETR Base's windowed DINOv2-S
backbone (560 px: 16 windows of 101 tokens, 4 global blocks over 1616), and SAM ViT-B with one point
prompt (1024 px: a 64x64 grid, windows of 14 padded to 70x70, 4 global blocks over 4096 tokens).

Both sessions live in this process with the same intra-op thread count (2 by default) and run
alternately, npuflow then CPU EP, --runs times after a warm-up; the table gives the medians and the
ratio CPU EP / npuflow (> 1: npuflow is faster). npuflow claims with NPUFLOW_CLAIM=all on the host
device, so the figure is what a claim would cost; the Conv claim is off here
(bench/conv_transpose.py times it node by node).

--roofline adds, per model, the GEMM work of npuflow's claim (2 x MACs: projections and attention)
over each arm's time, against the rate of the CPU EP's own fp32 GEMM (MLAS) on one large square
MatMul measured in the same process with the same threads: how far from this machine's attainable
fp32 rate each arm runs, and what rate a given speed-up over the CPU EP would need.

--write-costs writes the measurements as the cost table claim=faster reads
(~/.cache/npuflow/claim-costs-<machine>.json, or --costs PATH).

Models are exported once with the fixtures venv (torch + transformers) and cached under
~/.cache/npuflow/bench-encoders-<pins>/, keyed by the exporters' sources and the venv.

    make bench-encoders
    .venv/bin/python bench/encoders.py --only vit bert128 --runs 5
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from cost_table import CACHE, claimed_flops, write_rows  # noqa: E402

BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))

# name -> (label, file in the export dir, how to export it)
MODELS = {
    "vit": ("ViT-B/16", "vit.onnx", ("vision", "vit")),
    "clip": ("CLIP-B/16", "clip.onnx", ("vision", "clip")),
    "siglip": ("SigLIP-B/16", "siglip.onnx", ("vision", "siglip")),
    "dinov2": ("DINOv2-S", "dinov2.onnx", ("vision", "dinov2")),
    "depth_anything": ("Depth Anything V2 S", "depth_anything.onnx", ("vision", "depth_anything")),
    "bert128": ("BERT-base, 128 tokens", "bert_128.onnx", ("bert", 128)),
    "bert512": ("BERT-base, 512 tokens", "bert_512.onnx", ("bert", 512)),
    # Named by its exporter's hash: the cache directory's key leaves that exporter out.
    "rfdetr": ("RF-DETR Base backbone", "rfdetr_base-" + hashlib.sha256(
        (ROOT / "tools/fixtures/export_windowed.py").read_bytes()).hexdigest()[:10] + ".onnx",
        ("windowed", "base")),
    # SamModel at ViT-B's size (1024 px, a 64x64 grid), point-prompted: the image encoder's
    # blocks are claimed, the mask decoder's transposes too; the embedding, neck (the Conv claim
    # is off here), prompt encoder and the rest of the decoder run on the CPU EP.
    "sam": ("SAM ViT-B, 1 point", "sam_vit_b-" + hashlib.sha256(
        (ROOT / "tools/fixtures/export_sam.py").read_bytes()).hexdigest()[:10] + ".onnx",
        ("sam", "vit-b")),
}
# Token counts at the exported size, for claims whose shapes ONNX left symbolic (TorchScript's
# DINOv2 interpolates its position embedding from the image, so T is not static in the graph).
TOKENS = {"vit": 197, "clip": 197, "siglip": 196, "dinov2": 1370, "depth_anything": 1370,
          "bert128": 128, "bert512": 512, "rfdetr": 101, "sam": 4096}


def fixtures_python(which: str = "") -> str:
    """The fixtures venv's python: transformers 4.x, or 5.x with which="next"."""
    venv = subprocess.run(["bash", str(ROOT / "tools" / "fixtures" / "venv.sh")] +
                          ([which] if which else []), check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return str(Path(venv) / "bin" / "python")


def export_dir(python: str) -> Path:
    pins = hashlib.sha256()
    for source in ("tools/fixtures/export_vision.py", "bench/export_models.py"):
        pins.update((ROOT / source).read_bytes())
    pins.update(python.encode())
    return CACHE / f"bench-encoders-{pins.hexdigest()[:12]}"


def ensure_export(file: str, how: str, arg, python: str, out: Path) -> Path:
    """out/file, exported once by bench/export_models.py (`how arg`) in the fixtures venv."""
    path = out / file
    if path.exists():
        return path
    out.mkdir(parents=True, exist_ok=True)
    print(f"exporting {file} into {out} (once)", file=sys.stderr, flush=True)
    partial = path.with_suffix(".partial.onnx")
    if how == "windowed":  # rfdetr's module needs transformers 5.x
        subprocess.run([fixtures_python("next"), str(ROOT / "tools/fixtures/export_windowed.py"),
                        "--base", str(partial)], check=True)
    elif how == "pix2pix":
        subprocess.run([python, str(ROOT / "tools/fixtures/export_unet.py"), "--pix2pix",
                        str(partial)], check=True)
    elif how == "sam":
        subprocess.run([python, str(ROOT / "tools/fixtures/export_sam.py"), "--vit-b",
                        str(partial)], check=True)
    else:
        subprocess.run([python, str(ROOT / "bench/export_models.py"), how, str(arg),
                        str(partial)], check=True)
    partial.rename(path)
    return path


def ensure_model(name: str, python: str, out: Path) -> Path:
    _, file, (how, arg) = MODELS[name]
    return ensure_export(file, how, arg, python, out)


def feeds_for(session, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in session.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
        if "int64" in inp.type:  # a mask or a point label: ones (SAM's 1: foreground)
            feeds[inp.name] = (np.ones(shape, np.int64) if "mask" in inp.name or "label" in inp.name
                               else rng.integers(0, 30000, shape, dtype=np.int64))
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def measure(path: Path, threads: int, runs: int, tmp: Path):
    import numpy as np
    import onnxruntime as ort

    def options():
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        return so

    cpu = ort.InferenceSession(str(path), sess_options=options(),
                               providers=["CPUExecutionProvider"])
    so = options()
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    report = tmp / f"{path.stem}.report.jsonl"
    report.unlink(missing_ok=True)
    # Without the Conv claims (Depth Anything's DPT head, SAM's neck), which
    # bench/conv_transpose.py times node by node and writes rows for: the figures stay the
    # encoder's, as measured before that claim existed.
    so.add_provider_for_devices(devices, {"claim": "all", "device": "host", "conv": "0",
                                          "report": str(report)})
    npu = ort.InferenceSession(str(path), sess_options=so)
    feeds = feeds_for(cpu)
    want = cpu.run(None, feeds)
    got = npu.run(None, feeds)
    cosine = min(float(np.dot(a.ravel(), b.ravel()) /
                       (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)) for a, b in zip(got, want))
    times = {"npuflow": [], "cpu": []}
    for _ in range(runs):
        for arm, session in (("npuflow", npu), ("cpu", cpu)):
            start = time.perf_counter()
            session.run(None, feeds)
            times[arm].append((time.perf_counter() - start) * 1e3)
    return statistics.median(times["npuflow"]), statistics.median(times["cpu"]), cosine, report


def sgemm_gflops(threads: int, size: int = 2048, runs: int = 5) -> float:
    """The CPU EP's fp32 GEMM rate on one size^3 MatMul (median of `runs`, after a warm-up)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    b = numpy_helper.from_array(rng.standard_normal((size, size), dtype=np.float32), "b")
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "sgemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size, size])],
                              [b])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    session = ort.InferenceSession(helper.make_model(graph).SerializeToString(), so,
                                   providers=["CPUExecutionProvider"])
    feeds = {"a": rng.standard_normal((size, size), dtype=np.float32)}
    session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return 2.0 * size ** 3 / statistics.median(times) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=list(MODELS), help="default: all")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write-costs", action="store_true")
    parser.add_argument("--roofline", action="store_true",
                        help="GFLOP/s of each arm against the CPU EP's large-GEMM rate")
    parser.add_argument("--costs", type=Path, help="cost table path (default: the cache's)")
    args = parser.parse_args()

    import onnxruntime as ort
    ort.register_execution_provider_library("npuflow",
                                            str(BUILD_DIR / "lib" / "libonnxruntime_npuflow.so"))
    python = fixtures_python()
    out = export_dir(python)
    tmp = out / "reports"
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    peak = sgemm_gflops(args.threads) if args.roofline else 0.0
    if peak:
        print(f"CPU EP fp32 GEMM, 2048^3, {args.threads} threads: {peak:.1f} GFLOP/s")
    print(f"{'model':<24} {'CPU EP ms':>10} {'npuflow ms':>11} {'ratio':>7} {'cosine':>12}")
    for name in args.only or list(MODELS):
        label = MODELS[name][0]
        path = ensure_model(name, python, out)
        npu_ms, cpu_ms, cosine, report = measure(path, args.threads, args.runs, tmp)
        print(f"{label:<24} {cpu_ms:>10.1f} {npu_ms:>11.1f} {cpu_ms / npu_ms:>6.2f}x "
              f"{cosine:>12.9f}", flush=True)
        graph = [json.loads(line) for line in report.read_text().splitlines()]
        claims = [c for g in graph for c in g.get("claims", [])
                  if c.get("kind") == "vision_encoder"]
        if claims and peak:
            gflop = sum(claimed_flops(c, TOKENS[name]) for c in claims) / 1e9
            npu_rate, cpu_rate = gflop / npu_ms * 1e3, gflop / cpu_ms * 1e3
            print(f"  claimed GEMM work {gflop:.1f} GFLOP: npuflow {npu_rate:.1f} GFLOP/s "
                  f"({npu_rate / peak:.0%} of the large GEMM's), CPU EP {cpu_rate:.1f} "
                  f"({cpu_rate / peak:.0%}); 1.2x the CPU EP would need {1.2 * cpu_rate:.1f} "
                  f"({1.2 * cpu_rate / peak:.0%})", flush=True)
        if claims:
            rows.append(dict(kind="vision_encoder", model=label, family=claims[0].get("family", ""),
                             tokens=TOKENS[name],
                             hidden=claims[0].get("hidden", 0),
                             flops=claimed_flops(claims[0], TOKENS[name]),
                             npuflow_ms=npu_ms, cpu_ep_ms=cpu_ms))
        else:
            print(f"  (nothing claimed in {label}: no cost row)", flush=True)
    if args.write_costs:
        path = write_rows(args.costs, {"vision_encoder"}, rows, args.threads,
                          "bench/encoders.py --write-costs")
        print(f"wrote {path}")

if __name__ == "__main__":
    main()
