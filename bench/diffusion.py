"""The DiT twin (docs/diffusion.md) denoised by `npuflow diffuse`: uncached and with Spectrum,
alternating, the median of --runs each. Prints model evaluations, seconds, the speed-up over the
uncached run and each latent's PSNR against the uncached latent.

    .venv/bin/python bench/diffusion.py build/fixtures/dit-twin.safetensors [--steps 20] [--runs 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

BUILD = Path(os.environ.get("NPUFLOW_BUILD_DIR", "build"))


def run(model, out, args, device):
    cmd = [str(BUILD / "bin" / "npuflow"), "diffuse", str(model), "--out", str(out), "--json",
           "--quiet", "--knob", f"device={device}", *args]
    result = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def psnr(x, reference):
    mse = np.mean((x.astype(np.float64) - reference) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(np.max(np.abs(reference)) ** 2 / mse)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cfg", type=float, default=4.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="host")
    parser.add_argument("--thresholds", default="0.12,0.2",
                        help="adaptive Spectrum thresholds, one arm each")
    options = parser.parse_args()
    common = ["--steps", str(options.steps), "--cfg", str(options.cfg)]
    arms = {"uncached": [], "spectrum": ["--spectrum"]}
    for threshold in options.thresholds.split(","):
        arms[f"adaptive {threshold}"] = ["--spectrum", "adaptive", "--spectrum-option",
                                         f"threshold={threshold}"]
    times = {arm: [] for arm in arms}
    reports = {}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(options.runs):
            for arm, extra in arms.items():
                reports[arm] = run(options.model, Path(scratch) / f"{arm.replace(' ', '_')}.npy",
                                   common + extra, options.device)
                times[arm].append(reports[arm]["seconds"])
        reference = np.load(Path(scratch) / "uncached.npy").astype(np.float64)
        base = statistics.median(times["uncached"])
        print(f"DiT twin, {options.steps} steps, cfg {options.cfg}, device={options.device}, "
              f"median of {options.runs} (alternating)")
        print(f"{'arm':<15} {'evaluations':>11} {'seconds':>8} {'speed-up':>8} {'PSNR vs uncached':>17}")
        for arm in arms:
            seconds = statistics.median(times[arm])
            quality = psnr(np.load(Path(scratch) / f"{arm.replace(' ', '_')}.npy"), reference)
            print(f"{arm:<15} {reports[arm]['evaluations']:>11} {seconds:>8.2f} "
                  f"{base / seconds:>7.2f}x {quality:>14.2f} dB")


if __name__ == "__main__":
    main()
