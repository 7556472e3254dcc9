"""MUL_MAT_ID (MoE experts) on NPUFLOW: llama.cpp's own test-backend-ops cases on the host and sim
devices. Every case NPUFLOW takes must match the CPU backend, each expert's rows run as one
product against that expert's resident matrix, and no expert may fall back to the host."""
from __future__ import annotations

import os
import re

import pytest

from ggml_tools import Counters, backend_ops_cases

# make test runs the 4- and 8-expert cases at m = 32 and 512 (about 470 on each device);
# `make test-ggml-moe-all` sets NPUFLOW_TEST_MOE_ALL=1 for all of them (the 128/256-expert cases
# take about nine minutes on two cores).
CASES = None if os.environ.get("NPUFLOW_TEST_MOE_ALL") == "1" else "n_mats=(4|8),.*m=(512|32),"


@pytest.mark.parametrize("device", ["host", "sim"])
def test_backend_ops_mul_mat_id_passes_and_runs_on_npuflow(device):
    # Thresholds at 1 so the suite's small shapes reach the device; a 256 MiB cache bounds the
    # resident experts of hundreds of cases (least recently used ones are dropped).
    cases, out = backend_ops_cases(
        "MUL_MAT_ID", {"NPUFLOW_DEVICE": device, "NPUFLOW_CLAIM": "all", "NPUFLOW_MIN_M": "1",
                       "NPUFLOW_MIN_M_QUANT": "1", "NPUFLOW_CACHE_MB": "256"}, CASES)
    ok = [p for p, status in cases if status == "OK"]
    failed = [p for p, status in cases if status == "FAIL"]
    assert not failed, f"{len(failed)} MUL_MAT_ID cases failed on {device}, e.g. {failed[:2]}"
    counters = Counters(out)
    print(f"test-backend-ops MUL_MAT_ID on {device}: {len(ok)} executed on NPUFLOW and passed, "
          f"{len(cases) - len(ok)} not supported; {counters}")
    assert counters.mul_mat_id == len(ok) > 0
    # The amax=100000 cases put activations beyond fp16's range: an fp16 device (sim) refuses
    # those experts' products and the host reference computes them (each counted); nothing else
    # may fall back, and on host nothing at all.
    beyond_fp16 = [p for p in ok if float(p["amax"]) > 65504]
    if device == "host":
        assert counters.fallback == 0, "an expert ran on the host reference"
    else:
        assert beyond_fp16
        assert 0 < counters.fallback <= sum(int(p["n_mats"]) for p in beyond_fp16)
    # Every resident weight type, every expert count per token, and a shared activation row
    # (b=1: one row of b serves every slot) ran on NPUFLOW.
    types = {p["type_a"] for p in ok}
    for expected in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_K", "q5_K", "q6_K"):
        assert expected in types, f"no {expected} case ran on NPUFLOW"
    assert {p["n_used"] for p in ok} >= {"1", "2", "4"}
    assert any(p["b"] == "1" for p in ok)
    # ... and nothing outside the contract: K % 32, N % 16, F32 activations.
    for p in ok:
        assert int(p["k"]) % 32 == 0 and int(p["m"]) % 16 == 0 and p["type_b"] == "f32", p
    assert re.search(r"(\d+)/\1 tests passed", out), "test-backend-ops did not pass every test"
