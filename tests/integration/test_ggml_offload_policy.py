"""Do no harm in llama.cpp (issue #18), end to end with stock llama-completion on the real
SmolLM2-135M Q4_1 GGUF and a 252-token prompt:

- device=auto (the default) on this machine, which has no NPU: NPUFLOW registers, takes no op,
  packs nothing, says so once at info, and the text is the CPU backend's own.
- device=host with the default claim policy (faster there): each MUL_MAT shape is measured against
  the CPU backend once, recorded in the cost table, and taken exactly where that measurement says
  NPUFLOW is not slower; later processes read the table instead of measuring and follow it when it
  says otherwise (every shape slower, then every shape not slower).
"""
from __future__ import annotations

import json

import pytest

from ggml_tools import PROSE, SMOLLM2, SMOLLM2_LAYERS, Counters, Decisions, run, tool

IDLE_LINE = ("npuflow [info] no NPU found: NPUFLOW stays idle (set NPUFLOW_DEVICE=host or sim to "
             "run it anyway)")
# The prompt's ubatch: every projection but the last block's FFN (llama.cpp computes that, and the
# lm_head, for the one output row only).
PROMPT_PROJECTIONS = SMOLLM2_LAYERS * 7 - 3


@pytest.fixture(scope="module")
def prompt(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompt") / "prompt.txt"
    path.write_text(PROSE.read_text()[:1200])  # 252 tokens: one prefill ubatch
    return path


def complete(prompt, backend: bool, env: dict | None = None):
    assert SMOLLM2.exists(), f"{SMOLLM2} is missing: run `make setup`"
    result = run([tool("llama-completion"), "-m", SMOLLM2, "-f", prompt, "-n", 8, "--temp", 0,
                  "-s", 1, "-no-cnv", "--ignore-eos", "--no-display-prompt", "-t", 2, "-c", 1024,
                  "-b", 512, "-ub", 512], backend=backend, env=env)
    return result.stdout, result.stderr


def test_auto_without_an_npu_registers_and_takes_nothing(prompt):
    text_cpu, _ = complete(prompt, backend=False)
    text, err = complete(prompt, backend=True, env={"NPUFLOW_DEVICE": "auto", "NPUFLOW_LOG": "info"})
    counters = Counters(err)
    print(f"{counters}\n{text!r}")
    assert [line for line in err.splitlines() if line == IDLE_LINE] == [IDLE_LINE], err[-3000:]
    assert counters.device == "idle"
    assert counters.mul_mat == 0 and counters.packed == 0
    assert "NPUFLOW idle: no NPU found" in err
    assert text == text_cpu  # every op ran on the CPU backend


def table_rows(path):
    table = json.loads(path.read_text())
    return table, {(r["weight"], r["k"], r["n"], r["rows"], r["threads"]): r for r in table["rows"]}


def offloaded(decisions, rows_bucket):
    """MUL_MATs of the prompt ubatch the taken shapes cover: 30 blocks each, the last block's FFN
    excepted."""
    n = 0
    for d in decisions.taken():
        if d["rows"] != rows_bucket:
            continue
        for name in d["weights"]:
            assert name.startswith("blk.*."), name
            n += SMOLLM2_LAYERS - (1 if ".ffn_" in name else 0)
    return n


def test_host_takes_only_what_it_measured_not_slower_and_measures_once(prompt, tmp_path):
    costs = tmp_path / "ggml-costs.json"
    env = {"NPUFLOW_DEVICE": "host", "NPUFLOW_GGML_COSTS": str(costs), "NPUFLOW_LOG": "info"}

    # 1. No table: every shape offered is measured, recorded, and decided by its measurement.
    _, err = complete(prompt, backend=True, env=env)
    counters, decisions = Counters(err), Decisions(err)
    print(f"{counters}\n" + "\n".join(l for l in err.splitlines() if "claim=faster" in l))
    table, rows = table_rows(costs)
    assert decisions.rows, "no MUL_MAT was decided"
    assert "measuring" in err and "(measured now)" in err
    for d in decisions.rows:
        assert d["verdict"] != "declined unmeasured", d
        row = rows[(d["weight"], d["k"], d["n"], d["rows"], d["threads"])]
        assert (d["verdict"] == "took") == (row["npuflow_ms"] <= row["cpu_ms"]), (d, row)
        assert row["npuflow_ms"] > 0 and row["cpu_ms"] > 0 and row["rounds"] >= 3
    assert len(rows) == len(decisions.rows)
    assert set(counters.m_hist) <= {252}
    assert counters.mul_mat == offloaded(decisions, 256), (counters, decisions.rows)
    assert counters.fallback == 0

    # 2. Another process with the table rewritten to say every shape is slower on NPUFLOW: it
    #    reads the table instead of measuring, takes nothing and packs nothing.
    for r in table["rows"]:
        r["npuflow_ms"] = r["cpu_ms"] * 2
    costs.write_text(json.dumps(table))
    _, err2 = complete(prompt, backend=True, env=env)
    c2, d2 = Counters(err2), Decisions(err2)
    assert "(measured now)" not in err2 and "measuring" not in err2
    assert [(d["weight"], d["k"], d["n"], d["rows"]) for d in d2.rows] == \
        [(d["weight"], d["k"], d["n"], d["rows"]) for d in decisions.rows]
    assert not d2.taken() and len(d2.declined()) == len(decisions.rows)
    assert c2.mul_mat == 0 and c2.packed == 0

    # 3. ... and to say every shape is not slower: every prompt projection runs on NPUFLOW.
    for r in table["rows"]:
        r["npuflow_ms"] = r["cpu_ms"]
    costs.write_text(json.dumps(table))
    _, err3 = complete(prompt, backend=True, env=env)
    c3 = Counters(err3)
    assert not Decisions(err3).declined()
    assert c3.m_hist == {252: PROMPT_PROJECTIONS}, c3
