"""llama.cpp's own test-backend-ops against libggml-npuflow.so: every MUL_MAT case the NPUFLOW
device claims must match the CPU backend, and the run must actually have executed cases on it
(a run where everything is "not supported" proves nothing, so it fails)."""
from __future__ import annotations

import re

from ggml_tools import HOST_ALL, Counters, backend_ops_cases


def test_backend_ops_mul_mat_passes_and_runs_on_npuflow():
    # Thresholds at 1 so the suite's small shapes reach the device; the contract still applies.
    cases, out = backend_ops_cases(
        "MUL_MAT", {**HOST_ALL, "NPUFLOW_MIN_M": "1", "NPUFLOW_MIN_M_QUANT": "1"})
    ok = [c for c, status in cases if status == "OK"]
    failed = [c for c, status in cases if status == "FAIL"]
    assert not failed, f"{len(failed)} MUL_MAT cases failed on NPUFLOW, e.g. {failed[:3]}"
    assert ok, "no MUL_MAT case executed on NPUFLOW (all 'not supported')"
    counters = Counters(out)
    print(f"test-backend-ops MUL_MAT: {len(ok)} executed on NPUFLOW and passed, "
          f"{len(cases) - len(ok)} not supported; {counters}")
    # Each executed case computed its MUL_MAT on the device, never on the fallback.
    assert counters.mul_mat >= len(ok)
    assert counters.fallback == 0
    # Every weight type the backend makes resident was exercised.
    types = {c["type_a"] for c in ok}
    for expected in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_K", "q5_K", "q6_K"):
        assert expected in types, f"no {expected} case ran on NPUFLOW"
    assert re.search(r"(\d+)/\1 tests passed", out), "test-backend-ops did not pass every test"
