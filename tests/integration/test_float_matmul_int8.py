"""The opt-in float MatMul claim (NPUFLOW_FLOAT_MATMUL=int8, seed 004): every float MatMul with a
constant 2-D weight that no other claim takes runs as an int8 GEMM, its weight quantized once per
output column and its activation per row at run time. Lossy by design; the gate is the seed's,
relative error <= 2% per output against the fp32 MatMul (the CPU EP), and an error as small as
fp32's would mean the int8 path never ran. Off by default, and explain lists what it took."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest

from conftest import CLI, claimed
from gates import agreement
from qdq_models import QWEN3_INPUT_WIDTHS, QWEN3_PROJECTIONS, demo_layer_float_model
from vision_fixtures import FIXTURES, MODELS, pixels

INT8 = {"float_matmul": "int8"}
SEED_GATE = 0.02  # relative L2 error per output, seed 004's bar
# Below this the outputs are fp32's (oneDNN vs MLAS differ by ~1e-7): int8 never ran. Measured
# int8 errors: 1.1-1.2e-2 on the demo layer, 7e-4 to 1.2e-2 on the fixture encoders.
QUANTIZED = 1e-4


def float_records(records):
    return [r for r in records if r.get("matcher") == "float_int8"]


def demo_feeds(rows=32, seed=1):
    rng = np.random.default_rng(seed)
    return {f"{s}_float": rng.standard_normal((rows, w)).astype(np.float32)
            for s, w in QWEN3_INPUT_WIDTHS.items()}


@pytest.fixture(scope="module")
def demo_float(tmp_path_factory):
    path = tmp_path_factory.mktemp("float") / "qwen3_layer_float.onnx"
    onnx.save(demo_layer_float_model(), str(path))
    return str(path)


def test_off_by_default_nothing_is_taken(sessions, demo_float):
    _, records = sessions.npuflow(demo_float)
    assert claimed(records) == 0
    assert not float_records(records)


@pytest.mark.parametrize("level", ["disable", "all"])
def test_demo_layer_in_float_form_runs_as_int8_within_the_seed_gate(sessions, demo_float, level):
    feeds = demo_feeds()
    cpu = sessions.cpu(demo_float, level=level)
    ref = dict(zip([o.name for o in cpu.get_outputs()], cpu.run(None, feeds)))
    outputs = {}
    for device in ("host", "sim"):
        npu, records = sessions.npuflow(demo_float, level=level, options={**INT8, "device": device})
        [record] = float_records(records)
        assert record["candidates"] == 7 and len(record["claims"]) == 7, record["refusals"]
        assert {c["kind"] for c in record["claims"]} == {"float_matmul_int8"}
        got = dict(zip([o.name for o in npu.get_outputs()], npu.run(None, feeds)))
        for name in QWEN3_PROJECTIONS:
            measured = agreement(ref[name], got[name])
            print(f"{level} {device} {name}: {measured}")
            assert QUANTIZED < measured.rel_l2 <= SEED_GATE, f"{name} on {device}: {measured}"
        outputs[device] = got
    # Exact integer sums and one epilogue: the simulated NPU gives the host's bits.
    for name in QWEN3_PROJECTIONS:
        np.testing.assert_array_equal(outputs["host"][name], outputs["sim"][name])


def test_a_nan_row_stays_nan_and_the_other_rows_keep_the_gate(sessions, demo_float):
    feeds = demo_feeds()
    feeds["hidden_float"][3, 17] = np.nan
    ref = sessions.cpu(demo_float).run(None, feeds)
    npu, _ = sessions.npuflow(demo_float, options=INT8)
    for r, g in zip(ref, npu.run(None, feeds)):
        np.testing.assert_array_equal(np.isnan(r), np.isnan(g))
        finite = ~np.isnan(r).any(axis=1)
        assert agreement(r[finite], g[finite]).rel_l2 <= SEED_GATE


@pytest.mark.parametrize("model", [m for m in MODELS if m.endswith("_torchscript.onnx")])
def test_fixture_encoders_with_the_encoder_claim_off(sessions, model):
    """Every projection of an encoder as int8 when the encoder claim is off: the MatMuls with a
    constant weight are all taken, the attention's (q.k, p.v: both operands at run time) are
    refused as weight_not_constant. The whole encoder compounds the per-MatMul error; it is
    measured against the same bar, per output."""
    path = str(FIXTURES / model)
    feeds = pixels(path)
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options={**INT8, "vision": "0"})
    [record] = float_records(records)
    taken = len(record["claims"])
    reasons = {x["reason"] for x in record["refusals"]}
    print(f"{model}: {taken} of {record['candidates']} float MatMuls as int8, refused {reasons}")
    assert taken > 0 and reasons <= {"weight_not_constant"}
    model_proto = onnx.load(path)
    constants = {t.name for t in model_proto.graph.initializer}
    constants |= {o for n in model_proto.graph.node if n.op_type == "Constant" for o in n.output}
    assert taken == sum(1 for n in model_proto.graph.node
                        if n.op_type == "MatMul" and n.input[1] in constants)
    for o, ref, got in zip(cpu.get_outputs(), cpu.run(None, feeds), npu.run(None, feeds)):
        measured = agreement(ref, got)
        print(f"  {o.name}: {measured}")
        assert QUANTIZED < measured.rel_l2 <= SEED_GATE, f"{model} {o.name}: {measured}"


def test_the_encoder_claim_keeps_its_encoder(sessions):
    """With both on, the encoder takes its MatMuls first (exact on host) and int8 gets none."""
    path = str(FIXTURES / "vit_torchscript.onnx")
    _, records = sessions.npuflow(path, options=INT8)
    assert any(c["kind"] == "vision_encoder" for r in records for c in r["claims"])
    assert all(not r["claims"] for r in float_records(records))


def test_explain_lists_the_matmuls_it_took(demo_float):
    result = subprocess.run([str(CLI), "explain", demo_float, "--knob", "float_matmul=int8"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "7 of 7 float MatMuls as int8 (NPUFLOW_FLOAT_MATMUL=int8) claimed" in result.stdout
    for name in QWEN3_PROJECTIONS:
        assert f"{name}.matmul" in result.stdout
