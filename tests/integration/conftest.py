"""Shared fixtures: the npuflow EP registered once in this process with stock onnxruntime, and
helpers to build CPU-EP and npuflow sessions over the same model."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import zlib
from collections import defaultdict
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

# The suite tests what npuflow claims, so it claims everything it matches: the do-no-harm policy
# (NPUFLOW_CLAIM=faster, the default on a machine without an NPU) has its own tests, which set the
# knob per session.
os.environ.setdefault("NPUFLOW_CLAIM", "all")

# NPUFLOW_TEST_SLICE=N runs a fixed slice of the suite: every test function, and of each
# parametrized one the cases whose id hashes to 0 mod N (at least one), minus the tests marked
# full_suite_only. `make test-python-asan` runs the slice N=5 under the sanitizers, where the whole
# suite takes over an hour on two cores; `make test-python` always runs it whole, and so does
# `make test-python-asan ASAN_SLICE=1`. Dropped cases are reported as deselected, never as passed.
SLICE = int(os.environ.get("NPUFLOW_TEST_SLICE", "1") or "1")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "full_suite_only: too slow for the sliced (sanitizer) run; its code path is "
        "covered there by a smaller test named in the marker's reason")


def in_slice(nodeid: str) -> bool:
    return zlib.crc32(nodeid.encode()) % SLICE == 0


def pytest_collection_modifyitems(config, items):
    if SLICE <= 1:
        return
    cases = defaultdict(list)
    for item in items:
        cases[item.nodeid.split("[", 1)[0]].append(item)
    keep = []
    for group in cases.values():
        group = [item for item in group if item.get_closest_marker("full_suite_only") is None]
        chosen = [item for item in group if in_slice(item.nodeid)]
        keep.extend(chosen or group[:1])
    kept = set(id(item) for item in keep)
    config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
    items[:] = [item for item in items if id(item) in kept]


ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
CACHE = Path(os.environ.get("NPUFLOW_CACHE", Path.home() / ".cache" / "npuflow"))


def generated_once(name: str, sources: list[Path], build):
    """The models a module generates (quantize_static over the fixtures takes tens of seconds),
    made once per content and reused by later runs, the sanitizer run of the same `make test` and
    later CI clones among them. The folder, under the cache, is keyed by the onnx and onnxruntime
    versions and the bytes of `sources` (the files that generate them and the models they read),
    so any change there makes a new one. build(folder, write) returns the fixture's value and,
    with write, writes the models too; a folder appears whole (written aside, then renamed)."""
    digest = hashlib.sha256(f"{onnx.__version__} {ort.__version__}".encode())
    for source in sources:
        digest.update(Path(source).read_bytes())
    folder = CACHE / "test-models" / f"{name}-{digest.hexdigest()[:16]}"
    if not folder.exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        build(staging, True)
        try:
            staging.rename(folder)
        except OSError:  # another run got there first, with the same content
            shutil.rmtree(staging, ignore_errors=True)
    return build(folder, False)

BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
EP_LIBRARY = BUILD_DIR / "lib" / "libonnxruntime_npuflow.so"
CLI = BUILD_DIR / "bin" / "npuflow"
EP_NAME = "NpuflowExecutionProvider"

LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


@pytest.fixture(scope="session")
def npuflow_devices():
    assert EP_LIBRARY.exists(), f"{EP_LIBRARY} is missing: run `make build`"
    ort.register_execution_provider_library("npuflow", str(EP_LIBRARY))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    assert devices, "onnxruntime lists no npuflow device"
    return devices


class Sessions:
    """Builds the two arms of every comparison from one saved model."""

    def __init__(self, devices, tmp_path: Path):
        self.devices = devices
        self.tmp_path = tmp_path
        self.count = 0

    def save(self, model: onnx.ModelProto) -> str:
        self.count += 1
        path = self.tmp_path / f"model{self.count}.onnx"
        onnx.save(model, str(path))
        return str(path)

    @staticmethod
    def _options(level: str, config: dict | None = None):
        so = ort.SessionOptions()
        so.graph_optimization_level = LEVELS[level]
        so.intra_op_num_threads = 2
        for key, value in (config or {}).items():
            so.add_session_config_entry(key, value)
        return so

    def cpu(self, path: str, level: str = "all"):
        return ort.InferenceSession(path, sess_options=self._options(level),
                                    providers=["CPUExecutionProvider"])

    def npuflow(self, path: str, level: str = "all", options: dict | None = None,
                config: dict | None = None):
        """Returns (session, report) where report lists the EP's per-graph claim records."""
        report = self.tmp_path / f"report{self.count}-{len(options or {})}.jsonl"
        if report.exists():
            report.unlink()
        so = self._options(level, config)
        so.add_provider_for_devices(self.devices, {"report": str(report), **(options or {})})
        session = ort.InferenceSession(path, sess_options=so)
        records = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
        return session, records


@pytest.fixture
def sessions(npuflow_devices, tmp_path):
    return Sessions(npuflow_devices, tmp_path)


def claimed(records) -> int:
    return sum(len(r["claims"]) for r in records)


def refusal_reasons(records) -> list[str]:
    return [x["reason"] for r in records for x in r["refusals"]]
