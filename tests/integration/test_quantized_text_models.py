"""The real dynamically quantized sentence encoders (the langchain4j all-MiniLM-L6-v2-q and
e5-small-v2-q jars, fetched by tools/setup.sh): every MatMulInteger group is claimed as its own
fused node, and the sentence embeddings agree with the CPU EP running the same model.

The groups are exact (test_dynamic_int8.py); what differs from the CPU EP is the CPU EP itself,
whose u8s8 sums saturate on a machine without VNNI: the embeddings' cosine is the gate, and the
share of bit-identical hidden values is printed."""
from __future__ import annotations

import onnx
import pytest

from conftest import ROOT, claimed
from gates import ended_session_profile
from test_text_encoders import SENTENCES, mean_pool
from text_fixtures import tokenized

MODELS = ROOT / "third_party" / "text-models-q"
STEMS = ["all-minilm-l6-v2-q", "e5-small-v2-q"]


def feed(stem: str) -> dict:
    return tokenized(MODELS / f"{stem}-tokenizer.json", SENTENCES)


def matmul_integer_count(path: str) -> int:
    return sum(n.op_type == "MatMulInteger" for n in onnx.load(path).graph.node)


def compare(stem, ref, got, mask):
    cosines = (mean_pool(ref, mask) * mean_pool(got, mask)).sum(axis=1)
    same = float((ref == got).mean())
    print(f"{stem}: sentence embedding cosine min {cosines.min():.9f}, "
          f"{same:.1%} of hidden values bit-identical to the CPU EP")
    assert cosines.min() >= 0.9999, f"worst sentence cosine {cosines.min():.9f}"


@pytest.mark.parametrize("level", ["disable", "all"])
@pytest.mark.parametrize("stem", STEMS)
def test_every_matmul_integer_group_is_claimed(sessions, stem, level):
    path = str(MODELS / f"{stem}.onnx")
    npu, records = sessions.npuflow(path, level=level, options={"device": "host"})
    integer = [r for r in records if r["matcher"] == "integer"]
    groups = matmul_integer_count(path)
    assert groups == {"all-minilm-l6-v2-q": 36, "e5-small-v2-q": 72}[stem]
    assert claimed(integer) == groups, integer
    inputs = feed(stem)
    ref = sessions.cpu(path, level=level).run(None, inputs)[0]
    compare(stem, ref, npu.run(None, inputs)[0], inputs["attention_mask"])


def test_minilm_q_on_the_simulator(sessions, capfd):
    stem = "all-minilm-l6-v2-q"
    path = str(MODELS / f"{stem}.onnx")
    npu, records = sessions.npuflow(path, level="all",
                                    options={"device": "sim", "min_rows": "1", "prof": "1"})
    assert claimed([r for r in records if r["matcher"] == "integer"]) == 36
    inputs = feed(stem)
    ref = sessions.cpu(path, level="all").run(None, inputs)[0]
    compare(stem, ref, npu.run(None, inputs)[0], inputs["attention_mask"])
    del npu
    profile = ended_session_profile(capfd)
    assert profile.sim_calls == 36 and profile.refused == 0
