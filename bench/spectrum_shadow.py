"""Spectrum's forecast error on the DiT twin, step by step: runs the Spectrum sampler in the numpy
reference (tools/dit_twin.py) and, at every forecast step, also computes the true x0 at the same
x (a shadow evaluation), printing the relative error of the forecast and of reusing the last
computed x0 instead.

    .venv/bin/python bench/spectrum_shadow.py build/fixtures/dit-twin.safetensors [--steps 20]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import dit_twin  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cfg", type=float, default=4.0)
    parser.add_argument("--spectrum-option", default="")
    options = parser.parse_args()
    cfg, weights = dit_twin.load_model(options.model)
    model = dit_twin.DitModel(cfg, weights)
    cond = weights["prompt.context"].astype(np.float64)
    uncond = np.zeros_like(cond)
    sigmas = dit_twin.discrete_flow_sigmas(options.steps).astype(np.float64)
    forecaster = dit_twin.SpectrumForecaster(
        dit_twin.parse_spectrum_options(options.spectrum_option), options.steps)
    side = dit_twin.default_side(cfg)
    x = dit_twin.gaussian_noise(0, (cfg.latent_channels, side, side)).astype(np.float64)

    def guided_x0(x, sigma):
        v = model.velocity(x, sigma, cond)
        v_uncond = model.velocity(x, sigma, uncond)
        return (v_uncond + options.cfg * (v - v_uncond)) * (-sigma) + x

    last = None
    print("step  spectrum  reuse-last  (relative L2 error of x0)")
    for i in range(options.steps):
        if forecaster.should_forecast():
            true = guided_x0(x, sigmas[i])
            forecast = forecaster.forecast()
            norm = np.linalg.norm(true)
            print(f"{i + 1:>4}  {np.linalg.norm(forecast - true) / norm:8.3f}  "
                  f"{np.linalg.norm(last - true) / norm:10.3f}")
            x0 = forecast
        else:
            x0 = guided_x0(x, sigmas[i])
            forecaster.record(x0)
            last = x0
        x = dit_twin.euler_step(x, x0, sigmas[i], sigmas[i + 1])


if __name__ == "__main__":
    main()
