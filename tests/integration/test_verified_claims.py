"""Verified claims (`verify=1`): the first device run of each claimed node is checked against the
host reference, and a node that is wrong is disabled and runs the reference from then on.

The wrong device is the simulator with `sim_corrupt_every=1`: every call succeeds with its first
output element far off. Each test first shows that the corruption reaches the output when nothing
checks it, so a verifier that let it through would fail these tests."""
from __future__ import annotations

import re
import threading

import numpy as np
import onnx
import pytest

from conftest import claimed
from gates import BARS, agreement, assert_matches, ended_session_profile
from qdq_models import QdqSpec, make_activations, single_group_model
from vision_fixtures import FIXTURES, pixels, vision_claims

SIM = {"device": "sim", "min_rows": "1", "prof": "1"}
CORRUPT = {"sim_corrupt_every": "1"}
VERIFY = {"verify": "1"}
VERIFY_SUMMARY = re.compile(r"verify summary: (\d+) claimed nodes checked against the host "
                            r"reference, (\d+) disabled, (\d+) later runs on the host reference")
QDQ_SPEC = QdqSpec(k=1024, n=512, exact_arithmetic=True, per_channel=True, zp_x=-40, zp_w=-25,
                   zp_y=-7)
ROWS = [32, 5, 128, 64]  # 5: padded to the RK3588's M % 4 on the device (min_rows=1)


def verify_summary(text: str) -> tuple[int, int, int]:
    """(nodes checked, disabled, later runs on the host reference) from the ended session."""
    found = VERIFY_SUMMARY.findall(text)
    assert len(found) == 1, f"expected one verify summary in:\n{text[-3000:]}"
    return tuple(map(int, found[0]))


def matmul_output(path: str) -> str:
    [node] = [n for n in onnx.load(path).graph.node if n.op_type == "MatMul"]
    return node.output[0]


def qdq_runs(sessions, options):
    """Runs the QDQ group over ROWS on sim with `options`; returns (CPU EP, npuflow) outputs and
    the path. The npuflow session has ended when this returns (its profile is printed)."""
    path = sessions.save(single_group_model(QDQ_SPEC))
    cpu = sessions.cpu(path)
    npu, records = sessions.npuflow(path, options={**SIM, **options})
    assert claimed(records) == 1
    results = []
    for m in ROWS:
        x = make_activations(QDQ_SPEC, m, seed=m)
        results.append((cpu.run(None, {"x": x})[0], npu.run(None, {"x": x})[0]))
    del npu
    return results, path


def test_qdq_corruption_reaches_the_output_without_verify(sessions, capfd):
    results, _ = qdq_runs(sessions, CORRUPT)
    for expected, actual in results:
        assert not np.array_equal(actual, expected), "the corrupted device call left no trace"
    profile = ended_session_profile(capfd)
    assert profile.qdq_device_calls == len(ROWS)
    assert "npu_verify" not in profile.text and "verify summary" not in profile.text


def test_qdq_verify_disables_the_corrupted_node_and_keeps_outputs_exact(sessions, capfd):
    results, path = qdq_runs(sessions, {**CORRUPT, **VERIFY})
    for expected, actual in results:
        np.testing.assert_array_equal(actual, expected)  # 0 LSB on every run, the first included
        assert len(np.unique(expected)) > 8
    profile = ended_session_profile(capfd)
    node = matmul_output(path)
    warnings = re.findall(r"npu_verify_failed .*", profile.text)
    assert len(warnings) == 1, profile.text[-3000:]
    assert f"QDQ MatMul '{node}'" in warnings[0]
    assert re.search(r"max \d+ LSB, 1 of \d+ values differ; gate: bit-exact", warnings[0])
    # The device ran the first call only; every later run was the host reference's.
    assert profile.sim_calls == profile.qdq_device_calls == 1
    assert verify_summary(profile.text) == (1, 1, len(ROWS) - 1)
    assert re.search(rf"verify: QDQ MatMul '{re.escape(node)}' .*disabled .*"
                     rf"{len(ROWS) - 1} later runs on the host reference", profile.text)


def test_qdq_verify_without_corruption_disables_nothing(sessions, capfd):
    results, path = qdq_runs(sessions, VERIFY)
    for expected, actual in results:
        np.testing.assert_array_equal(actual, expected)
    profile = ended_session_profile(capfd)
    assert "npu_verify_failed" not in profile.text
    assert profile.sim_calls == profile.qdq_device_calls == len(ROWS)
    assert verify_summary(profile.text) == (1, 0, 0)
    assert f"verify: QDQ MatMul '{matmul_output(path)}' (fused node" in profile.text
    assert re.search(r"verified \(max 0 LSB, 0 of \d+ values differ", profile.text)


def test_qdq_check_waits_for_a_run_that_reaches_the_device(sessions, capfd):
    # Below min_rows the group runs the host loop: that run proves nothing about the device, so
    # the check happens on the first run with enough rows.
    path = sessions.save(single_group_model(QDQ_SPEC))
    cpu = sessions.cpu(path)
    npu, _ = sessions.npuflow(path, options={**SIM, **CORRUPT, **VERIFY, "min_rows": "16"})
    for m in [5, 3, 32, 64]:
        x = make_activations(QDQ_SPEC, m, seed=m)
        np.testing.assert_array_equal(npu.run(None, {"x": x})[0], cpu.run(None, {"x": x})[0])
    del npu
    profile = ended_session_profile(capfd)
    assert profile.qdq_host_row_calls == 2 and profile.qdq_device_calls == 1
    assert verify_summary(profile.text) == (1, 1, 1)


def test_qdq_concurrent_first_runs_check_once_and_all_match(sessions, capfd):
    path = sessions.save(single_group_model(QDQ_SPEC))
    cpu = sessions.cpu(path)
    npu, _ = sessions.npuflow(path, options={**SIM, **CORRUPT, **VERIFY})
    feeds = [make_activations(QDQ_SPEC, 32 + 4 * t, seed=t) for t in range(4)]
    expected = [cpu.run(None, {"x": x})[0] for x in feeds]
    mismatches = []

    def worker(t):
        for _ in range(10):
            if not np.array_equal(npu.run(None, {"x": feeds[t]})[0], expected[t]):
                mismatches.append(t)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    del npu
    profile = ended_session_profile(capfd)
    assert mismatches == []
    assert profile.text.count("npu_verify_failed") == 1
    assert profile.sim_calls == 1
    assert verify_summary(profile.text) == (1, 1, 4 * 10 - 1)


def test_verify_on_the_host_device_checks_nothing(sessions, capfd):
    path = sessions.save(single_group_model(QDQ_SPEC))
    npu, _ = sessions.npuflow(path, options={"device": "host", "log": "info", **VERIFY})
    npu.run(None, {"x": make_activations(QDQ_SPEC, 32)})
    assert "verify=1 (nothing to check on the host)" in capfd.readouterr().err


ENCODER = "clip_dynamo.onnx"


def encoder_runs(sessions, options, seeds=(0, 1, 2)):
    """The encoder fixture on sim with `options` for a few seeded images: [(CPU EP, npuflow)
    outputs per image]; the npuflow session has ended when this returns."""
    path = str(FIXTURES / ENCODER)
    cpu = sessions.cpu(path, level="all")
    npu, records = sessions.npuflow(path, level="all", options={**SIM, **options})
    assert len(vision_claims(records)) == 1
    results = []
    for seed in seeds:
        feed = pixels(path, seed=seed)
        results.append(list(zip(cpu.run(None, feed), npu.run(None, feed))))
    del npu
    return results


def test_encoder_corruption_reaches_the_output_without_verify(sessions, capfd):
    min_cosine, max_rel_l2 = BARS["sim"]
    for outputs in encoder_runs(sessions, CORRUPT):
        measured = [agreement(ref, got) for ref, got in outputs]
        assert any(m.cosine < min_cosine or m.rel_l2 > max_rel_l2 for m in measured), measured
    profile = ended_session_profile(capfd)
    assert "npu_verify" not in profile.text


def test_encoder_verify_disables_the_corrupted_node_and_matches(sessions, capfd):
    for image, outputs in enumerate(encoder_runs(sessions, {**CORRUPT, **VERIFY})):
        for i, (ref, got) in enumerate(outputs):
            assert_matches(ref, got, "sim", f"image {image} output {i}")
    profile = ended_session_profile(capfd)
    warnings = re.findall(r"npu_verify_failed .*", profile.text)
    assert len(warnings) == 1, profile.text[-3000:]
    assert "clip encoder (2 layers, fused node" in warnings[0]
    assert re.search(r"cosine -?[0-9.]+, relL2 [0-9.e+-]+; gate: cosine >= 0.9999", warnings[0])
    # One image's projections ran on the device; the two later images ran on the host.
    assert profile.sim_calls > 0
    assert f"corrupted {profile.sim_calls} call outputs" in profile.text
    assert verify_summary(profile.text) == (1, 1, 2)
    assert re.search(r"verify: clip encoder .* disabled .* 2 later runs on the host reference",
                     profile.text)


def test_encoder_verify_without_corruption_disables_nothing(sessions, capfd):
    for outputs in encoder_runs(sessions, VERIFY):
        for ref, got in outputs:
            assert_matches(ref, got, "sim")
    profile = ended_session_profile(capfd)
    assert "npu_verify_failed" not in profile.text
    assert verify_summary(profile.text) == (1, 0, 0)
    assert re.search(r"verify: clip encoder .* verified \(cosine 0\.9999", profile.text)
    # Every image ran on the device: three images' worth of calls, none refused.
    assert profile.sim_calls % 3 == 0 and profile.sim_calls > 0 and profile.refused == 0


@pytest.mark.parametrize("model", ["depth_anything_dynamo.onnx"])
def test_a_multi_exit_encoder_is_checked_over_every_output(sessions, capfd, model):
    # Depth Anything's claim has four exits (its neck taps); all of them are compared and all of
    # them come from the reference once the node is disabled. Its head's ConvTranspose claims are
    # verified on their own (test_conv_transpose.py): off here, so the summary is the encoder's.
    path = str(FIXTURES / model)
    cpu = sessions.cpu(path, level="all")
    npu, records = sessions.npuflow(path, level="all",
                                    options={**SIM, **CORRUPT, **VERIFY, "conv_transpose": "0",
                                             "conv": "0"})
    assert len(vision_claims(records)) == 1
    for seed in (0, 1):
        feed = pixels(path, seed=seed)
        for ref, got in zip(cpu.run(None, feed), npu.run(None, feed)):
            assert_matches(ref, got, "sim", f"seed {seed}")
    del npu
    profile = ended_session_profile(capfd)
    assert profile.text.count("npu_verify_failed") == 1
    assert verify_summary(profile.text) == (1, 1, 1)
