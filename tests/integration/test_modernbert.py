"""ModernBERT (issue #8, item 4): transformers' ModernBertModel at random weights, exported with
dynamic axes by the export-matrix generator (tools/fixtures), run on batches of right-padded
sequences of different lengths, longer than the sliding window. The claim covers every layer:
rotary q/k, alternating global and sliding-window attention (one runtime bias each), GeGLU,
no biases, pre-norm with the first layer's attention norm absent. Every token of every
sequence is gated against the CPU EP on host and on sim."""
from __future__ import annotations

import numpy as np
import pytest

import sys

from conftest import ROOT
from gates import agreement, assert_every_call_on_the_device, assert_matches, ended_session_profile
from test_text_encoders import TOKEN_BARS
from vision_fixtures import vision_claims, vision_refusals

sys.path.insert(0, str(ROOT / "tools" / "fixtures"))
import matrix_spec  # noqa: E402

SEED = 53
# Dynamic ModernBERT exports of SEED: 4.x SDPA, 5.x eager, 5.x SDPA (local windows 4, 36, 16).
INDICES = [127, 276, 393]
LENGTHS = [57, 40, 23, 9]


@pytest.fixture(scope="module")
def models():
    records = matrix_spec.generate(SEED, INDICES)
    for record in records:
        assert record["family"] == "modernbert" and record["dynamic"], record["name"]
        assert record["status"] == "exported", record.get("error")
        # Windows shorter than the longest sequence: a plan adding the global bias in the
        # sliding-window layers would fail the gates.
        assert record["config"]["local_attention"] < max(LENGTHS)
        assert record["config"]["global_attn_every_n_layers"] > 1
        assert record["config"]["num_hidden_layers"] > 1
    return {r["index"]: (str(matrix_spec.cache_dir() / r["file"]), r) for r in records}


def padded_batch(record) -> dict:
    rng = np.random.default_rng(record["index"])
    vocab = record["config"]["vocab_size"]
    ids = np.zeros((len(LENGTHS), max(LENGTHS)), np.int64)
    mask = np.zeros_like(ids)
    for row, length in enumerate(LENGTHS):
        ids[row, :length] = rng.integers(3, vocab, length)
        mask[row, :length] = 1
    return {"input_ids": ids, "attention_mask": mask}


def check_every_token(ref, got, mask, device):
    assert_matches(ref, got, device, "last_hidden_state")
    for row, length in enumerate(mask.sum(axis=1)):
        worst = min(agreement(r, g).cosine for r, g in zip(ref[row, :length], got[row, :length]))
        assert worst >= TOKEN_BARS[device], f"sequence {row}: worst token cosine {worst:.9f}"


def claim_of(records, record):
    claims = vision_claims(records)
    assert len(claims) == 1, vision_refusals(records)
    claim = claims[0]
    layers = record["config"]["num_hidden_layers"]
    assert (claim["family"], claim["layers"], claim["hidden"], claim["heads"]) == (
        "modernbert", layers, record["config"]["hidden_size"],
        record["config"]["num_attention_heads"])
    assert claim["rotary_layers"] == layers and claim["gated_mlp_layers"] == layers
    # Sliding-window layers add their own bias, global layers theirs.
    every = record["config"]["global_attn_every_n_layers"]
    assert claim["attention_biases"] == (1 if every == 1 or layers == 1 else 2)
    return claim


@pytest.mark.parametrize("level", ["disable", "all"])
@pytest.mark.parametrize("index", INDICES)
def test_modernbert_padded_batch_on_host(sessions, models, index, level):
    path, record = models[index]
    npu, records = sessions.npuflow(path, level=level)
    claim_of(records, record)
    feed = padded_batch(record)
    [ref] = sessions.cpu(path, level=level).run(None, feed)
    [got] = npu.run(None, feed)
    check_every_token(ref, got, feed["attention_mask"], "host")


@pytest.mark.parametrize("index", INDICES)
def test_modernbert_padded_batch_on_the_simulator(sessions, models, index, capfd):
    path, record = models[index]
    npu, records = sessions.npuflow(path, level="all", options={"device": "sim", "prof": "1"})
    claim_of(records, record)
    feed = padded_batch(record)
    [ref] = sessions.cpu(path, level="all").run(None, feed)
    [got] = npu.run(None, feed)
    check_every_token(ref, got, feed["attention_mask"], "sim")
    del npu
    assert_every_call_on_the_device(ended_session_profile(capfd))
