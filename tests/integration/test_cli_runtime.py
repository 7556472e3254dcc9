"""The CLI's run-time ONNX Runtime (issue #17): it links none, loads NPUFLOW_ORT_LIBRARY or
libonnxruntime.so.1 by its run path, says clearly when it cannot; `--version`, `explain --json`
(the EP's own records) and `--knob NAME=VALUE`."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from conftest import CLI, ROOT
from qdq_models import QdqSpec, demo_layer_model, single_group_model

VERSION = (ROOT / "VERSION").read_text().strip()
ENCODER = ROOT / "tests" / "fixtures" / "vision" / "siglip_encoder_dynamo.onnx"
# The dev venv's onnxruntime: another release than the SDK the CLI finds by its run path.
PIP_ORT = sorted((Path(ort.__file__).parent / "capi").glob("libonnxruntime.so.*"))[-1]


def cli(*args, ort_library: str | None = None, check=True):
    env = dict(os.environ)
    env.pop("NPUFLOW_ORT_LIBRARY", None)
    if ort_library is not None:
        env["NPUFLOW_ORT_LIBRARY"] = ort_library
    run = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, env=env,
                         timeout=300)
    if check:
        assert run.returncode == 0, run.stderr
    return run


def test_the_cli_links_no_onnxruntime():
    needed = subprocess.run(["readelf", "-d", str(CLI)], capture_output=True, text=True,
                            check=True).stdout
    assert "libonnxruntime" not in needed


def test_version_names_npuflow_and_the_loaded_runtime():
    sdk = cli("--version").stdout
    assert sdk.startswith(f"npuflow {VERSION} (ONNX Runtime 1.")
    assert cli("version").stdout == sdk
    pip = cli("--version", ort_library=str(PIP_ORT)).stdout
    assert pip.strip() == f"npuflow {VERSION} (ONNX Runtime {ort.__version__})"


def test_a_missing_or_foreign_runtime_is_a_clear_error(tmp_path):
    missing = cli("explain", ENCODER, ort_library=str(tmp_path / "nope.so"), check=False)
    assert missing.returncode == 1
    assert "cannot load ONNX Runtime" in missing.stderr and "nope.so" in missing.stderr
    # Any other shared library: no OrtGetApiBase.
    foreign = cli("explain", ENCODER, ort_library="libm.so.6", check=False)
    assert foreign.returncode == 1 and "not ONNX Runtime" in foreign.stderr
    # --version still answers with npuflow's own version.
    version = cli("--version", ort_library=str(tmp_path / "nope.so")).stdout
    assert version.startswith(f"npuflow {VERSION} (no ONNX Runtime: cannot load")


def test_explain_runs_on_a_pip_installed_runtime(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(demo_layer_model(rows=16), str(path))
    out = cli("explain", path, "--knob", "claim=all", ort_library=str(PIP_ORT)).stdout
    assert "7 of 7 QDQ MatMul groups claimed" in out


@pytest.mark.parametrize("level", ["basic", "all"])
def test_explain_json_is_the_eps_report(sessions, level):
    """--json prints exactly the records the EP writes for a session in this process."""
    _, records = sessions.npuflow(str(ENCODER), level=level, options={"claim": "all"})
    printed = json.loads(cli("explain", ENCODER, "--json", "--opt", level, "--knob",
                             "claim=all").stdout)
    assert printed == records
    assert [g for g in printed if g["matcher"] == "vision"][0]["claims"], printed


def test_knobs_reach_the_session(tmp_path):
    """--knob is a provider option: qdq=0 turns the QDQ claims off, as the knob table says."""
    path = tmp_path / "one.onnx"
    onnx.save(single_group_model(QdqSpec(k=64, n=32), rows=32, float_io=True), str(path))
    on = json.loads(cli("explain", path, "--json", "--knob", "claim=all").stdout)
    off = json.loads(cli("explain", path, "--json", "--knob", "claim=all", "--knob",
                         "qdq=0").stdout)
    assert sum(len(g["claims"]) for g in on) == 1
    assert sum(len(g["claims"]) for g in off) == 0
    assert "disabled_by_knob" in [r["reason"] for g in off for r in g["refusals"]]


@pytest.mark.parametrize("setting", ["nosuch=1", "=1", "claim"])
def test_a_bad_knob_flag_is_refused(setting):
    run = cli("explain", ENCODER, "--knob", setting, check=False)
    assert run.returncode == 2 and "--knob" in run.stderr
