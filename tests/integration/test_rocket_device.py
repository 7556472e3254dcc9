"""device=rocket bound to librocketnpu-sim.so: the rocket device module's adapter code, the code a
board runs, driven through librocketnpu's C API off-board. The profile must show the calls went
through the library's entry points; QDQ groups must equal the CPU EP bit for bit and encoders meet
the simulator's gates; injected submit failures fall back to the host and change nothing."""
from __future__ import annotations

import gc
import os
import re

import numpy as np
import pytest

from conftest import BUILD_DIR, claimed
from gates import SUMMARY, assert_matches
from qdq_models import QdqSpec, make_activations, single_group_model
from vision_fixtures import FIXTURES, MANIFEST, pixels, vision_claims, vision_refusals

ROCKET_MODULE = BUILD_DIR / "lib" / "libnpuflow-device-rocket.so"
SIM_LIBRARY = BUILD_DIR / "lib" / "librocketnpu-sim.so"

pytestmark = pytest.mark.skipif(
    not (ROCKET_MODULE.exists() and SIM_LIBRARY.exists()),
    reason=f"the rocket module is not built ({ROCKET_MODULE}): no librocketnpu headers were "
           "found at configure time (CMake printed 'rocket device: skipped')")

ROCKET = {"device": "rocket", "rocketnpu": str(SIM_LIBRARY), "prof": "1"}
ENTRY = re.compile(r"rocket: (rocket_\w+) calls=(\d+)")


def ended_rocket_profile(capfd) -> tuple[dict[str, int], str]:
    """Calls per librocketnpu entry point of the npuflow session just dropped, and the text."""
    gc.collect()
    text = capfd.readouterr().err
    return {name: int(count) for name, count in ENTRY.findall(text)}, text


@pytest.mark.parametrize("spec", [
    QdqSpec(k=64, n=32, exact_arithmetic=True),
    QdqSpec(k=70, n=50, exact_arithmetic=True, per_channel=True, zp_x=-40, zp_w=-25, zp_y=-7),
    QdqSpec(k=300, n=97, exact_arithmetic=True, per_channel=True, x_type=np.uint8, zp_x=100,
            zp_w=3, zp_y=2),
    QdqSpec(k=1024, n=1024),
], ids=["aligned", "unaligned_per_channel", "uint8_activations", "full_range_1024"])
def test_qdq_groups_on_rocket_equal_the_sim_device_and_go_through_the_library(sessions, capfd,
                                                                              spec):
    path = sessions.save(single_group_model(spec))
    sim, _ = sessions.npuflow(path, options={"device": "sim", "min_rows": "1"})
    npu, records = sessions.npuflow(path, options={**ROCKET, "min_rows": "1"})
    assert claimed(records) == 1, records
    cpu = sessions.cpu(path)
    rows = [4, 16, 33, 128]
    for m in rows:
        x = make_activations(spec, m, seed=m)
        got = npu.run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, sim.run(None, {"x": x})[0], err_msg=f"m={m}")
        if spec.exact_arithmetic:
            np.testing.assert_array_equal(got, cpu.run(None, {"x": x})[0], err_msg=f"m={m}")
    del npu, sim
    calls, text = ended_rocket_profile(capfd)
    assert calls.get("rocket_i8_weights_pack") == 1, text[-3000:]
    assert calls.get("rocket_matmul_int8_prepacked") == len(rows), text[-3000:]
    summary = SUMMARY.findall(text)
    assert summary and summary[-1][1:] == ("0", "0"), text[-3000:]  # no host rows, no fallbacks
    assert "rocket: refused" not in text


ENCODERS = [m for m in sorted(MANIFEST["files"]) if MANIFEST["files"][m]["encoder_only"]]


@pytest.mark.parametrize("model", ENCODERS)
def test_encoders_on_rocket_meet_the_sim_gates_through_the_library(sessions, capfd, model):
    path = str(FIXTURES / model)
    npu, records = sessions.npuflow(path, options=ROCKET)
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    feed = pixels(path)
    assert_matches(sessions.cpu(path).run(None, feed)[0], npu.run(None, feed)[0], "sim", model)
    del npu
    calls, text = ended_rocket_profile(capfd)
    assert calls.get("rocket_matmul_fp16_prepacked", 0) > 0, text[-3000:]
    assert calls.get("rocket_weights_pack", 0) > 0, text[-3000:]
    assert "refused a" not in text and "rocket: refused" not in text, text[-3000:]


def test_injected_submit_failures_fall_back_and_change_nothing(sessions, capfd, monkeypatch):
    # The sim library reads ROCKETSIM_FAIL_EVERY when the adapter creates its context.
    monkeypatch.setenv("ROCKETSIM_FAIL_EVERY", "2")
    spec = QdqSpec(k=256, n=128, exact_arithmetic=True, per_channel=True, zp_x=-40, zp_w=-25,
                   zp_y=-7)
    path = sessions.save(single_group_model(spec))
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options={**ROCKET, "min_rows": "1"})
    assert claimed(records) == 1
    rows = [4, 8, 12, 16]
    for m in rows:
        x = make_activations(spec, m, seed=m)
        np.testing.assert_array_equal(npu.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0])
    del npu
    calls, text = ended_rocket_profile(capfd)
    assert calls.get("rocket_matmul_int8_prepacked") == len(rows), text[-3000:]
    assert re.search(r"rocket: refused rocket_matmul_int8_prepacked -4 x2", text), text[-3000:]
    summary = SUMMARY.findall(text)
    assert summary and summary[-1][2] == "2", text[-3000:]  # two fallbacks to the host


def test_a_missing_librocketnpu_fails_ep_creation_naming_it(sessions, capfd):
    path = sessions.save(single_group_model(QdqSpec(k=64, n=32)))
    missing = "/nonexistent/librocketnpu.so.0"
    _, records = sessions.npuflow(path, options={"device": "rocket", "rocketnpu": missing})
    assert records == []
    out = capfd.readouterr()
    assert f"device=rocket: cannot open librocketnpu '{missing}'" in out.out + out.err
