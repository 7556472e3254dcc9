"""The wheel (issue #17): `make wheel` made dist/npuflow-<version>-*.whl; here a fresh venv gets
it and stock onnxruntime from the cached wheelhouse (PyPI wheels, tools/setup_packaging.sh), at
the pinned release and at the EP's floor, and wheel_check.py runs in it with nothing of the
source tree on its path."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import BUILD_DIR, ROOT, VERSION, packaging_tool

DIST = ROOT / "dist"
PINS = dict(line.split("=", 1) for line in (ROOT / "tools" / "versions.env").read_text().splitlines()
            if re.match(r"^[A-Z_]+=", line))
ENCODER_GATE = {"cosine": 0.99999, "relative_l2": 1e-5}  # host, as tests/integration/gates.py


def the_wheel() -> Path:
    wheels = sorted(DIST.glob(f"npuflow-{VERSION}-*.whl"))
    assert len(wheels) == 1, f"expected one wheel of {VERSION} in {DIST} (`make wheel`): {wheels}"
    return wheels[0]


def test_wheel_is_repaired_manylinux():
    wheel = the_wheel()
    assert re.search(r"-py3-none-manylinux_\d+_\d+_x86_64(\.[a-z0-9_]+)*\.whl$", wheel.name), wheel
    names = zipfile.ZipFile(wheel).namelist()
    for packaged in ("npuflow/bin/npuflow", "npuflow/lib/libonnxruntime_npuflow.so",
                     "npuflow/lib/libggml-npuflow.so", "npuflow/__init__.py"):
        assert packaged in names
    vendored = [n for n in names if n.startswith("npuflow.libs/")]
    assert any("libdnnl" in n for n in vendored), vendored
    # ONNX Runtime is the user's and ggml-base and ggml the host program's: never vendored.
    assert not any("onnxruntime" in n or "ggml" in n for n in vendored), vendored
    # auditwheel's own verdict: the symbols allow the wheel's tag, and the libraries outside the
    # wheel and the policy are ggml-base and ggml, which the host program (llama.cpp) provides, so
    # `auditwheel show`'s overall tag names it (repair excluded it on purpose).
    tools = packaging_tool("path", "tools")
    shown = json.loads(subprocess.run(
        [f"{tools}/bin/auditwheel", "show", "--json", str(wheel)], check=True,
        capture_output=True, text=True,
        env={**os.environ, "PATH": f"{tools}/bin:{os.environ['PATH']}"}).stdout)
    tag = re.search(r"manylinux_\d+_\d+_x86_64", wheel.name).group(0)
    assert shown["sym_tag"] == tag, shown
    host_ggml = {"libggml-base.so.0", "libggml.so.0"}
    assert set(shown["external_libs"]) == host_ggml, shown["external_libs"]
    assert set(shown["policy_upgrades"][tag]["libs_to_eliminate"]) == host_ggml, shown
    metadata = zipfile.ZipFile(wheel).read(f"npuflow-{VERSION}.dist-info/METADATA").decode()
    requires = sorted(line.split(": ", 1)[1] for line in metadata.splitlines()
                      if line.startswith("Requires-Dist: "))
    assert requires == ["numpy", "onnxruntime>=1.23"]


@pytest.fixture(scope="module", params=["PY_ONNXRUNTIME", "ONNXRUNTIME_FLOOR_VERSION"])
def fresh_venv(request, tmp_path_factory):
    """A venv with the wheel and onnxruntime at the pin named by the parameter, nothing else."""
    version = PINS[request.param]
    house = Path(packaging_tool("path", "wheelhouse")) / version
    assert (house / ".complete").exists(), f"{house} is missing: run tools/setup_packaging.sh"
    venv = tmp_path_factory.mktemp(f"venv-ort-{version}")
    # No pip inside (the dev venv's pip installs into it) and no bytecode compiled: the venv is
    # used once.
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                    "install", "-q", "--disable-pip-version-check", "--no-compile", "--no-index",
                    "--find-links", str(house), str(the_wheel()), f"onnxruntime=={version}"],
                   check=True)
    return venv, version


def clean_environment() -> dict[str, str]:
    keep = {"PATH", "HOME", "LANG", "TMPDIR"}
    return {k: v for k, v in os.environ.items() if k in keep}


def test_fresh_venv_runs_encoder_and_qdq(fresh_venv, outside_models, tmp_path):
    venv, ort_version = fresh_venv
    script = tmp_path / "wheel_check.py"
    shutil.copyfile(Path(__file__).with_name("wheel_check.py"), script)
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-I", str(script), str(outside_models["encoder"]),
         str(outside_models["qdq"]), str(ROOT), str(BUILD_DIR)],
        cwd=tmp_path, env=clean_environment(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.splitlines()[-1])

    assert report["onnxruntime"] == ort_version
    site = str(venv)
    assert report["package_file"].startswith(site)
    assert report["ep_library"].startswith(site) and report["ggml_backend"].startswith(site)
    assert not [p for p in report["sys_path"] if p.startswith(str(ROOT))], report["sys_path"]
    assert report["from_source_tree"] == [], report["from_source_tree"]

    # One version everywhere: the package, the EP's GetVersion (ep_metadata), the CLI.
    assert report["version"] == VERSION
    assert set(report["ep_versions"]) == {VERSION}
    assert report["cli_version"].startswith(f"npuflow {VERSION} (ONNX Runtime {ort_version})")
    assert set(report["ep_names"]) == {"NpuflowExecutionProvider"}
    assert report["second_register"] == len(report["ep_names"])

    # The encoder-only model is claimed whole (no CPU EP fallback allowed) and within the gate.
    encoder = report["encoder"]
    assert encoder["providers"][0] == "NpuflowExecutionProvider"
    for name, measured in encoder["outputs"].items():
        assert measured["cosine"] >= ENCODER_GATE["cosine"], (name, measured)
        assert measured["relative_l2"] <= ENCODER_GATE["relative_l2"], (name, measured)
    # The QDQ group against the CPU EP's float path: exact but for float ties (<= 1 LSB).
    for name, measured in report["qdq"]["outputs"].items():
        assert measured["worst_lsb"] <= 1, (name, measured)

    # explain(): the EP's records as Python objects, equal to `npuflow explain --json`.
    [encoder_graph] = [g for g in report["explain_encoder"] if g["matcher"] == "vision"]
    assert len(encoder_graph["claims"]) == 1, encoder_graph
    assert encoder_graph["claims"][0]["family"].startswith("siglip")
    qdq_graphs = report["explain_qdq"]
    assert sum(len(g["claims"]) for g in qdq_graphs if g["matcher"] == "qdq") == 1
    assert report["cli_explain_encoder"] == report["explain_encoder"]
    assert report["cli_explain_qdq"] == report["explain_qdq"]
