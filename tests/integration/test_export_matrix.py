"""The export matrix of issue #8, a fixed slice: vision encoders exported from real
`transformers` classes (random weights) by the TorchScript exporter at opsets 14, 17 and 18 with
static and dynamic shapes and by the dynamo exporter, eager and sdpa attention, with the pinned
4.x and a current 5.x transformers, at random sizes. Each must be claimed (whole, when it is an
encoder-only export) and match the CPU EP within the gates on host and on sim, with the sim
profile showing that every call ran on the device.

The models are generated into ~/.cache/npuflow/matrix-<key> on first use (in the PyTorch fixtures
venvs, created by tools/fixtures/venv.sh if missing) and never committed; `make fixtures-matrix`
runs any other slice or size."""
from __future__ import annotations

import sys
from collections import Counter

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools" / "fixtures"))
import matrix_check  # noqa: E402
import matrix_spec  # noqa: E402

SEED = 53  # chosen so that the slice has every exporter setting at least five times
# The TorchScript exporter has no symbolic for the antialiased bicubic interpolation with which
# Dinov2WithRegistersModel resizes its position embeddings: no such export exists to claim.
EXPORTER_CANNOT = {("dinov2_registers", "torchscript")}


PER_FAMILY = ({family: 8 for family in matrix_spec.VISION_FAMILIES} | {"dinov2_registers": 4} |
              {family: 8 for family in matrix_spec.TEXT_FAMILIES})


def first_of_each_family() -> list[int]:
    """The first indices of SEED of each family, leaving out what the exporter cannot export."""
    picked = {family: [] for family in PER_FAMILY}
    for index in range(2000):
        entry = matrix_spec.spec(SEED, index)
        family = entry["family"]
        if (family in picked and len(picked[family]) < PER_FAMILY[family] and
                (family, entry["exporter"]) not in EXPORTER_CANNOT):
            picked[family].append(index)
    return sorted(i for indices in picked.values() for i in indices)


SLICE = first_of_each_family()


def label(index: int) -> str:
    s = matrix_spec.spec(SEED, index)
    return (f"{s['name']}-{s['family']}-{s['label']}-{s['version']}-{s['attn_implementation']}"
            f"{'-encoder' if s['encoder_only'] else ''}")


@pytest.fixture(scope="session")
def matrix():
    directory = matrix_spec.cache_dir()
    records = matrix_spec.generate(SEED, SLICE, directory)
    return directory, {r["index"]: r for r in records}


def test_the_slice_covers_every_axis(matrix):
    _, records = matrix
    failed = {i: r.get("error", "")[:200] for i, r in records.items() if r["status"] != "exported"}
    assert not failed, failed
    assert len(records) >= 40
    values = lambda key: Counter(r[key] for r in records.values())  # noqa: E731
    assert set(values("family")) == set(matrix_spec.FAMILIES)
    assert set(values("label")) == {matrix_spec.exporter_label(*e) for e in matrix_spec.EXPORTERS}
    assert set(values("version")) == set(matrix_spec.VERSIONS)
    assert set(values("attn_implementation")) == {"eager", "sdpa"}
    assert set(values("encoder_only")) == {False, True}
    assert len(set(values("transformers"))) == 2  # both venvs really exported
    heads = {r["config"]["num_attention_heads"] for r in records.values()}
    assert any(h % 2 for h in heads) and max(heads) > 4
    assert any(r["tokens"] < r["config"]["head_dim"] for r in records.values())
    # Models whose head_dim flash attention takes (% 32) also run with attention on the device.
    assert sum(r["config"]["head_dim"] % 32 == 0 for r in records.values()) >= 10


@pytest.mark.parametrize("index", SLICE, ids=label)
def test_generated_model_is_claimed_whole_and_within_the_gates(matrix, npuflow_devices, tmp_path,
                                                                index):
    directory, records = matrix
    record = records[index]
    assert record["status"] == "exported", record.get("error")
    result = matrix_check.check(record, directory, npuflow_devices, tmp_path)
    failures = result["failures"]
    assert not failures, (str(directory / record["file"]), failures)
    assert result["claims"][0]["family"] in {record["family"],
                                             record["family"].replace("_registers", "")}
    # Vision encoders are claimed from the pixels (TorchScript's dynamic DINOv2 too: its position
    # embedding, interpolated to the grid it already has, is folded into a constant).
    if record["family"] not in matrix_check.TEXT_FAMILIES:
        assert result["claims"][0]["from_pixels"], result["claims"][0]["note"]
    if record["encoder_only"]:
        assert result["whole"]

