"""A fixed, seeded batch of the graph fuzzer (about two minutes on a 2-core machine): every
mutant the CPU EP accepts is refused by npuflow (and runs as on the CPU EP) or claimed within
the gate, on host and on sim. `make fuzz N=10000` runs any size with a fresh seed."""
from __future__ import annotations

import os
from collections import Counter

from fuzz import DEVICES, failures_of, run, summary
from fuzz_oracle import MATCHING, REFUSED

BATCH_SEED = 20261201
BATCH_COUNT = int(os.environ.get("FUZZ_BATCH_COUNT", "900"))


def test_fixed_batch_never_crashes_hangs_or_lies(tmp_path):
    records = run(BATCH_SEED, list(range(BATCH_COUNT)), tmp_path, jobs=2)
    text = summary(records, BATCH_SEED, 0)
    print(text)
    failing = [(r["id"], d, o["class"]) for r in records for d, o in failures_of(r)]
    assert not failing, f"rerun one with `make fuzz SEED={BATCH_SEED} ONLY=<id>`:\n{text}"
    # The batch must exercise both sides of the contract, or it proves nothing.
    accepted = [r for r in records if "devices" in r]
    assert len(accepted) >= BATCH_COUNT // 3, text
    for device in DEVICES:
        classes = Counter(r["devices"][device]["class"] for r in accepted)
        assert classes[REFUSED] > 0 and classes[MATCHING] > 0, (device, classes)
        kinds = {k for r in accepted for k in r["devices"][device].get("kinds", [])}
        # conv_transpose and conv: the Depth Anything seeds' DPT head (and patch embeddings of
        # encoders a mutation made refused).
        assert kinds == {"qdq_matmul", "vision_encoder", "conv_transpose", "conv"}, kinds
    reasons = {x for r in accepted for o in r["devices"].values() for x in o.get("reasons", [])}
    assert len(reasons) >= 8, reasons
