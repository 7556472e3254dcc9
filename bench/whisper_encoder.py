"""make bench-ggml-whisper (also run by make bench-ggml): whisper.cpp's encoder with and without
libggml-npuflow.so, in one run.

Arms, each a whisper-bench process (pywhispercpp's whisper.cpp, tools/setup.sh) on Whisper
tiny.en converted from CTranslate2:
  cpu      stock whisper.cpp, CPU backend only
  faster   libggml-npuflow.so on host at its default claim (faster: only the MUL_MAT shapes this
           machine measured faster than the CPU backend)
  all      the same with NPUFLOW_CLAIM=all: every eligible MUL_MAT (attention stays on the CPU)
whisper-bench times one encode of 30 s of audio (1500 rows per MUL_MAT, weights packed on that
first encode included). Rounds rotate the arm order; each figure is the median over rounds,
ratios are to the CPU arm. One whisper-cli run on device=sim, over an espeak-ng clip, reads the
modelled RK3588 time of what NPUFLOW took against the board's CPU alone. Measures only; asserts
nothing.

  bench/whisper_encoder.py [--rounds 5] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

from pins import pins

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
CACHE = Path(os.environ.get("NPUFLOW_CACHE", Path.home() / ".cache" / "npuflow"))
BACKEND = BUILD / "lib" / "libggml-npuflow.so"
MODEL = ROOT / "third_party" / "whisper-tiny.en.bin"
ENCODE = re.compile(r"encode time =\s+([\d.]+) ms")
MODELLED = re.compile(r"modelled RK3588: device ([\d.]+) ms \+ host ([\d.]+) ms = ([\d.]+) ms "
                      r"\(its CPU alone: ([\d.]+) ms\)")
# The all arm keeps FLASH_ATTN_EXT on the CPU backend, so that it compares the MUL_MATs: host
# attention is issue #12's (claim=faster declines it on host).
ARMS = {"cpu": None, "faster": {}, "all": {"NPUFLOW_CLAIM": "all", "NPUFLOW_FA_MIN_KV": "1048576"}}



def whisper_bin() -> Path:
    p = pins()
    return (CACHE / f"whisper.cpp-{p['PYWHISPERCPP_VERSION']}-llama-{p['LLAMA_CPP_PYTHON_VERSION']}"
            / "build" / "bin")


def arm_env(extra: dict | None, device: str = "host") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NPUFLOW_") and k != "GGML_BACKEND_PATH"}
    if extra is not None:
        env.update({"GGML_BACKEND_PATH": str(BACKEND), "NPUFLOW_DEVICE": device, **extra})
    return env


def encode_ms(arm: str, threads: int) -> float:
    args = [str(whisper_bin() / "whisper-bench"), "-m", str(MODEL), "-t", str(threads)]
    out = subprocess.run(args, capture_output=True, text=True, env=arm_env(ARMS[arm]), check=True)
    return float(ENCODE.search(out.stderr + out.stdout).group(1))


def modelled_rk3588(threads: int):
    with tempfile.TemporaryDirectory() as tmp:
        clip = Path(tmp) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(clip),
                        "Please call the office before noon tomorrow."], check=True, timeout=120)
        env = arm_env({"NPUFLOW_CLAIM": "all", "NPUFLOW_PROF": "1"}, device="sim")
        out = subprocess.run([str(whisper_bin() / "whisper-cli"), "-m", str(MODEL), "-f", str(clip),
                              "-t", str(threads)], capture_output=True, text=True, env=env,
                             check=True)
    match = MODELLED.search(out.stderr)
    return tuple(float(x) for x in match.groups()) if match else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    order = list(ARMS)
    for round_index in range(args.rounds):
        for arm in order[round_index % len(order):] + order[:round_index % len(order)]:
            times[arm].append(encode_ms(arm, args.threads))
    cpu = statistics.median(times["cpu"])
    print(f"whisper.cpp encoder, Whisper tiny.en (CTranslate2 -> ggml F16), 30 s window, "
          f"{args.threads} threads, median of {args.rounds}")
    print("| arm | encode ms | vs CPU backend |")
    print("|---|---|---|")
    for arm, values in times.items():
        median = statistics.median(values)
        print(f"| {arm} | {median:.1f} | {cpu / median:.2f}x |")
    modelled = modelled_rk3588(args.threads)
    if modelled:
        device, host, total, cpu_alone = modelled
        print(f"modelled RK3588 (sim, claim=all) for what NPUFLOW took: device {device:.1f} ms + "
              f"host {host:.1f} ms = {total:.1f} ms; its CPU alone {cpu_alone:.1f} ms "
              f"({cpu_alone / total:.2f}x)")


if __name__ == "__main__":
    main()
