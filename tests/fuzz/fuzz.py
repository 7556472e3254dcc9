"""Structure-aware ONNX graph fuzzer for npuflow (issue #9): seeded mutants of the committed
fixtures and generated QDQ models, each run on the CPU EP and, in a child process, with npuflow
on device=host and device=sim. A mutant the CPU EP accepts must be refused by npuflow (and give
the CPU EP's outputs exactly) or give outputs within the claim's gate; it must never crash, hang,
fail the session or change an output's shape.

    python tests/fuzz/fuzz.py --count 10000 [--seed S] [--jobs 2] [--minimize 3]

Mutant i of seed S is the same on every machine: --seed S --only I reruns one.
"""
from __future__ import annotations

import argparse
import json
import random
import secrets
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
from onnx import TensorProto

from fuzz_minimize import minimize, save
from fuzz_mutations import mutate
from fuzz_oracle import (CRASH, ERROR, FAILURES, HANG, ILL_CONDITIONED, INVALID, MATCHING,
                         MISMATCH, REFUSED, SHAPE, UNJUDGED, UNREPRODUCIBLE)
from fuzz_runner import run_jobs
from fuzz_seeds import ROOT, all_seeds, fixture_path

REGRESSIONS = Path(__file__).resolve().parent / "regressions"
DEVICES = ("host", "sim")
LEVELS = ("disable", "basic", "all")
HOST_KERNELS = ("auto", "portable")  # the host_kernels knob: AVX2 where present, or arm64's loops
MAX_REGRESSION_BYTES = 256 * 1024


def feed_spec(model: onnx.ModelProto, dim_values: dict) -> list:
    """[name, elem type, shape] of the graph's inputs, symbolic dims set from dim_values."""
    inits = {t.name for t in model.graph.initializer}
    spec = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else dim_values.get(d.dim_param, 1)
                 for d in t.shape.dim]
        spec.append([vi.name, t.elem_type or TensorProto.FLOAT, shape])
    return spec


def make_mutant(run_seed: int, index: int, out_dir: Path) -> dict:
    """Mutant index of run_seed: its model file and the child's job for it."""
    rng = random.Random(f"{run_seed}:{index}")
    seeds = all_seeds()
    family = rng.choice(["qdq", "vision"])
    seed = rng.choice([s for s in seeds if s.name.startswith("qdq") == (family == "qdq")])
    model = seed.model()
    mutations = mutate(model, rng, rng.choice([1, 1, 2, 3]))
    path = out_dir / f"{index}.onnx"
    onnx.save(model, str(path))
    # A generator of its own, so that adding the draw left every mutant of a seed as it was.
    kernels = random.Random(f"{run_seed}:{index}:host_kernels").choice(HOST_KERNELS)
    return {"id": index, "model": str(path), "seed_model": seed.name, "mutations": mutations,
            "host_kernels": kernels,
            "level": rng.choice(LEVELS), "feeds": feed_spec(seed.model(), dict(seed.dim_values)),
            "feed_seed": rng.randrange(2**31), "feed_kind": rng.choices(
                ["normal", "special", "large", "zeros"], [8, 1, 1, 1])[0], "run_on": list(DEVICES)}


def run(run_seed: int, indices: list[int], out_dir: Path, jobs: int, chunk: int = 16,
        hang_s: float = 120.0, progress=None) -> list[dict]:
    """Generates and runs the mutants, `jobs` children at a time; returns one record per mutant
    (its job and the child's result). Models of mutants that did not fail are deleted."""
    mutants_dir = out_dir / "mutants"
    mutants_dir.mkdir(parents=True, exist_ok=True)
    chunks = [indices[i:i + chunk] for i in range(0, len(indices), chunk)]

    def one_chunk(ids):
        work = out_dir / f"work-{ids[0]}"
        batch = [{"id": i, "run_seed": run_seed, "mutants_dir": str(mutants_dir),
                  "report_dir": str(work / "reports")} for i in ids]
        (work / "reports").mkdir(parents=True, exist_ok=True)
        results = run_jobs(batch, work, hang_s)
        records = []
        for job, result in zip(batch, results):
            made = mutants_dir / f"{job['id']}.made.json"
            if made.exists():  # the child's note of what it generated (it may have died since)
                result = {**json.loads(made.read_text()), **result}
                made.unlink()
            record = {**job, **result}
            model = Path(record.get("model", mutants_dir / f"{job['id']}.onnx"))
            if failures_of(record):  # the model and its record stay for a rerun (--only)
                model.with_suffix(".json").write_text(json.dumps(record, indent=1))
            else:
                model.unlink(missing_ok=True)
                model.with_suffix(".json").unlink(missing_ok=True)  # from an earlier run
            records.append(record)
        if progress:
            progress(records)
        return records

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return [r for records in pool.map(one_chunk, chunks) for r in records]


def failures_of(record: dict) -> list[tuple[str, dict]]:
    return [(d, o) for d, o in record.get("devices", {}).items() if o["class"] in FAILURES]


def summary(records: list[dict], run_seed: int, seconds: float) -> str:
    accepted = [r for r in records if "devices" in r]
    lines = [f"fuzz seed {run_seed} (SEED={run_seed} to reproduce): {len(records)} mutants in "
             f"{seconds:.0f} s",
             f"  mutants                     {len(records)}",
             f"  accepted by the CPU EP      {len(accepted)}"]
    classes = [("refused", REFUSED, None), ("claimed-and-matching", MATCHING, None),
               ("  of which judged against", MATCHING, "disable"),
               ("    the unoptimized CPU EP", MATCHING, "disable"),
               ("    the CPU EP at basic", MATCHING, "basic"),
               ("    the claims' exits", MATCHING, "exits"),
               ("    a float64 evaluation", MATCHING, "float64"),
               ("    fp16 GEMM operands (sim)", MATCHING, "fp16"),
               ("    fp16's own error (sim)", MATCHING, "fp16-error"),
               ("ill-conditioned", ILL_CONDITIONED, None),
               ("unjudged (reference slow)", UNJUDGED, None),
               ("invalid as written", INVALID, None),
               ("CPU EP unreproducible", UNREPRODUCIBLE, None),
               ("mismatches", MISMATCH, None), ("different shapes", SHAPE, None),
               ("session errors", ERROR, None), ("crashes", CRASH, None), ("hangs", HANG, None)]
    lines.append(f"  {'':28}" + "".join(f"{d:>8}" for d in DEVICES))
    for label, cls, reference in classes:
        if label.strip().startswith("of which"):
            lines.append(f"  {label}")
            continue
        counts = [sum(1 for r in accepted if r["devices"].get(d, {}).get("class") == cls
                      and (reference is None or r["devices"][d].get("reference") == reference))
                  for d in DEVICES]
        lines.append(f"  {label:28}" + "".join(f"{c:>8}" for c in counts))
    drawn = Counter(r.get("host_kernels", "auto") for r in accepted)
    lines.append(f"  {'host kernels (accepted)':28}" +
                 ", ".join(f"{k} {drawn[k]}" for k in HOST_KERNELS))
    kinds = Counter(k for r in accepted for o in r["devices"].values() for k in o.get("kinds", []))
    lines.append("  claims by kind: " + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                                         or "none"))
    reasons = Counter(x for r in accepted for o in r["devices"].values()
                      for x in o.get("reasons", []) + o.get("device_reasons", []))
    lines.append(f"  distinct refusal reasons exercised: {len(reasons)}")
    lines += [f"    {reason:48} {count}" for reason, count in sorted(reasons.items())]
    lines.append("    (matcher:reason from the claim reports; device: from npuflow's warnings)")
    generator_deaths = sum(1 for r in records if "generator_error" in r)
    if generator_deaths:
        lines.append(f"  ONNX died building the mutant (shape inference; no mutant): "
                     f"{generator_deaths}")
    cpu_deaths = sum(1 for r in records if "CPU EP:" in r.get("cpu_error", ""))
    if cpu_deaths:
        lines.append(f"  ONNX Runtime died on the CPU EP alone (not counted as accepted): "
                     f"{cpu_deaths}")
    for r in records:
        for device, o in failures_of(r):
            lines.append(f"  FAIL {o['class']} on {device}: mutant {r['id']} of "
                         f"{r.get('seed_model')} "
                         f"(level {r['level']}, feeds {r['feed_kind']}, host kernels "
                         f"{r.get('host_kernels', 'auto')}): {o['detail'][:400]}")
            lines += [f"      {m}" for m in r["mutations"]]
    return "\n".join(lines)


def job_still_fails(job: dict, device: str, cls: str, work: Path):
    """A predicate for the minimizer: the model fails on device with the same class."""
    counter = [0]
    work.mkdir(parents=True, exist_ok=True)

    def check(model: onnx.ModelProto) -> bool:
        counter[0] += 1
        path = work / f"candidate-{counter[0]}.onnx"
        onnx.save(model, str(path))
        trial = {**job, "id": 0, "model": str(path), "run_on": [device],
                 "report_dir": str(work / "reports")}
        (work / "reports").mkdir(parents=True, exist_ok=True)
        [result] = run_jobs([trial], work / "run")
        path.unlink()
        return result.get("devices", {}).get(device, {}).get("class") == cls

    return check


def strip_unchanged(model: onnx.ModelProto, base: onnx.ModelProto) -> onnx.ModelProto:
    """The model without the initializers it shares, byte for byte, with base (a committed
    fixture): what a regression stores; with_base() puts them back."""
    kept = {t.name: t.SerializeToString() for t in base.graph.initializer}
    delta = onnx.ModelProto()
    delta.CopyFrom(model)
    inits = [t for t in delta.graph.initializer if kept.get(t.name) != t.SerializeToString()]
    del delta.graph.initializer[:]
    delta.graph.initializer.extend(inits)
    for node in delta.graph.node:  # the exporter's provenance notes: no part of the semantics
        del node.metadata_props[:]
        node.doc_string = ""
    return delta


def with_base(delta: onnx.ModelProto, base: onnx.ModelProto) -> onnx.ModelProto:
    """The full model of a stored delta: initializers its nodes read and it lacks come from base."""
    model = onnx.ModelProto()
    model.CopyFrom(delta)
    present = {t.name for t in model.graph.initializer}
    read = {x for n in model.graph.node for x in n.input}
    model.graph.initializer.extend(t for t in base.graph.initializer
                                   if t.name in read and t.name not in present)
    return model


def save_regression(record: dict, device: str, outcome: dict, model: onnx.ModelProto,
                    run_seed) -> Path | None:
    meta = {k: record[k] for k in ("seed_model", "mutations", "level", "feeds", "feed_seed",
                                   "feed_kind")}
    meta["host_kernels"] = record.get("host_kernels", "auto")
    fixture = fixture_path(f"{record['seed_model']}.onnx")
    if model.ByteSize() > MAX_REGRESSION_BYTES // 4 and fixture.exists():
        model = strip_unchanged(model, onnx.load(str(fixture)))
        meta["base"] = fixture.name
    if model.ByteSize() > MAX_REGRESSION_BYTES:
        print(f"  not saved: the minimized model has {model.ByteSize()} bytes "
              f"(more than {MAX_REGRESSION_BYTES})")
        return None
    stem = f"{outcome['class']}-{device}-{record['seed_model']}-{run_seed}-{record['id']}"
    path = REGRESSIONS / f"{stem}.onnx"
    save(model, path)
    meta.update({"device": device, "found": f"{outcome['class']}: {outcome['detail'][:500]}",
                 "reproduce": f"make fuzz SEED={run_seed} ONLY={record['id']}"})
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return path


def reduce(record: dict, device: str, outcome: dict, out: Path, budget_s: float,
           run_seed) -> None:
    """Minimizes one failing mutant and saves it as a regression."""
    print(f"minimizing mutant {record['id']} ({outcome['class']} on {device})", flush=True)
    work = out / f"minimize-{record['id']}-{device}"
    smallest = minimize(onnx.load(record["model"]),
                        job_still_fails(record, device, outcome["class"], work), budget_s)
    saved = save_regression(record, device, outcome, smallest, run_seed)
    if saved:
        print(f"  saved {saved.relative_to(ROOT)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--only", type=int, default=None, help="run mutant ONLY of the seed")
    parser.add_argument("--jobs", type=int, default=1, help="child processes at a time")
    parser.add_argument("--minimize", type=int, default=3,
                        help="failures to minimize and save under tests/fuzz/regressions")
    parser.add_argument("--minimize-budget", type=float, default=600.0, help="seconds each")
    parser.add_argument("--hang", type=float, default=120.0, help="seconds without progress")
    parser.add_argument("--out", default=str(ROOT / "build" / "fuzz"))
    parser.add_argument("--report", default=None, help="also write the records as JSON lines")
    parser.add_argument("--reduce", default=None, metavar="RECORD",
                        help="minimize the failing mutant of RECORD (the .json beside a failing "
                             "mutant's model) and save it under tests/fuzz/regressions")
    args = parser.parse_args(argv)
    if args.reduce:
        record = json.loads(Path(args.reduce).read_text())
        record["model"] = str(Path(record["model"]).resolve())
        for device, outcome in failures_of(record):
            reduce(record, device, outcome, Path(args.reduce).parent, args.minimize_budget,
                   record.get("run_seed", "reduced"))
            break
        return 0
    run_seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    print(f"fuzz seed {run_seed} (SEED={run_seed} to reproduce)", flush=True)
    out = Path(args.out).resolve() / (str(run_seed) if args.only is None else f"{run_seed}-only-{args.only}")
    indices = [args.only] if args.only is not None else list(range(args.count))
    started = time.monotonic()
    done = [0]

    def progress(records):
        done[0] += len(records)
        for r in records:
            for device, o in failures_of(r):
                print(f"  mutant {r['id']}: {o['class']} on {device}: {o['detail'][:200]}",
                      flush=True)
        if done[0] % 200 < len(records):
            print(f"  {done[0]} of {len(indices)} mutants, {time.monotonic() - started:.0f} s",
                  flush=True)

    records = run(run_seed, indices, out, args.jobs, hang_s=args.hang, progress=progress)
    text = summary(records, run_seed, time.monotonic() - started)
    print(text)
    if args.report:
        Path(args.report).write_text("".join(json.dumps(r) + "\n" for r in records))
    failing = [(r, d, o) for r in records for d, o in failures_of(r)]
    seen = set()
    for record, device, outcome in failing:
        signature = (device, outcome["class"], record["seed_model"].split("_")[0],
                     record["mutations"][0].split(":")[0] if record["mutations"] else "")
        if signature in seen or len(seen) >= args.minimize:
            continue
        seen.add(signature)
        reduce(record, device, outcome, out, args.minimize_budget, run_seed)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
