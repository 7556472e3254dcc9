"""The CMake package (issue #17): tests/consumer configures with find_package(npuflow CONFIG
REQUIRED) against the `cmake --install` prefix (`make install-stage`), builds a C++ program on
ONNX Runtime's C++ API that registers the installed EP, and runs it on an encoder-only model
(no CPU EP fallback) and a QDQ model."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BUILD_DIR, ROOT, VERSION

STAGE = BUILD_DIR / "stage"
ORT_SDK = ROOT / "third_party" / "onnxruntime"


@pytest.fixture(scope="module")
def consumer(tmp_path_factory) -> Path:
    config = STAGE / "lib" / "cmake" / "npuflow" / "npuflowConfig.cmake"
    assert config.exists(), f"{config} is missing: run `make install-stage`"
    build = tmp_path_factory.mktemp("consumer-build")
    source = tmp_path_factory.mktemp("consumer-source")
    # Built from a copy outside the tree, so nothing but the install prefix can be found.
    shutil.copytree(ROOT / "tests" / "consumer", source, dirs_exist_ok=True)
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={STAGE}",
                    f"-DONNXRUNTIME_ROOT={ORT_SDK.resolve()}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    return build / "npuflow_consumer"


def run_consumer(binary: Path, *args: str) -> str:
    run = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stdout


def test_installed_package_layout(outside_models):
    for relative in ("bin/npuflow", "lib/libonnxruntime_npuflow.so", "lib/libggml-npuflow.so",
                     "include/npuflow/npuflow.h", "include/npuflow/version.h",
                     "include/npuflow/ggml-npuflow.h", "lib/cmake/npuflow/npuflowConfig.cmake",
                     "lib/cmake/npuflow/npuflowConfigVersion.cmake",
                     "lib/cmake/npuflow/npuflowTargets.cmake"):
        assert (STAGE / relative).exists(), relative
    version_header = (STAGE / "include/npuflow/version.h").read_text()
    assert f'#define NPUFLOW_VERSION "{VERSION}"' in version_header
    # The installed CLI runs from the prefix and finds the installed EP beside it (lib/); the
    # ONNX Runtime is the caller's, named by NPUFLOW_ORT_LIBRARY.
    cli = str(STAGE / "bin" / "npuflow")
    runtime = {**os.environ,
               "NPUFLOW_ORT_LIBRARY": str(ORT_SDK.resolve() / "lib" / "libonnxruntime.so.1")}
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True,
                         env=runtime).stdout
    assert out.startswith(f"npuflow {VERSION} (ONNX Runtime 1.")
    graphs = json.loads(subprocess.run(
        [cli, "explain", str(outside_models["encoder"]), "--json", "--knob", "claim=all"],
        capture_output=True, text=True, check=True, env=runtime).stdout)
    assert [g for g in graphs if g["matcher"] == "vision"][0]["claims"], graphs


def test_version_file_refuses_another_minor(tmp_path):
    """find_package(npuflow 0.<other>) must fail: 0.x matches only its own minor."""
    major, minor, _ = VERSION.split(".")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(probe NONE)\n"
        f"find_package(npuflow {major}.{int(minor) + 1} CONFIG REQUIRED)\n")
    run = subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(tmp_path / "b"),
                          f"-DCMAKE_PREFIX_PATH={STAGE}"], capture_output=True, text=True)
    assert run.returncode != 0 and "npuflow" in run.stderr


def test_consumer_encoder_claimed_whole(consumer, outside_models):
    out = run_consumer(consumer, outside_models["encoder"], "--no-cpu-fallback", "claim=all")
    assert f"npuflow EP {VERSION} (package {VERSION})" in out, out
    assert re.search(r"claim: .*claimed 1 of 1 vision encoders", out), out
    outputs = re.findall(r"output '([^']+)': \d+ values, max \|diff\| (\S+), cosine (\S+)", out)
    assert outputs, out
    for name, _, cosine in outputs:
        assert float(cosine) >= 0.99999, (name, out)


def test_consumer_qdq_claimed(consumer, outside_models):
    out = run_consumer(consumer, outside_models["qdq_float"], "claim=all")
    assert re.search(r"claim: .*claimed 1 of 1 QDQ MatMul groups", out), out
    outputs = re.findall(r"output '([^']+)': \d+ values, max \|diff\| (\S+), cosine (\S+)", out)
    assert outputs, out
    # Against the CPU EP's float path the group is exact but for float ties: at most one step of
    # the output's scale (0.5, qdq_models.QdqSpec's y_scale).
    for name, worst, cosine in outputs:
        assert float(worst) <= 0.5 and float(cosine) >= 0.9999, (name, out)
