"""The fused QDQ MatMul against the CPU EP: bit-exact where the arithmetic allows it, at most one
LSB on random full-range data, over the shapes of Qwen3-0.6B's projections."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from conftest import BUILD_DIR, claimed
from gates import assert_every_call_on_the_device, ended_session_profile
from qdq_models import (QWEN3_PROJECTIONS, QdqSpec, make_activations, make_weights,
                        single_group_model)

ROWS = [1, 5, 16, 32, 128, 300]  # 300: several row panels run concurrently on the pool
SHAPES = sorted(set(QWEN3_PROJECTIONS.values()))  # (K, N): 1024x2048, 1024x1024, 2048x1024, ...

# Exact-arithmetic configurations: power-of-two scales and small magnitudes make the CPU EP's
# float path exact too, so any difference at all is npuflow's fault (ties included).
EXACT_CONFIGS = {
    "per_tensor_symmetric": dict(per_channel=False),
    "per_channel_asymmetric": dict(per_channel=True, zp_x=-40, zp_w=-25, zp_y=-7),
    "uint8_activations": dict(per_channel=True, x_type=np.uint8, zp_x=100, zp_w=3, zp_y=2),
    "uint8_weights_uint8_out": dict(per_channel=False, w_type=np.uint8, zp_w=130,
                                    y_type=np.uint8, zp_y=128),
    "float_output": dict(per_channel=True, zp_x=-40, zp_w=-25, with_q=False),
    "com_microsoft_domain": dict(per_channel=True, zp_x=5, domain="com.microsoft"),
}


def run_both(sessions, spec: QdqSpec, rows, level="all", options=None):
    path = sessions.save(single_group_model(spec))
    cpu = sessions.cpu(path, level)
    npu, records = sessions.npuflow(path, level, options)
    assert claimed(records) == 1, f"the group was not claimed: {records}"
    results = []
    for m in rows:
        x = make_activations(spec, m, seed=m)
        results.append((m, cpu.run(None, {"x": x})[0], npu.run(None, {"x": x})[0]))
    return results


# The devices the exactness tests run on. On sim every row count reaches the device (min_rows 1),
# so ragged M (1, 5) is padded to the RK3588's M % 4 rather than routed to the host loop; the
# profile then shows that the device ran every call.
DEVICES = {
    "host": {"device": "host"},
    "sim": {"device": "sim", "min_rows": "1", "prof": "1"},
}


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("config", sorted(EXACT_CONFIGS))
@pytest.mark.parametrize("k,n", SHAPES)
def test_zero_lsb_on_exact_inputs(sessions, config, k, n, device, capfd):
    spec = QdqSpec(k=k, n=n, exact_arithmetic=True, seed=k + n, **EXACT_CONFIGS[config])
    results = run_both(sessions, spec, ROWS, options=DEVICES[device])  # the session has ended
    if device == "sim":
        profile = ended_session_profile(capfd)
        assert_every_call_on_the_device(profile)
        assert profile.qdq_device_calls == len(ROWS)
    for m, expected, actual in results:
        assert actual.dtype == expected.dtype and actual.shape == expected.shape == (m, n)
        if spec.with_q:
            diff = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
            assert diff.max() == 0, f"m={m}: {int((diff > 0).sum())} values differ"
            # The output must carry information: a saturated or constant tensor proves nothing.
            assert len(np.unique(expected)) > 8
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=f"m={m}")


@pytest.mark.parametrize("level", ["disable", "basic", "all"])
def test_zero_lsb_at_every_optimization_level(sessions, level):
    spec = QdqSpec(k=1024, n=1024, exact_arithmetic=True, per_channel=True, zp_x=-40, zp_w=-25,
                   zp_y=-7)
    for m, expected, actual in run_both(sessions, spec, [5, 32], level):
        np.testing.assert_array_equal(actual, expected, err_msg=f"m={m} level={level}")


def output_scale_for(spec: QdqSpec) -> float:
    """An output scale that spreads the float result over most of the int8 range."""
    w, w_scales, w_zp = make_weights(spec)
    x = make_activations(spec, 128, seed=99).astype(np.float64) - spec.zp_x
    reference = (x * spec.x_scale) @ ((w.astype(np.float64) - w_zp.astype(np.float64)) * w_scales)
    return float(np.abs(reference).max() / 100.0)


@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
@pytest.mark.parametrize("k,n", SHAPES)
def test_at_most_one_lsb_on_random_inputs(sessions, per_channel, k, n, record_property):
    spec = QdqSpec(k=k, n=n, per_channel=per_channel, zp_x=-40, zp_w=-25 if per_channel else 0,
                   zp_y=-7, seed=k * n)
    spec = dataclasses.replace(spec, y_scale=output_scale_for(spec))
    total = one_lsb = 0
    for m, expected, actual in run_both(sessions, spec, ROWS):
        diff = np.abs(actual.astype(np.int32) - expected.astype(np.int32))
        assert diff.max() <= 1, f"m={m}: worst {diff.max()} LSB"
        assert len(np.unique(expected)) > 16, "the output scale saturates everything"
        total += diff.size
        one_lsb += int((diff == 1).sum())
    record_property("one_lsb_values", f"{one_lsb} of {total}")
    print(f"{k}x{n} per_channel={per_channel}: {one_lsb} of {total} values differ by 1 LSB")


def test_float_output_on_random_inputs_matches_to_float_rounding(sessions):
    spec = QdqSpec(k=2048, n=1024, per_channel=True, zp_x=-40, zp_w=-25, with_q=False)
    for m, expected, actual in run_both(sessions, spec, [5, 32]):
        # The CPU EP sums 2048 float products; npuflow sums integers exactly and scales once.
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-3 * np.abs(expected).max())


def test_sim_runs_every_call_on_the_device(sessions, capfd):
    spec = QdqSpec(k=1024, n=1024, exact_arithmetic=True, per_channel=True, zp_x=-40, zp_w=-25,
                   zp_y=-7)
    path = sessions.save(single_group_model(spec))
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options={"device": "sim", "min_rows": "1", "prof": "1"})
    assert claimed(records) == 1
    for m in ROWS:
        x = make_activations(spec, m, seed=m)
        np.testing.assert_array_equal(npu.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0])
    del npu
    profile = ended_session_profile(capfd)
    assert_every_call_on_the_device(profile)
    assert profile.qdq_device_calls == profile.sim_calls == len(ROWS)
    assert profile.submits > 0
    assert re.search(r"modelled RK3588: device [0-9.e+-]+ ms", profile.text)


@pytest.mark.parametrize("fail_every", ["1", "2"])
def test_injected_submit_failures_leave_the_output_equal_to_the_cpu_ep(sessions, capfd,
                                                                         fail_every):
    spec = QdqSpec(k=2048, n=1024, exact_arithmetic=True, per_channel=True, zp_x=-40, zp_w=-25,
                   zp_y=-7)
    options = {"device": "sim", "min_rows": "1", "sim_fail_every": fail_every, "prof": "1"}
    path = sessions.save(single_group_model(spec))
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options=options)
    assert claimed(records) == 1
    for m in ROWS:
        x = make_activations(spec, m, seed=m)
        expected = cpu.run(None, {"x": x})[0]
        np.testing.assert_array_equal(npu.run(None, {"x": x})[0], expected, err_msg=f"m={m}")
        assert len(np.unique(expected)) > 8
    del npu
    profile = ended_session_profile(capfd)
    failed = len(ROWS) // int(fail_every)
    assert profile.failed_submits == profile.qdq_fallbacks == failed
    assert profile.qdq_device_calls == len(ROWS) - failed


def test_rocket_device_fails_ep_creation_without_a_board(sessions, capfd):
    # As with a bad knob, the EP is not created; the Python binding reports the error and retries
    # on the CPU EP alone, so nothing is claimed. (The C++ CLI fails outright: test_cli.py.)
    path = sessions.save(single_group_model(QdqSpec(k=64, n=32)))
    _, records = sessions.npuflow(path, options={"device": "rocket"})
    assert records == []
    out = capfd.readouterr()
    module = BUILD_DIR / "lib" / "libnpuflow-device-rocket.so"
    missing = ("cannot open librocketnpu 'librocketnpu.so.0'" if module.exists()
               else "cannot load device module")
    assert f"device=rocket: {missing}" in out.out + out.err
