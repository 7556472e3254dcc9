"""What `verify=1` costs: session creation, the first run and a steady-state run, with and
without it, on the same models and device.

With verify=1 the EP also builds every claimed node on the host device at session creation (its
reference), and the first run that reaches the device runs the node a second time on that
reference and compares; later runs are unchanged. Each measurement is a fresh process (so no
per-thread scratch, page cache of the weights aside, is warm from an earlier session); arms
alternate over --rounds rounds and the median is reported with the difference verify=1 minus
verify=0. `check` is the time the EP itself measured for the checks (the reference runs and
the comparisons, summed over the claimed nodes): the part of the first-run difference that is
not noise.

Models: the QDQ demo layer (seven A8W8 projections of a Qwen3-0.6B layer, 32 rows), a committed
vision fixture (SigLIP, 2 layers, d=64) and, when setup fetched it, the real sentence encoder
all-MiniLM-L6-v2 (6 layers, d=384; batch 1 x 128 tokens).

    .venv/bin/python bench/verify_first_run.py                 # device=sim, 5 rounds
    .venv/bin/python bench/verify_first_run.py --device sim --rounds 7
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
CHECKED = re.compile(r"checked in ([0-9.]+) ms")


def feeds_for(session, seed: int = 0) -> dict:
    """Seeded inputs for every graph input: floats ~ N(0, 1); int64 token ids, masks of ones and
    zero token types for a text encoder; symbolic dims: batch 1, 128 tokens."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for value in session.get_inputs():
        shape = [d if isinstance(d, int) else (1 if i == 0 else 128) for i, d in enumerate(value.shape)]
        if value.type == "tensor(int64)":
            if "mask" in value.name:
                feeds[value.name] = np.ones(shape, np.int64)
            elif "type" in value.name:
                feeds[value.name] = np.zeros(shape, np.int64)
            else:
                feeds[value.name] = rng.integers(1000, 20000, shape).astype(np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def worker(args) -> None:
    import onnxruntime as ort

    ort.register_execution_provider_library("npuflow", str(BUILD_DIR / "lib" / "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    # prof=1 prints, per verified node, how long its check took (the reference run and the
    # comparison, timed inside the EP) when the session ends.
    so.add_provider_for_devices(devices, {"device": args.device, "verify": args.verify, "prof": "1"})
    start = time.perf_counter()
    session = ort.InferenceSession(args.model, sess_options=so)
    create_ms = (time.perf_counter() - start) * 1e3
    feeds = feeds_for(session)
    start = time.perf_counter()
    session.run(None, feeds)
    first_ms = (time.perf_counter() - start) * 1e3
    steady = []
    for _ in range(args.runs):
        start = time.perf_counter()
        session.run(None, feeds)
        steady.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"create_ms": create_ms, "first_ms": first_ms,
                      "steady_ms": statistics.median(steady)}), flush=True)
    del session
    gc.collect()


def models(tmp: Path) -> dict[str, str]:
    from qdq_models import demo_layer_model
    import onnx

    qdq = tmp / "qdq_demo_layer.onnx"
    onnx.save(demo_layer_model(rows=32), str(qdq))
    found = {"QDQ demo layer (7 A8W8 projections, M=32)": str(qdq),
             "SigLIP fixture (2 layers, d=64)": str(ROOT / "tests/fixtures/vision/siglip_dynamo.onnx")}
    minilm = ROOT / "third_party/text-models/all-minilm-l6-v2.onnx"
    if minilm.exists():
        found["all-MiniLM-L6-v2 (6 layers, d=384, 1x128 tokens)"] = str(minilm)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="sim", choices=["sim", "host"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5, help="steady-state runs per process")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--verify", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(f"device={args.device}, {args.threads} intra-op threads, {args.rounds} rounds "
          f"(fresh process each), median ms")
    header = (f"{'model':<50} {'verify':>6} {'create':>9} {'first run':>10} {'steady run':>11} "
              f"{'check':>7}")
    keys = ("create_ms", "first_ms", "steady_ms", "check_ms")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models(Path(tmp)).items():
            samples = {"0": [], "1": []}
            for _ in range(args.rounds):
                for verify in ("0", "1"):
                    out = subprocess.run(
                        [sys.executable, __file__, "--worker", "--model", path, "--verify", verify,
                         "--device", args.device, "--runs", str(args.runs), "--threads",
                         str(args.threads)],
                        check=True, capture_output=True, text=True)
                    sample = json.loads(out.stdout.strip().splitlines()[-1])
                    sample["check_ms"] = sum(map(float, CHECKED.findall(out.stderr)))
                    samples[verify].append(sample)
            print(header)
            medians = {}
            for verify in ("0", "1"):
                medians[verify] = {key: statistics.median(s[key] for s in samples[verify])
                                   for key in keys}
                m = medians[verify]
                print(f"{name:<50} {verify:>6} {m['create_ms']:>9.1f} {m['first_ms']:>10.1f} "
                      f"{m['steady_ms']:>11.2f} {m['check_ms']:>7.1f}")
            d = {key: medians["1"][key] - medians["0"][key] for key in keys}
            print(f"{'  verify=1 minus verify=0':<50} {'':>6} {d['create_ms']:>+9.1f} "
                  f"{d['first_ms']:>+10.1f} {d['steady_ms']:>+11.2f}\n")


if __name__ == "__main__":
    main()
