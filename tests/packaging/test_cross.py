"""aarch64 (issue #17): the cross-built CLI and EP (`make build-aarch64`) on aarch64 ONNX Runtime,
run under qemu-user as a Cortex-A76 (the RK3588's big core): an encoder-only model and a QDQ
model, each against that ONNX Runtime's own CPU EP, on host and on sim (`make test-cross`)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT, VERSION

CROSS_DIR = Path(os.environ.get("NPUFLOW_CROSS_DIR", ROOT / "build-aarch64"))
ELF_MACHINE_AARCH64 = 183
# Gates of tests/integration/gates.py: host is fp32, sim computes in fp16.
COSINE_GATE = {"host": 0.99999, "sim": 0.9999}
# What a Cortex-A76 shows in /proc/cpuinfo (ARM's part number 0xd0b, RK3588's big cores).
A76_PROCESSOR = """processor\t: {index}
BogoMIPS\t: 48.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x4
CPU part\t: 0xd0b
CPU revision\t: 0

"""


@pytest.fixture(scope="module")
def qemu(tmp_path_factory) -> list[str]:
    """qemu-aarch64 as a Cortex-A76, with tests/cross/fake_proc_cpuinfo.cc preloaded into the
    guest and pointed at an ARM /proc/cpuinfo with as many processors as this machine has."""
    cpuinfo = tmp_path_factory.mktemp("cpuinfo") / "cpuinfo"
    cpuinfo.write_text("".join(A76_PROCESSOR.format(index=i) for i in range(os.cpu_count())))
    shim = CROSS_DIR / "lib" / "libnpuflow_fake_cpuinfo.so"
    assert shim.exists(), f"{shim} is missing: run `make build-aarch64`"
    return ["qemu-aarch64", "-cpu", "cortex-a76", "-E", f"LD_PRELOAD={shim}", "-E",
            f"NPUFLOW_FAKE_CPUINFO={cpuinfo}"]


@pytest.fixture(scope="module")
def cli(qemu):
    def run_cli(*args: str) -> str:
        run = subprocess.run([*qemu, str(CROSS_DIR / "bin" / "npuflow"), *map(str, args)],
                             capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-4000:]
        return run.stdout
    return run_cli


def test_binaries_are_aarch64():
    for relative in ("bin/npuflow", "lib/libonnxruntime_npuflow.so", "lib/libggml-npuflow.so"):
        header = (CROSS_DIR / relative).read_bytes()[:20]
        assert header[:4] == b"\x7fELF"
        assert int.from_bytes(header[18:20], "little") == ELF_MACHINE_AARCH64, relative


def test_cli_version_on_aarch64_onnxruntime(cli):
    assert re.match(rf"npuflow {re.escape(VERSION)} \(ONNX Runtime 1\.\d+\.\d+\)", cli("--version"))


@pytest.mark.parametrize("device", ["host", "sim"])
def test_encoder_under_qemu(cli, outside_models, device):
    knobs = ["--knob", "claim=all", "--knob", f"device={device}"]
    graphs = json.loads(cli("explain", outside_models["encoder"], "--json", *knobs))
    [vision] = [g for g in graphs if g["matcher"] == "vision"]
    assert len(vision["claims"]) == 1, vision
    out = cli("demo", outside_models["encoder"], "--runs", "1", *knobs)
    assert "vision encoders claimed: 1 / 1" in out, out
    cosines = [float(c) for c in re.findall(r"cosine (\S+?),?\s", out)]
    assert cosines and min(cosines) >= COSINE_GATE[device], out


@pytest.mark.parametrize("device", ["host", "sim"])
def test_qdq_under_qemu(cli, outside_models, device):
    out = cli("demo", outside_models["qdq"], "--runs", "1", "--knob", "claim=all", "--knob",
              f"device={device}")
    assert "QDQ MatMul groups claimed: 1 / 1" in out, out
    # Exact integer arithmetic on both devices: the CPU EP's float path to 0 LSB but for ties.
    against_float = re.search(r"against the CPU EP's float path \(level disable\): (\d+)", out)
    assert against_float and int(against_float.group(1)) <= 1, out


def test_board_tarball_runs_from_where_it_is_unpacked(qemu, outside_models, tmp_path):
    """`make dist-aarch64`'s tarball, unpacked anywhere: the CLI loads the bundled ONNX Runtime
    and the EP its bundled oneDNN (ld.so's own account of where each came from)."""
    [tarball] = sorted((ROOT / "dist").glob(f"npuflow-{VERSION}-linux-aarch64.tar.gz"))
    with tarfile.open(tarball) as archive:
        archive.extractall(tmp_path, filter="data")
    board = tmp_path / f"npuflow-{VERSION}-linux-aarch64"
    assert f"npuflow {VERSION}" in (board / "README.md").read_text()
    run = subprocess.run([*qemu, "-E", "LD_DEBUG=files", str(board / "bin" / "npuflow"), "explain",
                          str(outside_models["encoder"]), "--json", "--knob", "claim=all"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    graphs = json.loads(run.stdout)
    assert [g for g in graphs if g["matcher"] == "vision"][0]["claims"]
    opened = [os.path.normpath(p) for p in re.findall(r"calling init: (\S+)", run.stderr)]
    for soname in ("libonnxruntime.so.1", "libdnnl.so.2", "libonnxruntime_npuflow.so"):
        paths = [p for p in opened if p.endswith("/" + soname)]
        assert paths and all(p.startswith(str(board / "lib")) for p in paths), (soname, paths)
