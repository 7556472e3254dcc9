"""What a mutant's npuflow outputs must satisfy against the CPU EP's.

- Nothing claimed: npuflow left every node to the CPU EP, so the outputs are the CPU EP's, bit
  for bit (NaN where it has NaN).
- Something claimed: the claim's gate. Integer outputs (a fused QDQ MatMul's quantized output)
  may differ by one LSB: the CPU EP computes DQ -> float MatMul -> Q in fp32, npuflow in exact
  integers, and the fp32 sum's rounding moves a value across a rounding boundary now and then
  (tests/integration/test_qdq_exact.py). Float outputs: the device's cosine and relative L2 bars
  of tests/integration/gates.py over the finite values, and NaN/Inf exactly where the CPU EP has
  them.

A claimed mutant outside the gate is judged again before it counts as a mismatch (fuzz_child.py,
each step counted in the summary): against the CPU EP with optimizations off, and at level
basic (ONNX Runtime hands every EP the graph after its basic rewrites, which change what a model
computes when Q/DQ parameters disagree, and beyond basic the CPU EP runs fused kernels of its
own, QLinearMatMul's saturating u8s8 path among them); at the
claims' exits (an unclaimed, ill-conditioned op downstream amplifies rounding); against a float64
evaluation of the claimed subgraph (rounding: a fused kernel that accumulates in double keeps
digits fp32 op-by-op loses), but only where the CPU EP's own fp32 evaluation of that subgraph
stays finite: float64 does not overflow where fp32 does, so past fp32's range (an infinite
LayerNorm variance, a product beyond 3.4e38) the claim must reproduce the CPU EP's values, its
Inf/NaN pattern included; on sim, against the CPU EP with fp16 GEMM operands (the device's
documented arithmetic), and then against the fp32 CPU EP within twice the error that arithmetic
itself makes where it misses the bars (fp16_error_bars). A claim that fails all of them is a mismatch, unless the CPU EP fails the
same gate against itself with every weight and input one ulp apart (ill-conditioned: counted).
tests/fuzz/test_fuzz_oracle.py shows a claim made wrong on purpose is a mismatch after all of
them.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from gates import BARS  # noqa: E402

# Outcome classes, in the order the summary prints them after the CPU EP's verdict.
REFUSED = "refused"
MATCHING = "claimed-and-matching"
MISMATCH = "mismatch"
SHAPE = "different-shape"
ERROR = "error"  # the CPU EP ran the mutant, the npuflow session failed or dropped the EP
# Outside every gate, but so is the CPU EP against itself when each constant and input moves by
# one fp32 ulp: the mutant's outputs depend on rounding (a stream of 1e30 normalized, a
# difference of huge values), so no gate can tell a wrong claim from a different summation
# order. Counted, not a failure.
ILL_CONDITIONED = "ill-conditioned"
# Outside the gates, and the float64 evaluation that could have settled it did not finish before
# the hang timeout (ONNX's reference evaluator on a large convolution). Counted, not a failure.
UNJUDGED = "unjudged"
# The npuflow session failed where the CPU EP ran the mutant, but the CPU EP with optimizations
# off fails it too: the model is invalid as written, and only a CPU EP fusion that npuflow's
# claim pre-empted had hidden it. Counted, not a failure.
INVALID = "invalid-as-written"
# Outside the gate (or, with nothing claimed, not bit-equal), but the CPU EP does not give its own
# outputs again in a fresh session: it read memory it never wrote (an invalid model it runs
# anyway), so there is nothing to judge against. Counted, not a failure; a claim the CPU EP can
# reproduce itself is judged as ever (test_fuzz_oracle.py).
UNREPRODUCIBLE = "unreproducible"
CRASH = "crash"
HANG = "hang"
FAILURES = (MISMATCH, SHAPE, ERROR, CRASH, HANG)


def _agreement(ref: np.ndarray, got: np.ndarray) -> tuple[str | None, float, float]:
    """(a difference no bar forgives, or None; cosine; relative L2) of got against ref over the
    finite values, which must be NaN/Inf exactly where ref is."""
    ref64, got64 = ref.astype(np.float64), got.astype(np.float64)
    for what, test in (("NaN", np.isnan), ("+Inf", np.isposinf), ("-Inf", np.isneginf)):
        differ = int((test(ref64) != test(got64)).sum())
        if differ:
            return f"{what} at {differ} positions that differ from the CPU EP", 0.0, np.inf
    finite = np.isfinite(ref64)
    r, g = ref64[finite], got64[finite]
    scale = max(float(np.abs(r).max(initial=0)), float(np.abs(g).max(initial=0)))
    if scale == 0:
        return None, 1.0, 0.0  # both all zero (or nothing finite, with the same NaN/Inf)
    r, g = r / scale, g / scale  # norms of values near the float range would overflow
    rn, gn = np.linalg.norm(r), np.linalg.norm(g)
    if rn == 0 or gn == 0:
        return (f"one side is all zero (norms {rn:.3g}, {gn:.3g} after scaling by {scale:.3g})",
                0.0, np.inf)
    return None, float(r @ g / (rn * gn)), float(np.linalg.norm(r - g) / rn)


def _float_gate(ref: np.ndarray, got: np.ndarray, bars: tuple[float, float]) -> str | None:
    """None when got is within bars (minimum cosine, maximum relative L2) of ref, else why not."""
    why, cos, rel = _agreement(ref, got)
    if why:
        return why
    min_cos, max_rel = bars
    if cos >= min_cos and rel <= max_rel:
        return None
    return f"cosine {cos:.9f} (bar {min_cos:.9g}), relL2 {rel:.2e} (bar {max_rel:.3g})"


def fp16_error_bars(ref: list, emulated: list, device: str) -> list[tuple[float, float]]:
    """Per output, the device's bars widened to twice the relative L2 (four times the 1 - cosine)
    by which the CPU EP with fp16 GEMM operands itself misses ref: a model whose outputs fp16
    arithmetic moves past the bars (a norm gamma beyond fp16's range putting all of an output's
    norm in five channels) is held to what that arithmetic does, not to a bar set for outputs
    whose error averages over every channel. A wrong claim still misses these by far
    (test_fuzz_oracle.py)."""
    min_cos, max_rel = BARS[device]
    bars = []
    for r, e in zip(ref, emulated):
        r, e = np.asarray(r), np.asarray(e)
        why, cos, rel = (_agreement(r, e) if r.dtype.kind == "f" and r.shape == e.shape
                         else ("not a float output", 1.0, 0.0))
        bars.append((min_cos, max_rel) if why else
                    (min(min_cos, 1 - 4 * (1 - cos)), max(max_rel, 2 * rel)))
    return bars


def classify(ref: list, got: list, claims: int, device: str,
             bars: list[tuple[float, float]] | None = None) -> tuple[str, str]:
    """(outcome class, detail) of npuflow's outputs got against the CPU EP's ref; float outputs
    within the device's bars, or within bars given per output."""
    if len(ref) != len(got):
        return SHAPE, f"{len(got)} outputs, the CPU EP gives {len(ref)}"
    for k, (r, g) in enumerate(zip(ref, got)):
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape:
            return SHAPE, f"output {k}: shape {g.shape}, the CPU EP gives {r.shape}"
        if r.dtype != g.dtype:
            return MISMATCH, f"output {k}: dtype {g.dtype}, the CPU EP gives {r.dtype}"
    for k, (r, g) in enumerate(zip(ref, got)):
        r, g = np.asarray(r), np.asarray(g)
        if claims == 0 or r.dtype.kind not in "fiu" or r.size == 0:
            if not np.array_equal(r, g, equal_nan=r.dtype.kind == "f"):
                bad = int((r != g).sum()) if r.dtype.kind != "f" else int(
                    (~((r == g) | (np.isnan(r) & np.isnan(g)))).sum())
                return MISMATCH, (f"output {k}: {bad} of {r.size} values differ from the CPU EP "
                                  f"with nothing claimed" if claims == 0 else
                                  f"output {k}: {bad} of {r.size} values differ")
        elif r.dtype.kind in "iu":
            diff = np.abs(r.astype(np.int64) - g.astype(np.int64))
            if diff.max(initial=0) > 1:
                return MISMATCH, (f"output {k}: worst {int(diff.max())} LSB, "
                                  f"{int((diff > 1).sum())} of {r.size} values beyond 1 LSB")
        else:
            why = _float_gate(r, g, bars[k] if bars else BARS[device])
            if why:
                return MISMATCH, f"output {k}: {why}"
    return (MATCHING if claims else REFUSED), ""
