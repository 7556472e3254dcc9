"""MUL_MAT_ID (MoE experts) on NPUFLOW: llama.cpp's own test-backend-ops cases on the host and sim
devices (every case NPUFLOW takes must match the CPU backend, each expert's rows run as one
product against that expert's resident matrix, and no expert may fall back to the host), and
two MoE architectures whole: perplexity and greedy text against the CPU backend."""
from __future__ import annotations

import os
import re

import pytest

from conftest import SLICE
from ggml_tools import (HOST_ALL, MOE_ARCHS, MOE_LAYERS, PROSE, Counters, backend_ops_cases,
                        footprint, moe_fixture, perplexity, run, tool)

# make test runs the 4- and 8-expert cases at m = 32 and 512 (about 470 on each device), the
# sliced sanitizer run (NPUFLOW_TEST_SLICE, conftest.py) the 4-expert ones; `make
# test-ggml-moe-all` sets NPUFLOW_TEST_MOE_ALL=1 for all of them (the 128/256-expert cases take
# about nine minutes on two cores).
if os.environ.get("NPUFLOW_TEST_MOE_ALL") == "1":
    CASES = None
elif SLICE > 1:
    CASES = "n_mats=4,.*m=(512|32),"
else:
    CASES = "n_mats=(4|8),.*m=(512|32),"


# Experts of these types stay int8 on the native quant path (the default): no fp16 range limit.
NATIVE_TYPES = {"q8_0", "q4_0", "q4_1", "q4_K", "q5_K", "mxfp4"}


@pytest.mark.parametrize("device,quant_path",
                         [("host", "native"), ("sim", "native"), ("sim", "dequant")])
def test_backend_ops_mul_mat_id_passes_and_runs_on_npuflow(device, quant_path):
    # Thresholds at 1 so the suite's small shapes reach the device; a 256 MiB cache bounds the
    # resident experts of hundreds of cases (least recently used ones are dropped).
    cases, out = backend_ops_cases(
        "MUL_MAT_ID", {"NPUFLOW_DEVICE": device, "NPUFLOW_CLAIM": "all", "NPUFLOW_MIN_M": "1",
                       "NPUFLOW_MIN_M_QUANT": "1", "NPUFLOW_CACHE_MB": "256",
                       "NPUFLOW_QUANT_PATH": quant_path}, CASES)
    ok = [p for p, status in cases if status == "OK"]
    failed = [p for p, status in cases if status == "FAIL"]
    assert not failed, f"{len(failed)} MUL_MAT_ID cases failed on {device}, e.g. {failed[:2]}"
    counters = Counters(out)
    print(f"test-backend-ops MUL_MAT_ID on {device}: {len(ok)} executed on NPUFLOW and passed, "
          f"{len(cases) - len(ok)} not supported; {counters}")
    assert counters.mul_mat_id == len(ok) > 0
    # The amax=100000 cases put activations beyond fp16's range: an fp16 device (sim) refuses
    # those experts' products and the host reference computes them (each counted); nothing else
    # may fall back, and on host nothing at all. Experts that stay int8 (native Q8_0 / Q4_0) take
    # any finite activation.
    beyond_fp16 = [p for p in ok if float(p["amax"]) > 65504]
    on_fp16 = [p for p in beyond_fp16
               if quant_path == "dequant" or p["type_a"] not in NATIVE_TYPES]
    if device == "host":
        assert counters.fallback == 0, "an expert ran on the host reference"
    else:
        assert counters.fallback <= sum(int(p["n_mats"]) for p in on_fp16)
        if on_fp16:
            assert counters.fallback > 0
        if SLICE <= 1:  # the sliced run's cases (n_mats=4) hold no amax=100000 case
            assert beyond_fp16
            if quant_path == "dequant":
                assert on_fp16, "the control arm must meet the fp16 range limit"
    # Every resident weight type, every expert count per token, and a shared activation row
    # (b=1: one row of b serves every slot) ran on NPUFLOW.
    types = {p["type_a"] for p in ok}
    for expected in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_K", "q5_K", "q6_K", "mxfp4"):
        assert expected in types, f"no {expected} case ran on NPUFLOW"
    assert {p["n_used"] for p in ok} >= {"1", "2", "4"}
    assert any(p["b"] == "1" for p in ok)
    # ... and nothing outside the contract: K % 32, N % 16, F32 activations.
    for p in ok:
        assert int(p["k"]) % 32 == 0 and int(p["m"]) % 16 == 0 and p["type_b"] == "f32", p
    assert re.search(r"(\d+)/\1 tests passed", out), "test-backend-ops did not pass every test"


# Whole MoE models through llama.cpp: perplexity and greedy text, CPU backend against NPUFLOW on
# host (claim=all) on the F32 fixtures, where both compute in fp32.
CTX, CHUNKS = 512, 2


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_moe_perplexity_matches_cpu_with_every_expert_product_on_npuflow(arch):
    model = moe_fixture(arch)
    ppl_cpu, _ = perplexity(model, PROSE, CTX, CHUNKS, backend=False)
    ppl_npu, out = perplexity(model, PROSE, CTX, CHUNKS, backend=True, env=HOST_ALL)
    counters = Counters(out)
    print(f"{arch}: PPL CPU {ppl_cpu:.4f}  NPUFLOW {ppl_npu:.4f}  ratio {ppl_npu / ppl_cpu:.7f}; "
          f"{counters}")
    # fp32 on both sides: only the summation order differs (the random model's perplexity is
    # high, so a wrong expert product would move it by far more).
    assert abs(ppl_npu / ppl_cpu - 1) <= 1e-4
    # Each 512-token chunk runs the gate, up and down experts of every layer on NPUFLOW.
    assert counters.mul_mat_id == CHUNKS * MOE_LAYERS * 3
    assert counters.fallback == 0


def test_mxfp4_experts_stay_quantized_and_give_the_cpus_perplexity():
    """The Qwen3-MoE fixture through llama-quantize's MXFP4_MOE recipe (experts MXFP4, the rest
    Q8_0), as gpt-oss ships. On the native path each expert's MXFP4 blocks run as int8 values (twice
    the FP4 ones) with half the E8M0 scale against Q8_0 activations: the CPU's own product
    (npuflow_ggml_vs_cpu), so perplexity stays with the CPU's, and the host keeps the experts in
    18 bytes per 17-byte block (4-bit codes + an fp16 scale) where dequantizing takes 128."""
    model = moe_fixture("qwen3moe", "MXFP4_MOE")
    no_repack = ("--no-repack",)
    cpu, _ = perplexity(model, PROSE, CTX, CHUNKS, backend=False, extra=no_repack)
    native, out = perplexity(model, PROSE, CTX, CHUNKS, backend=True, env=HOST_ALL,
                             extra=no_repack)
    dequant, out_dequant = perplexity(model, PROSE, CTX, CHUNKS, backend=True, extra=no_repack,
                                      env={**HOST_ALL, "NPUFLOW_QUANT_PATH": "dequant"})
    counters = Counters(out)
    mine, control = footprint(out)["mxfp4"], footprint(out_dequant)["mxfp4"]
    print(f"qwen3moe MXFP4_MOE: PPL CPU {cpu:.4f}, NPUFLOW native {native:.4f} "
          f"({native / cpu - 1:+.4%}), dequant {dequant:.4f} ({dequant / cpu - 1:+.4%}); mxfp4 "
          f"resident/GGUF native {mine['ratio']:.3f}x, dequant {control['ratio']:.3f}x; {counters}")
    assert counters.mul_mat_id == CHUNKS * MOE_LAYERS * 3 and counters.fallback == 0
    assert mine["path"] == "native" and mine["ratio"] <= 1.1
    assert control["path"] == "dequant" and control["ratio"] > 7
    assert abs(native / cpu - 1) <= 0.005
    # The dequant arm skips the CPU's 8-bit activation rounding, a different computation: on this
    # random-weight model it lands 0.8% off.
    assert abs(dequant / cpu - 1) <= 0.02


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_moe_greedy_text_is_identical(arch, tmp_path):
    model = moe_fixture(arch)
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROSE.read_text()[:1200])  # one prefill ubatch of ~250 tokens

    def generate(backend: bool):
        result = run([tool("llama-completion"), "-m", model, "-f", prompt, "-n", 32, "--temp", 0,
                      "-s", 1, "-no-cnv", "--ignore-eos", "--no-display-prompt", "-t", 2, "-c",
                      1024, "-b", 512, "-ub", 512], backend=backend,
                     env=HOST_ALL if backend else None)
        return result.stdout, result.stderr

    text_cpu, _ = generate(backend=False)
    text_npu, err = generate(backend=True)
    assert text_cpu.strip(), "the CPU backend generated nothing"
    assert text_npu == text_cpu
    # The prompt's experts ran on NPUFLOW (gate, up, down per layer, ~500 rows each), except the
    # last block's, which llama.cpp computes for the one output row only (2 rows: the CPU's), as
    # it does every decode step's.
    assert Counters(err).mul_mat_id == (MOE_LAYERS - 1) * 3


# The resident expert cache under a budget below the working set (4 MiB for the fixture's 6 MiB
# of experts plus its dense weights), both policies against no budget, and the routing profile
# that NPUFLOW_PROF=1 prints (route/moe_routing_profile.h).
PROFILE = re.compile(r"npuflow: moe (blk\.\d+\.ffn_\w+_exps\.weight): calls=(\d+) rows=(\d+) "
                     r"cache_hits=(\d+)/(\d+) \(\d+%\) packed=(\d+) not_kept=(\d+) .*"
                     r"experts=(\d+) gini=([\d.]+) .* hist=\{([\d,]+)\}")
TOTAL = re.compile(r"npuflow: moe total: calls=(\d+) rows=(\d+) cache_hits=(\d+)/(\d+)")
POLICY_CTX, POLICY_CHUNKS = 128, 8


def profiled_run(budget_mb: int, policy: str):
    env = dict(HOST_ALL, NPUFLOW_PROF="1", NPUFLOW_CACHE_MB=str(budget_mb),
               NPUFLOW_CACHE_POLICY=policy)
    ppl, out = perplexity(moe_fixture("qwen3moe"), PROSE, POLICY_CTX, POLICY_CHUNKS, backend=True,
                          env=env)
    tensors = {m[0]: m for m in PROFILE.findall(out)}
    total = TOTAL.findall(out)
    assert total, out[-3000:]
    hits, served = int(total[-1][2]), int(total[-1][3])
    return ppl, tensors, hits, served, Counters(out)


def test_moe_expert_cache_lfu_keeps_hot_experts_where_lru_thrashes_and_profiles_routing():
    ppl_all, tensors, hits_all, served, counters = profiled_run(0, "lfu")
    ppl_lru, _, hits_lru, served_lru, _ = profiled_run(4, "lru")
    ppl_lfu, _, hits_lfu, served_lfu, _ = profiled_run(4, "lfu")
    print(f"expert cache hits of {served}: no budget {hits_all}, 4 MiB lru {hits_lru}, "
          f"4 MiB lfu {hits_lfu}")
    # Eviction changes where a weight lives, never what is computed (host: fp32 either way).
    assert ppl_lru == ppl_all and ppl_lfu == ppl_all
    assert served_lru == served_lfu == served
    # Without a budget every expert is packed once. Under 4 MiB, LRU drops each expert just
    # before the next chunk asks for it again; frequency keeps the hot ones.
    assert served - hits_all == MOE_LAYERS * 3 * 8
    assert hits_lru == 0
    assert hits_lfu >= 0.4 * served
    # The profile: a line per expert tensor, every routed row counted (tokens x 2 used per call;
    # the last block routes only the rows perplexity scores), the histogram over the 8 experts.
    assert len(tensors) == MOE_LAYERS * 3
    for name, (_, calls, rows, _, _, _, _, experts, gini, hist) in tensors.items():
        counts = [int(c) for c in hist.split(",")]
        assert int(experts) == len(counts) == 8 and sum(counts) == int(rows)
        assert int(calls) == POLICY_CHUNKS == counters.mul_mat_id // (MOE_LAYERS * 3)
        last = name.startswith(f"blk.{MOE_LAYERS - 1}.")
        assert int(rows) == POLICY_CHUNKS * POLICY_CTX * 2 // (2 if last else 1), name
        assert 0 <= float(gini) < 1
