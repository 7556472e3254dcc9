"""Do-no-harm claiming through the CLI: claim=faster keeps an encoder the cost table measured as
not slower than the CPU EP, declines one measured slower (explain shows both costs), declines
everything without a table, and device=auto on a machine without an NPU defaults to faster. A
dynamically quantized encoder and its MatMulInteger groups answer to the policy as well, each by
measurements of its own kind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import CLI, ROOT

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vision" / "vit_dynamo.onnx"


def explain(tmp_path, model=FIXTURE, **env):
    full = dict(os.environ)
    full.pop("NPUFLOW_CLAIM", None)
    full["NPUFLOW_CACHE_DIR"] = str(tmp_path / "cache")  # never the user's own table
    full.update(env)
    result = subprocess.run([str(CLI), "explain", str(model)], capture_output=True, text=True,
                            env=full, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def table(tmp_path, npuflow_ms, cpu_ep_ms, kind="vision_encoder", extra=(), form=""):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"machine": "test", "rows": [{
        "kind": kind, "model": "measured ViT" if kind == "vision_encoder" else f"measured {kind}", "tokens": 17, "hidden": 64,
        "flops": 1e8, "npuflow_ms": npuflow_ms, "cpu_ep_ms": cpu_ep_ms, "form": form}, *extra]}))
    return str(path)


def test_faster_keeps_an_encoder_measured_not_slower(tmp_path):
    out = explain(tmp_path, NPUFLOW_CLAIM="faster", NPUFLOW_CLAIM_COSTS=table(tmp_path, 1.0, 1.5))
    assert "1 of 1 vision encoders claimed" in out
    assert "declined" not in out


def test_faster_declines_an_encoder_measured_slower_with_both_costs(tmp_path):
    out = explain(tmp_path, NPUFLOW_CLAIM="faster", NPUFLOW_CLAIM_COSTS=table(tmp_path, 3.0, 2.0))
    assert "0 of 1 vision encoders claimed" in out
    assert "slower_than_cpu_ep" in out
    declined = out.split("declined by claim=faster", 1)[1]
    assert "npuflow host" in declined and "CPU EP" in declined and "measured ViT" in declined


def test_all_claims_whatever_the_table_says(tmp_path):
    out = explain(tmp_path, NPUFLOW_CLAIM="all", NPUFLOW_CLAIM_COSTS=table(tmp_path, 3.0, 2.0))
    assert "1 of 1 vision encoders claimed" in out


def test_auto_on_a_machine_without_an_npu_is_faster_and_never_guesses(tmp_path):
    # No table in the (empty) cache: nothing measured, so nothing claimed on the host.
    out = explain(tmp_path)
    assert "0 of 1 vision encoders claimed" in out
    assert "no_measured_cost" in out
    # An explicit device is a deliberate choice: everything is claimed.
    for device in ("host", "sim"):
        assert "1 of 1 vision encoders claimed" in explain(tmp_path, NPUFLOW_DEVICE=device)


def test_a_dynamic_int8_encoder_and_its_groups_answer_to_measurements_of_their_own_kind(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    model = tmp_path / "vit_dynamic.onnx"
    quantize_dynamic(str(FIXTURE), str(model), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"])
    groups = "integer MatMul groups (MatMulInteger, QLinearMatMul) claimed"
    # A float encoder measured faster at this very shape vouches for neither the quantized encoder
    # nor its groups: all run on the CPU EP, and explain says why.
    out = explain(tmp_path, model, NPUFLOW_CLAIM="faster",
                  NPUFLOW_CLAIM_COSTS=table(tmp_path, 1.0, 1.5))
    assert "0 of 1 vision encoders claimed" in out, out
    assert f" 0 of " in out.split(groups)[0].splitlines()[-1], out
    assert "no quantized_encoder (dynamic_int8) cost measured" in out, out
    assert "no integer_matmul cost" in out, out
    # A QDQ-quantized encoder measured faster at this shape does not vouch for a dynamic one.
    out = explain(tmp_path, model, NPUFLOW_CLAIM="faster",
                  NPUFLOW_CLAIM_COSTS=table(tmp_path, 1.0, 1.5, kind="quantized_encoder",
                                            form="qdq"))
    assert "0 of 1 vision encoders claimed" in out, out
    assert "no quantized_encoder (dynamic_int8) cost measured" in out, out
    # The quantized encoder measured not slower: claimed as one node, its groups inside it.
    out = explain(tmp_path, model, NPUFLOW_CLAIM="faster",
                  NPUFLOW_CLAIM_COSTS=table(tmp_path, 1.0, 1.5, kind="quantized_encoder",
                                            form="dynamic_int8"))
    assert "1 of 1 vision encoders claimed" in out, out
    assert "inside_quantized_encoder" in out, out
    # Measured slower: declined with both costs, and the groups it gives back are judged alone
    # (integer groups measured faster at their shape are kept).
    integer_row = {"kind": "integer_matmul", "model": "measured group", "rows": 17, "k": 64,
                   "n": 64, "flops": 1e6, "npuflow_ms": 0.1, "cpu_ep_ms": 0.2}
    out = explain(tmp_path, model, NPUFLOW_CLAIM="faster",
                  NPUFLOW_CLAIM_COSTS=table(tmp_path, 2.0, 1.5, kind="quantized_encoder",
                                            extra=[integer_row], form="dynamic_int8"))
    assert "0 of 1 vision encoders claimed" in out and "slower_than_cpu_ep" in out, out
    claimed, candidates = out.split(groups)[0].splitlines()[-1].split("': ")[1].split(" of ")
    assert int(claimed) == int(candidates) > 0, out
    # claim=all takes the encoder whatever the table says.
    out = explain(tmp_path, model, NPUFLOW_CLAIM="all",
                  NPUFLOW_CLAIM_COSTS=table(tmp_path, 2.0, 1.5, kind="quantized_encoder"))
    assert "1 of 1 vision encoders claimed" in out, out


def test_each_bench_replaces_only_its_own_kinds_in_the_cost_table(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from cost_table import machine_signature, write_rows
    path = tmp_path / "costs.json"
    float_row = {"kind": "vision_encoder", "model": "ViT", "tokens": 197, "hidden": 768,
                 "flops": 1.0, "npuflow_ms": 1.0, "cpu_ep_ms": 2.0}
    quantized_row = {"kind": "quantized_encoder", "form": "qdq", "model": "MiniLM QDQ",
                     "tokens": 29, "hidden": 384, "flops": 1.0, "npuflow_ms": 3.0,
                     "cpu_ep_ms": 2.0}
    write_rows(path, {"vision_encoder"}, [float_row], 2, "encoders")
    write_rows(path, {"quantized_encoder"}, [quantized_row], 2, "quantized")
    write_rows(path, {"quantized_encoder"}, [dict(quantized_row, model="again")], 2, "quantized")
    written = json.loads(path.read_text())
    assert written["machine"] == machine_signature()
    assert [r["model"] for r in written["rows"]] == ["ViT", "again"]
    assert written["commands"] == ["encoders", "quantized"]
    # Rows of another machine are never kept.
    path.write_text(json.dumps({"machine": "elsewhere", "rows": [float_row]}))
    write_rows(path, {"quantized_encoder"}, [quantized_row], 2, "quantized")
    assert [r["model"] for r in json.loads(path.read_text())["rows"]] == ["MiniLM QDQ"]
