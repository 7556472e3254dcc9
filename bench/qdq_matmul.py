"""npuflow's fused A8W8 QDQ MatMul against the ONNX Runtime CPU EP on the same QDQ graphs.

The graphs take and return float, with a QuantizeLinear in front of and a DequantizeLinear behind
each group (the form quantize_static emits): only then does the CPU EP at ORT_ENABLE_ALL replace
the groups with its own integer QLinearMatMul, so it is measured at its best.

Arms (same model, same intra-op thread count):
  npuflow        the npuflow EP (host device), ORT_ENABLE_ALL
  cpu_basic      CPU EP, ORT_ENABLE_BASIC (DQ -> float MatMul -> Q)
  cpu_all        CPU EP, ORT_ENABLE_ALL (QDQ groups fused into QLinearMatMul)

Each arm runs in its own process (so its peak RSS is its own); arms alternate over --rounds
rounds and the median latency per arm is reported with the ratios CPU / npuflow (> 1: npuflow is
faster). Peak RSS growth (VmHWM after, minus VmRSS before, with malloc_trim and a VmHWM reset through
/proc/self/clear_refs before) is measured around the first run, where each arm allocates what a
run needs, and around the timed steady-state runs.

    make bench                      # the table in docs/performance.md
    .venv/bin/python bench/qdq_matmul.py --rows 32 --runs 20
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
ARMS = ["npuflow", "cpu_basic", "cpu_all"]


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def worker(args):
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    level = ort.GraphOptimizationLevel
    if args.worker == "npuflow":
        ort.register_execution_provider_library("npuflow", str(BUILD_DIR / "lib" / "libonnxruntime_npuflow.so"))
        devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
        so.graph_optimization_level = level.ORT_ENABLE_ALL
        so.add_provider_for_devices(devices, {"claim": "all"})  # measure the claims, not the policy
        session = ort.InferenceSession(args.model, sess_options=so)
    else:
        so.graph_optimization_level = level.ORT_ENABLE_BASIC if args.worker == "cpu_basic" else level.ORT_ENABLE_ALL
        session = ort.InferenceSession(args.model, sess_options=so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        shape = [args.rows if not isinstance(d, int) else d for d in i.shape]
        if i.type == "tensor(int8)":
            feeds[i.name] = rng.integers(-128, 128, size=shape).astype(np.int8)
        else:
            feeds[i.name] = (rng.standard_normal(size=shape) * 0.8).astype(np.float32)
    libc = ctypes.CDLL("libc.so.6")

    def reset_peak():
        libc.malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return status_kb("VmRSS")

    # The first run allocates what the arm needs per run (the CPU EP's dequantized float tensors,
    # npuflow's int32 accumulators); later runs reuse arenas and scratch.
    rss_before = reset_peak()
    session.run(None, feeds)
    first_run_growth = status_kb("VmHWM") - rss_before
    for _ in range(3):
        session.run(None, feeds)
    rss_before = reset_peak()
    times = []
    # At least --runs runs and --min-ms of them: ten runs of a fraction of a millisecond are too
    # short a sample on a shared VM (at M = 16, 20 runs read 0.78-1.00 ms for 2000 runs' 0.72-0.88).
    start = time.perf_counter()
    while len(times) < args.runs or (time.perf_counter() - start) * 1e3 < args.min_ms:
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"ms": statistics.median(times), "first_run_growth_kb": first_run_growth,
                      "steady_growth_kb": status_kb("VmHWM") - rss_before}))


def run_arm(arm, model, rows, runs, threads, min_ms):
    cmd = [sys.executable, __file__, "--worker", arm, "--model", model, "--rows", str(rows),
           "--runs", str(runs), "--min-ms", str(min_ms), "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=ARMS)
    parser.add_argument("--model")
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 16, 32, 128, 512])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per arm and round, at least")
    parser.add_argument("--min-ms", type=float, default=500.0,
                        help="timed milliseconds per arm and round, at least (more runs where they are short)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rss-shape", default="256x1024x1024", help="MxKxN of the RSS case")
    args = parser.parse_args()
    if args.worker:
        args.rows = args.rows[0]
        return worker(args)

    import onnx
    from qdq_models import QWEN3_PROJECTIONS, QdqSpec, demo_layer_model, single_group_model

    tmp = Path(tempfile.mkdtemp(prefix="npuflow-bench-"))
    cases = []
    for per_channel in (True, False):
        path = tmp / f"layer_{'pc' if per_channel else 'pt'}.onnx"
        onnx.save(demo_layer_model(rows="M", per_channel=per_channel), str(path))
        for rows in args.rows:
            cases.append((f"Qwen3 layer, 7 projections, {'per-channel' if per_channel else 'per-tensor'}", rows, str(path),
                          sum(k * n for k, n in QWEN3_PROJECTIONS.values())))
    m, k, n = (int(v) for v in args.rss_shape.split("x"))
    rss_path = tmp / "rss.onnx"
    # The memory case as the ONNX pack design note measured it: int8 in, int8 out, so the CPU EP
    # (which cannot fuse a group on graph inputs/outputs) materializes x_dq, w_dq and y in float.
    onnx.save(single_group_model(QdqSpec(k=k, n=n, per_channel=True)), str(rss_path))
    cases.append((f"one group {k}x{n}, per-channel, int8 in/out", m, str(rss_path), k * n))
    float_io_path = tmp / "one_float_io.onnx"
    onnx.save(single_group_model(QdqSpec(k=k, n=n, per_channel=True), float_io=True), str(float_io_path))
    cases.append((f"one group {k}x{n}, per-channel, float in/out", m, str(float_io_path), k * n))

    print(f"threads={args.threads} runs={args.runs} min-ms={args.min_ms:g} rounds={args.rounds} (median ms per run)")
    header = ("| case | M | npuflow ms | CPU EP basic ms | CPU EP all ms | basic / npuflow | all / npuflow "
              "| best CPU / npuflow | first-run RSS growth kB: npuflow / basic / all "
              "| steady RSS growth kB: npuflow / basic / all | int8 GOP/s: npuflow / best CPU |")
    print(header)
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    # The last column is the GEMMs' work (2 x M x sum of K x N) over each arm's time, to read
    # against the machine's int8 dot-product ceiling (build/bin/npuflow_bench_peak).
    for name, rows, path, macs_per_row in cases:
        results = {arm: [] for arm in ARMS}
        for round_ in range(args.rounds):
            order = ARMS if round_ % 2 == 0 else list(reversed(ARMS))
            for arm in order:
                results[arm].append(run_arm(arm, path, rows, args.runs, args.threads, args.min_ms))
        ms = {arm: statistics.median(r["ms"] for r in results[arm]) for arm in ARMS}
        first = {arm: statistics.median(r["first_run_growth_kb"] for r in results[arm]) for arm in ARMS}
        steady = {arm: statistics.median(r["steady_growth_kb"] for r in results[arm]) for arm in ARMS}
        best = min(ms["cpu_basic"], ms["cpu_all"])
        print(f"| {name} | {rows} | {ms['npuflow']:.3f} | {ms['cpu_basic']:.3f} | {ms['cpu_all']:.3f} | "
              f"{ms['cpu_basic'] / ms['npuflow']:.2f}x | {ms['cpu_all'] / ms['npuflow']:.2f}x | "
              f"{best / ms['npuflow']:.2f}x | {first['npuflow']:.0f} / {first['cpu_basic']:.0f} / {first['cpu_all']:.0f} "
              f"| {steady['npuflow']:.0f} / {steady['cpu_basic']:.0f} / {steady['cpu_all']:.0f} "
              f"| {2 * rows * macs_per_row / ms['npuflow'] / 1e6:.0f} / {2 * rows * macs_per_row / best / 1e6:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
