"""The DiT pipeline (`npuflow diffuse`, src/diffusion/) against the independent float64 numpy
reference of the same twin (tools/dit_twin.py, docs/diffusion.md): per-block cosine of the first
model evaluation, the final latent's PSNR, Spectrum's schedule and quality, on host and on the
RK3588 simulator; and clear errors for bad input."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import CLI

TWIN = Path(__file__).resolve().parents[2] / "tools" / "dit_twin.py"
SPECTRUM_20 = [1, 2, 3, 4, 6, 8, 11, 14, 18, 19, 20]


def twin_tool(*args) -> str:
    result = subprocess.run([sys.executable, str(TWIN), *map(str, args)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


def diffuse(*args, expect_rc=0):
    result = subprocess.run([str(CLI), "diffuse", *map(str, args), "--quiet"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == expect_rc, result.stderr
    return result


def diffuse_json(*args) -> dict:
    return json.loads(diffuse(*args, "--json").stdout.strip().splitlines()[-1])


def cosine(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def psnr(x, reference) -> float:
    reference = np.asarray(reference, np.float64)
    mse = np.mean((np.asarray(x, np.float64) - reference) ** 2)
    return float(10 * np.log10(np.max(np.abs(reference)) ** 2 / mse))


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dit") / "twin.safetensors"
    twin_tool("write", path)
    return path


@pytest.fixture(scope="module")
def reference_run(twin, tmp_path_factory):
    """The numpy reference at 20 steps, cfg 4, seed 0, traced."""
    out = tmp_path_factory.mktemp("dit_ref")
    report = json.loads(twin_tool("reference", twin, "--out", out / "latent.npy", "--steps", 20,
                                  "--cfg", 4, "--seed", 0, "--trace", out / "trace"))
    return out, report


def compare_trace(ours: Path, theirs: Path, blocks: int, bar: float):
    """Per block, the cosine of its output and of its update (output minus input): the gated
    updates are small beside the stream, so a wrong sub-layer (a RoPE base, say) barely moves the
    outputs' cosine but does move the updates'."""
    np.testing.assert_array_equal(np.load(ours / "noise.npy"), np.load(theirs / "noise.npy"))
    load = lambda where, b: np.load(where / f"block_{b}.npy").astype(np.float64)  # noqa: E731
    worst = cosine(np.load(ours / "final_tokens.npy"), np.load(theirs / "final_tokens.npy"))
    for b in range(blocks):
        worst = min(worst, cosine(load(ours, b), load(theirs, b)))
        if b > 0:
            worst = min(worst, cosine(load(ours, b) - load(ours, b - 1),
                                      load(theirs, b) - load(theirs, b - 1)))
    print(f"worst per-block cosine {worst:.9f}")
    assert worst >= bar
    return worst


def test_host_matches_the_numpy_reference_block_by_block_and_in_the_final_latent(
        twin, reference_run, tmp_path):
    ref_dir, ref_report = reference_run
    report = diffuse_json(twin, "--steps", 20, "--cfg", 4, "--seed", 0, "--out",
                          tmp_path / "latent.npy", "--trace", tmp_path / "trace",
                          "--knob", "device=host")
    assert report["device"] == "host"
    assert report["computed_steps"] == list(range(1, 21)) and report["forecast_steps"] == []
    assert report["evaluations"] == ref_report["evaluations"] == 40
    assert report["linear_fallbacks"] == 0
    compare_trace(tmp_path / "trace", ref_dir / "trace", 4, 0.99999)
    latent = np.load(tmp_path / "latent.npy")
    assert latent.shape == (16, 64, 64)
    quality = psnr(latent, np.load(ref_dir / "latent.npy"))
    print(f"final latent PSNR {quality:.2f} dB")
    # The issue asks 60 dB; fp32 against float64 gives 147, and a wrong RoPE base 72.
    assert quality >= 100.0


def test_simulator_runs_projections_and_attention_on_the_device_within_the_gate(
        twin, tmp_path):
    # Two steps keep the simulator's run short; the first evaluation is the one traced.
    ref = tmp_path / "ref"
    twin_tool("reference", twin, "--out", ref / "latent.npy", "--steps", 2, "--cfg", 4,
              "--trace", ref / "trace")
    report = diffuse_json(twin, "--steps", 2, "--cfg", 4, "--trace", tmp_path / "trace",
                          "--out", tmp_path / "latent.npy", "--knob", "device=sim")
    assert report["device"] == "sim"
    assert report["linear_fallbacks"] == 0 and report["attention_fallbacks"] == 0
    # A self- and a cross-attention per block per evaluation: 2 x 4 blocks x 2 CFG passes x 2 steps.
    assert report["attention_on_device"] == 32
    compare_trace(tmp_path / "trace", ref / "trace", 4, 0.9999)
    assert psnr(np.load(tmp_path / "latent.npy"), np.load(ref / "latent.npy")) >= 40.0


def test_spectrum_forecasts_the_published_schedule_and_matches_the_reference(
        twin, reference_run, tmp_path):
    ref_dir, _ = reference_run
    ref_spectrum = tmp_path / "ref_spectrum.npy"
    ref_report = json.loads(twin_tool("reference", twin, "--out", ref_spectrum, "--steps", 20,
                                      "--cfg", 4, "--spectrum"))
    report = diffuse_json(twin, "--steps", 20, "--cfg", 4, "--spectrum", "--out",
                          tmp_path / "latent.npy", "--knob", "device=host")
    assert report["computed_steps"] == ref_report["computed_steps"] == SPECTRUM_20
    assert report["forecast_steps"] == [5, 7, 9, 10, 12, 13, 15, 16, 17]
    assert report["evaluations"] == 22
    latent = np.load(tmp_path / "latent.npy")
    assert psnr(latent, np.load(ref_spectrum)) >= 60.0
    # Against the uncached run: what forecasting 9 of 20 steps costs (36.4 dB measured). A wrong
    # forecast (Taylor weights, lost history) lands far below.
    against_uncached = psnr(latent, np.load(ref_dir / "latent.npy"))
    print(f"Spectrum vs uncached: {against_uncached:.2f} dB at 22 of 40 evaluations")
    assert against_uncached >= 30.0

    # Adaptive Spectrum at its default threshold: no more evaluations than the fixed schedule and
    # a latent at least as close to the uncached one (36.83 against 36.41 dB, both at 22).
    adaptive = diffuse_json(twin, "--steps", 20, "--cfg", 4, "--spectrum", "adaptive", "--out",
                            tmp_path / "adaptive.npy", "--knob", "device=host")
    assert adaptive["spectrum"] == "adaptive"
    assert adaptive["evaluations"] <= report["evaluations"]
    assert adaptive["computed_steps"] != report["computed_steps"]
    adaptive_psnr = psnr(np.load(tmp_path / "adaptive.npy"), np.load(ref_dir / "latent.npy"))
    print(f"adaptive: {adaptive_psnr:.2f} dB at {adaptive['evaluations']} evaluations")
    assert adaptive_psnr >= against_uncached


@pytest.mark.full_suite_only(reason="the 20-step adaptive gate runs in the sliced suite")
def test_adaptive_spectrum_at_50_steps_beats_the_fixed_schedule_at_equal_cost(twin, tmp_path):
    runs = {}
    for name, extra in {"uncached": [], "fixed": ["--spectrum"],
                        "adaptive": ["--spectrum", "adaptive", "--spectrum-option",
                                     "threshold=0.19"]}.items():
        runs[name] = diffuse_json(twin, "--steps", 50, "--cfg", 4, *extra, "--out",
                                  tmp_path / f"{name}.npy", "--knob", "device=host")
    uncached = np.load(tmp_path / "uncached.npy")
    fixed = psnr(np.load(tmp_path / "fixed.npy"), uncached)
    adaptive = psnr(np.load(tmp_path / "adaptive.npy"), uncached)
    print(f"50 steps: fixed {fixed:.2f} dB at {runs['fixed']['evaluations']}, adaptive "
          f"{adaptive:.2f} dB at {runs['adaptive']['evaluations']}")
    assert runs["adaptive"]["evaluations"] <= runs["fixed"]["evaluations"] == 38
    assert adaptive >= fixed


@pytest.mark.parametrize("blocks,seed,height,width,cfg,steps",
                         [(2, 3, 32, 48, 1.0, 6), (6, 11, 48, 32, 2.5, 6), (28, 5, 32, 32, 4.0, 2)])
def test_other_twins_and_latent_shapes_match_the_reference(tmp_path, blocks, seed, height, width,
                                                           cfg, steps):
    model = tmp_path / "twin.safetensors"
    twin_tool("write", model, "--blocks", blocks, "--seed", seed)
    ref = tmp_path / "ref"
    ref_report = json.loads(twin_tool("reference", model, "--out", ref / "latent.npy", "--steps",
                                      steps, "--cfg", cfg, "--seed", seed + 1, "--height", height,
                                      "--width", width, "--trace", ref / "trace"))
    report = diffuse_json(model, "--steps", steps, "--cfg", cfg, "--seed", seed + 1, "--height", height,
                          "--width", width, "--trace", tmp_path / "trace", "--out",
                          tmp_path / "latent.npy", "--knob", "device=host")
    assert report["evaluations"] == ref_report["evaluations"] == (steps if cfg == 1.0 else 2 * steps)
    compare_trace(tmp_path / "trace", ref / "trace", blocks, 0.99999)
    assert psnr(np.load(tmp_path / "latent.npy"), np.load(ref / "latent.npy")) >= 100.0


def lru_hits(order, capacity, preloaded):
    """Hits of an LRU cache of `capacity` blocks over an access order, starting from `preloaded`."""
    cache, hits = list(preloaded)[:capacity], 0
    for block in order:
        if block in cache:
            hits += 1
            cache.remove(block)
        elif len(cache) == capacity:
            cache.pop(0)
        cache.append(block)
    return hits


def test_memory_budget_pins_a_prefix_and_streams_the_rest_without_changing_the_result(
        twin, tmp_path, monkeypatch):
    runs = {}
    for budget in (0, 3, 1):
        monkeypatch.setenv("NPUFLOW_MEM_BUDGET_MB", str(budget))
        runs[budget] = diffuse_json(twin, "--steps", 3, "--cfg", 4, "--out",
                                    tmp_path / f"latent{budget}.npy", "--knob", "device=host")
    whole, some, none = runs[0], runs[3], runs[1]
    assert whole["pinned_blocks"] == 4 and whole["block_packs"] == 0
    # 3 MiB hold the shared layers, two pinned blocks and the slot a streamed block runs in
    # (0.94 MiB a block on host); 1 MiB holds less than the least a run needs.
    assert some["pinned_blocks"] == 2 and none["pinned_blocks"] == 0
    assert some["peak_bytes"] <= 3 << 20 < whole["resident_bytes"]
    evaluations = whole["evaluations"]
    assert some["block_packs"] == 2 * evaluations and none["block_packs"] == 4 * evaluations
    assert none["resident_bytes"] < some["resident_bytes"] < whole["resident_bytes"]
    # Packing is deterministic: streaming changes where the weights live, not the arithmetic.
    for budget in (3, 1):
        np.testing.assert_array_equal(np.load(tmp_path / f"latent{budget}.npy"),
                                      np.load(tmp_path / "latent0.npy"))

    # Against LRU with the same room (every block slot the budget holds, filled at load as the
    # pinned blocks are), over the same cyclic order: LRU evicts each block just before its turn.
    blocks = some["blocks"]
    slots = ((3 << 20) - some["shared_bytes"]) // some["block_bytes"]
    order = [b for _ in range(evaluations) for b in range(blocks)]
    ours = len(order) - some["block_packs"]
    lru = lru_hits(order, slots, range(slots))
    print(f"{slots} block slots, {len(order)} block runs: pinned prefix {ours} hits, LRU {lru}")
    assert slots == 3 and lru == 3  # the first pass over what was loaded, then none
    assert ours == 2 * evaluations > lru


def test_the_memory_floor_stops_cleanly(twin, tmp_path, monkeypatch):
    monkeypatch.setenv("NPUFLOW_MEM_FLOOR_MB", str(16 << 20))  # 16 TiB: above any machine's
    result = diffuse(twin, "--steps", 1, "--out", tmp_path / "latent.npy", expect_rc=1)
    assert "stopping: available memory" in result.stderr
    assert not (tmp_path / "latent.npy").exists()


def plan_json(*args) -> dict:
    result = subprocess.run([str(CLI), "plan", "--dit", *map(str, args), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_plan_prices_anima_beside_the_measured_board_run(twin):
    plain = plan_json("anima")
    assert (plain["blocks"], plain["hidden"], plain["tokens"]) == (28, 2048, 1024)
    assert plain["forwards"] == 40 and plain["seed_002_denoise_seconds"] == 2408.54
    assert plain["denoise_seconds"] == pytest.approx(plain["seconds_per_forward"] * 40, rel=1e-3)
    assert sum(plain["phases"].values()) == pytest.approx(plain["seconds_per_forward"], rel=1e-3)
    with_spectrum = plan_json("anima", "--spectrum")
    assert with_spectrum["forwards"] == 22
    twin_plan = plan_json(twin)
    assert (twin_plan["blocks"], twin_plan["hidden"]) == (4, 128)
    assert twin_plan["denoise_seconds"] < plain["denoise_seconds"]
    missing = subprocess.run([str(CLI), "plan", "--dit", str(twin) + ".missing"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "cannot open" in missing.stderr


def test_bad_input_is_a_clear_error(twin, tmp_path):
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(twin.read_bytes()[:1000])
    assert "not a safetensors file" in diffuse(truncated, expect_rc=1).stderr
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    assert "not a safetensors file" in diffuse(garbage, expect_rc=1).stderr
    assert "no such model" in diffuse(tmp_path / "missing.safetensors", expect_rc=1).stderr
    # A latent that is not a multiple of the patch, options sd.cpp would not take, adaptive.
    assert "multiple of the patch" in diffuse(twin, "--steps", 1, "--height", 63,
                                              expect_rc=1).stderr
    assert "unknown spectrum option" in diffuse(twin, "--spectrum", "--spectrum-option", "q=1",
                                                expect_rc=1).stderr
    assert "bad value" in diffuse(twin, "--steps", 0, expect_rc=2).stderr
    assert "threshold" in diffuse(twin, "--spectrum", "adaptive", "--spectrum-option",
                                  "threshold=-1", expect_rc=1).stderr
