"""Every minimized mutant the fuzzer saved under tests/fuzz/regressions (a model and a JSON
sidecar with its feeds, level, device, host kernels and what it did when found): the CPU EP
still runs it, and with npuflow on host and sim, with either host kernel set (AVX2 where this
CPU has it, and the portable loops an arm64 build runs), it is refused or claimed within the
gate, never a crash, hang, session error, mismatch or different shape."""
from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from fuzz import HOST_KERNELS, with_base
from fuzz_oracle import MATCHING, REFUSED, UNREPRODUCIBLE
from fuzz_runner import run_jobs
from fuzz_seeds import fixture_path

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
CASES = sorted(p.stem for p in REGRESSIONS.glob("*.json"))


def test_every_saved_model_has_its_sidecar():
    models = sorted(p.stem for p in REGRESSIONS.glob("*.onnx"))
    assert models == CASES
    assert CASES, "no saved regression: the fuzzer has found nothing to keep"


@pytest.mark.parametrize("kernels", HOST_KERNELS)
@pytest.mark.parametrize("case", CASES)
def test_saved_regression_is_refused_or_matches(case, kernels, tmp_path):
    meta = json.loads((REGRESSIONS / f"{case}.json").read_text())
    model = REGRESSIONS / f"{case}.onnx"
    if "base" in meta:  # stored without the initializers it shares with a committed fixture
        model = tmp_path / "model.onnx"
        onnx.save(with_base(onnx.load(str(REGRESSIONS / f"{case}.onnx")),
                            onnx.load(str(fixture_path(meta["base"])))), str(model))
    job = {"id": 0, "model": str(model), "level": meta["level"],
           "feeds": meta["feeds"], "feed_seed": meta["feed_seed"], "feed_kind": meta["feed_kind"],
           "run_on": ["host", "sim"], "host_kernels": kernels,
           "extra_options": meta.get("extra_options", {}),
           "report_dir": str(tmp_path / "reports")}
    (tmp_path / "reports").mkdir()
    [result] = run_jobs([job], tmp_path / "run", hang_s=300)
    assert "cpu_error" not in result, f"the CPU EP no longer runs it: {result['cpu_error']}"
    for device, outcome in result["devices"].items():
        # With nothing claimed npuflow computes nothing: outputs that differ are the CPU EP not
        # reproducing itself (memory it never wrote, on an invalid model it runs anyway).
        refused_unreproducible = outcome["class"] == UNREPRODUCIBLE and outcome["claims"] == 0
        assert outcome["class"] in (REFUSED, MATCHING) or refused_unreproducible, (
            f"{device}, host kernels {kernels}: {outcome['class']}: {outcome['detail']} "
            f"(found as {meta['found'][:300]})")
