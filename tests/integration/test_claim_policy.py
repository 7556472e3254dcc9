"""Do-no-harm claiming through the CLI: claim=faster keeps an encoder the cost table measured as
not slower than the CPU EP, declines one measured slower (explain shows both costs), declines
everything without a table, and device=auto on a machine without an NPU defaults to faster."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import CLI

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vision" / "vit_dynamo.onnx"


def explain(tmp_path, **env):
    full = dict(os.environ)
    full.pop("NPUFLOW_CLAIM", None)
    full["NPUFLOW_CACHE_DIR"] = str(tmp_path / "cache")  # never the user's own table
    full.update(env)
    result = subprocess.run([str(CLI), "explain", str(FIXTURE)], capture_output=True, text=True,
                            env=full, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def table(tmp_path, npuflow_ms, cpu_ep_ms):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"machine": "test", "rows": [{
        "kind": "vision_encoder", "model": "measured ViT", "tokens": 17, "hidden": 64,
        "flops": 1e8, "npuflow_ms": npuflow_ms, "cpu_ep_ms": cpu_ep_ms}]}))
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
