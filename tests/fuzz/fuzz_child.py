"""The fuzzer's child process: runs a batch of mutants on the CPU EP and with npuflow loaded, and
classifies each. It writes `<id> <stage>` to the progress file before each stage, so that when
it dies (a crash) or stalls (a hang) the parent knows which mutant and which stage did it; each
finished mutant is one JSON line in the results file.

    python fuzz_child.py JOBS.json PROGRESS RESULTS
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from fuzz_minimize import prune
from fuzz_oracle import (ERROR, ILL_CONDITIONED, INVALID, MATCHING, REFUSED, SHAPE,
                         UNREPRODUCIBLE, classify, fp16_error_bars)

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build"))
EP_LIBRARY = BUILD_DIR / "lib" / "libonnxruntime_npuflow.so"
EP_NAME = "NpuflowExecutionProvider"


def make_feeds(spec: list, seed: int, kind: str) -> dict:
    """Seeded inputs for [name, onnx elem type, shape]: normal floats, full-range 8-bit integers;
    kind "special" sprinkles NaN, Inf and 1e30 into float inputs, "large" finite values beyond
    fp16's range, "zeros" is all zero."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, elem, shape in spec:
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        if dtype.kind == "f":
            a = rng.standard_normal(shape).astype(dtype)
            if kind in ("special", "large") and a.size:
                flat = a.reshape(-1)
                values = (np.nan, np.inf, -np.inf, 1e30) if kind == "special" else (1e5, -3e5)
                for value in values:
                    flat[rng.integers(0, a.size)] = value
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            lo, hi = max(int(info.min), -128), min(int(info.max), 255)
            a = rng.integers(lo, hi + 1, size=shape).astype(dtype)
        else:
            a = rng.integers(0, 2, size=shape).astype(dtype)
        if kind == "zeros":
            a = np.zeros_like(a)
        feeds[name] = a
    return feeds


def session_options(ort, level: str):
    so = ort.SessionOptions()
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    so.intra_op_num_threads = 1
    so.log_severity_level = 4  # the verdict is in the outputs; ORT's warnings would drown stderr
    return so


DEVICE_OPTIONS = {"host": {"device": "host"}, "sim": {"device": "sim", "min_rows": "1"}}


def device_options(job: dict, device: str) -> dict:
    """npuflow's provider options for the job on device: the device's, the host kernel set the
    job drew (auto: AVX2 where this CPU has it; portable: the loops an arm64 build runs) and any
    options a test adds (extra_options)."""
    return {**DEVICE_OPTIONS[device], "host_kernels": job.get("host_kernels", "auto"),
            **job.get("extra_options", {})}


def cpu_ep_reproduces(ort, job: dict, feeds: dict, ref: list) -> bool:
    """Whether two fresh CPU EP sessions at the job's level give ref again, bit for bit (NaN
    where it has NaN). ONNX Runtime reads memory it never wrote on some invalid models (a Concat
    of an empty input whose other dims disagree): then it is no oracle."""
    for _ in range(2):
        again = ort.InferenceSession(job["model"], sess_options=session_options(ort, job["level"]),
                                     providers=["CPUExecutionProvider"]).run(None, feeds)
        for r, a in zip(ref, again):
            r, a = np.asarray(r), np.asarray(a)
            if r.shape != a.shape or not np.array_equal(r, a, equal_nan=r.dtype.kind == "f"):
                return False
    return True


def cpu_ep_at(ort, job: dict, feeds: dict, level: str) -> list:
    cpu = ort.InferenceSession(job["model"], sess_options=session_options(ort, level),
                               providers=["CPUExecutionProvider"])
    return cpu.run(None, feeds)


def unoptimized_reference(ort, job: dict, feeds: dict) -> list:
    return cpu_ep_at(ort, job, feeds, "disable")


def references_before_fusion(level: str) -> list[str]:
    """The CPU EP levels a claim made at `level` may also be judged against. ONNX Runtime hands
    every EP the graph after its basic rewrites, and not all of them are exact
    (DoubleQDQPairsRemover merges Q/DQ pairs of different scales into one); beyond basic the CPU
    EP also runs fused kernels of its own (QLinearMatMul, whose u8s8 path saturates on x86
    without VNNI). The model as written (disable), or the graph the EP was given (basic), is
    what a claim must compute."""
    return {"disable": [], "basic": ["disable"]}.get(level, ["disable", "basic"])


def unoptimized_fails(ort, job: dict, feeds: dict) -> bool:
    try:
        unoptimized_reference(ort, job, feeds)
    except Exception:  # noqa: BLE001 - the failure is the answer
        return True
    return False


def npuflow_session(ort, devices, model, level: str, options: dict, report: Path):
    """(session, report records) of npuflow with provider options; model is a path or
    serialized bytes."""
    report.unlink(missing_ok=True)
    so = session_options(ort, level)
    so.add_provider_for_devices(devices, {**options, "report": str(report)})
    session = ort.InferenceSession(model, sess_options=so)
    records = [json.loads(line) for line in report.read_text().splitlines()] \
        if report.exists() else []
    return session, records


def claim_boundary(model: onnx.ModelProto, claimed_nodes: set[str]):
    """(exits, entries) of the claims: value infos of the values claimed nodes produce for the
    rest of the graph (or as graph outputs), where a claim hands its results over and its gate
    applies; and of the values they read from outside (constants aside)."""
    inside = [n for n in model.graph.node if n.name in claimed_nodes]
    produced = {o for n in inside for o in n.output if o}
    read_outside = {x for n in model.graph.node if n.name not in claimed_nodes for x in n.input}
    read_outside |= {o.name for o in model.graph.output}
    constants = {t.name for t in model.graph.initializer}
    exits = sorted(produced & read_outside)
    entries = sorted({x for n in inside for x in n.input if x and x not in produced
                      and x not in constants})
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - without types the boundary cannot be cut
        return [], []
    types = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)
             + list(inferred.graph.input)}
    if any(n not in types for n in exits + entries):
        return [], []
    return [types[n] for n in exits], [types[n] for n in entries]


def cut(model: onnx.ModelProto, exits: list, entries: list) -> onnx.ModelProto:
    """The subgraph that computes the exits from the entries (and constants)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    g = copy.graph
    producer = {o: n for n in g.node for o in n.output}
    stop = {e.name for e in entries} | {t.name for t in g.initializer}
    needed, kept, todo = set(), set(), [e.name for e in exits]
    while todo:
        value = todo.pop()
        if value in needed or value in stop or value not in producer:
            continue
        needed.add(value)
        node = producer[value]
        kept.add(id(node))
        todo += [x for x in node.input if x]
    nodes = [n for n in g.node if id(n) in kept]
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    g.input.extend(entries)
    del g.output[:]
    g.output.extend(exits)
    del g.value_info[:]
    prune(copy)
    return copy


def verdict_at_exits(ort, devices, job: dict, feeds: dict, device: str, report: Path):
    """The gate applied where the claims hand over rather than at the graph outputs, with
    optimizations off (so the graph keeps its own names): an unclaimed op downstream (a
    mutated, ill-conditioned normalization, a division by a near-zero difference) can amplify
    a difference well within the claim's gate. When the exits differ so, the claimed subgraph
    is cut at its boundary and run alone with npuflow, fed the CPU EP's values at its entries:
    a claim reading what an unclaimed op made of another claim's output (a QDQ group's one-LSB
    rounding requantized 25x finer on its way to the next group) is judged on the inputs the CPU
    EP gave it. Returns (verdict, the claimed subgraph, npuflow's exit values, the CPU EP's entry
    values), or None when there is no boundary to compare at."""
    model = onnx.load(job["model"])
    options = device_options(job, device)
    session, records = npuflow_session(ort, devices, job["model"], "disable", options, report)
    del session
    claimed = {name for r in records for c in r["claims"] for name in c["nodes"]}
    exits, entries = claim_boundary(model, claimed)
    if not exits:
        return None
    existing = {o.name for o in model.graph.output}
    model.graph.output.extend(v for v in exits + entries if v.name not in existing)
    data = model.SerializeToString()
    names = [e.name for e in exits]
    cpu = ort.InferenceSession(data, sess_options=session_options(ort, "disable"),
                               providers=["CPUExecutionProvider"])
    session, records = npuflow_session(ort, devices, data, "disable", options, report)
    claims = sum(len(r["claims"]) for r in records)
    if not claims:
        return None
    got = session.run(names, feeds)
    del session
    reference = cpu.run(names + [e.name for e in entries], feeds)
    entry_feeds = dict(zip([e.name for e in entries], reference[len(names):]))
    verdict = classify(reference[:len(names)], got, claims, device)
    region = cut(model, exits, entries)
    if verdict[0] != MATCHING and entries:
        session, records = npuflow_session(ort, devices, region.SerializeToString(), "disable",
                                           options, report)
        alone = sum(len(r["claims"]) for r in records)
        if alone:
            got = session.run(names, entry_feeds)
            verdict = classify(reference[:len(names)], got, alone, device)
    return verdict, region, got, entry_feeds


def explicit_conv_pads(model: onnx.ModelProto) -> None:
    """Rewrites every Conv's auto_pad as the explicit pads ONNX defines for it. ONNX's reference
    evaluator (1.20) pads VALID as if it were SAME_UPPER, and computes SAME from the batch and
    channel dims instead of the spatial ones, so a TorchScript patch embedding (kernel = stride,
    VALID) read shifted patches and the float64 check judged against garbage. A SAME whose
    spatial dims shape inference cannot give stays as it is."""
    g = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - VALID needs no shapes; SAME then stays
        inferred = model
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    weights = {t.name: list(t.dims) for t in g.initializer}
    for node in g.node:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: a for a in node.attribute}
        mode = attrs["auto_pad"].s.decode() if "auto_pad" in attrs else "NOTSET"
        if mode == "NOTSET":
            continue
        kernel = list(attrs["kernel_shape"].ints) if "kernel_shape" in attrs else \
            weights.get(node.input[1], [])[2:]
        x = shapes.get(node.input[0], [])[2:]
        if not kernel or (mode != "VALID" and (len(x) != len(kernel) or None in x)):
            continue
        rank = len(kernel)
        strides = list(attrs["strides"].ints) if "strides" in attrs else [1] * rank
        dilations = list(attrs["dilations"].ints) if "dilations" in attrs else [1] * rank
        head, tail = [0] * rank, [0] * rank
        if mode != "VALID":  # SAME_UPPER / SAME_LOWER: output ceil(in / stride)
            for i in range(rank):
                out = -(-x[i] // strides[i])
                total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - x[i])
                head[i] = total // 2 if mode == "SAME_UPPER" else total - total // 2
                tail[i] = total - head[i]
        kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute("pads", head + tail)])


def float64_reference(model: onnx.ModelProto, feeds: dict) -> list | None:
    """The model evaluated in float64 by ONNX's reference evaluator (its float32 constants,
    inputs and casts widened), the outputs rounded to float32: the arithmetic a fused claim that
    accumulates in double approximates better than the CPU EP's op-by-op float32. None when the
    evaluator cannot run the model."""
    from onnx.reference import ReferenceEvaluator

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    model = copy
    explicit_conv_pads(model)
    g = model.graph
    for t in g.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for node in g.node:
        for a in node.attribute:
            if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64)))
            if node.op_type == "Cast" and a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                a.i = onnx.TensorProto.DOUBLE
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    names = {i.name for i in g.input}
    wide = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()
            if k in names}
    try:
        with np.errstate(all="ignore"):
            outputs = ReferenceEvaluator(model).run(None, wide)
    except Exception:  # noqa: BLE001 - ops the evaluator lacks: no verdict
        return None
    return [np.asarray(o).astype(np.float32) if np.asarray(o).dtype == np.float64 else o
            for o in outputs]


def fp32_overflow(ort, model: onnx.ModelProto, feeds: dict) -> str | None:
    """Where the CPU EP's fp32 evaluation of model (the claimed subgraph, fed the CPU EP's
    values at its entries) first holds a value that is not finite, or None if every float value
    it computes stays finite: an overflow past fp32's range, or an Inf/NaN carried in."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(copy)
    except Exception:  # noqa: BLE001 - untyped values cannot be read back; the outputs still are
        inferred = copy
    typed = {v.name: v for v in inferred.graph.value_info
             if v.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)}
    present = [o.name for o in copy.graph.output]
    order = [o for n in copy.graph.node for o in n.output if o in typed and o not in present]
    copy.graph.output.extend(typed[o] for o in order)
    names = order + present  # in the order they are computed
    inputs = {i.name for i in copy.graph.input}
    values = ort.InferenceSession(copy.SerializeToString(),
                                  sess_options=session_options(ort, "disable"),
                                  providers=["CPUExecutionProvider"]).run(
        names, {k: v for k, v in feeds.items() if k in inputs})
    for name, value in zip(names, values):
        value = np.asarray(value)
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return f"evaluation is not finite at {name}"
    for name, value in feeds.items():
        value = np.asarray(value)
        if name in inputs and value.dtype.kind == "f" and not np.isfinite(value).all():
            return f"evaluation is fed a value that is not finite ({name})"
    return None


def fp16_operands(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose MatMul, Gemm and Conv read their float operands rounded to fp16 (a Cast to
    float16 and back): the arithmetic of an NPU's fp16 GEMM with fp32 accumulation. As on the
    sim, a product one of whose operands holds a finite value fp16 cannot (|x| >= 65520) keeps
    both in fp32: the device keeps such a weight, or such a call, on the host."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    make = helper.make_node
    nodes = []
    for k, node in enumerate(copy.graph.node):
        if node.op_type in ("MatMul", "Gemm", "Conv") and node.domain in ("", "ai.onnx"):
            n = f"fuzz_fp16_{k}"
            operands = list(node.input[:2])
            nodes.append(make("Constant", [], [f"{n}_limit"], value=numpy_helper.from_array(
                np.array(65520, np.float32))))
            beyond = []
            for j, x in enumerate(operands):  # any finite |x| >= 65520, as a 0/1 float
                nodes += [make("Abs", [x], [f"{n}_abs{j}"]),
                          make("GreaterOrEqual", [f"{n}_abs{j}", f"{n}_limit"], [f"{n}_ge{j}"]),
                          make("IsInf", [x], [f"{n}_inf{j}"]),
                          make("Not", [f"{n}_inf{j}"], [f"{n}_finite{j}"]),
                          make("And", [f"{n}_ge{j}", f"{n}_finite{j}"], [f"{n}_over{j}"]),
                          make("Cast", [f"{n}_over{j}"], [f"{n}_overf{j}"],
                               to=onnx.TensorProto.FLOAT),
                          make("ReduceMax", [f"{n}_overf{j}"], [f"{n}_any{j}"], keepdims=0)]
                beyond.append(f"{n}_any{j}")
            nodes += [make("Max", beyond, [f"{n}_anyf"]),
                      make("Constant", [], [f"{n}_half"],
                           value=numpy_helper.from_array(np.array(0.5, np.float32))),
                      make("Less", [f"{n}_anyf", f"{n}_half"], [f"{n}_on_device"])]
            for j, x in enumerate(operands):
                rounded = f"{n}_{j}"
                nodes += [make("Cast", [x], [rounded + "_h"], to=onnx.TensorProto.FLOAT16),
                          make("Cast", [rounded + "_h"], [rounded + "_r"],
                               to=onnx.TensorProto.FLOAT),
                          make("Where", [f"{n}_on_device", rounded + "_r", x], [rounded])]
                node.input[j] = rounded
        nodes.append(node)
    del copy.graph.node[:]
    copy.graph.node.extend(nodes)
    return copy


def one_ulp_apart(model: onnx.ModelProto, feeds: dict, seed: int):
    """A copy of the model and feeds with every float32 weight and input moved by up to one ulp
    at random: what another summation order does to the values."""
    rng = np.random.default_rng(seed)

    def nudge(a):
        step = rng.integers(-1, 2, size=a.shape)
        moved = np.where(step > 0, np.nextafter(a, np.float32(np.inf)),
                         np.where(step < 0, np.nextafter(a, np.float32(-np.inf)), a))
        # float32's extremes (masks of -max) stay: one ulp past them is infinity, not rounding.
        return np.where(np.isfinite(moved) | ~np.isfinite(a), moved, a).astype(np.float32)

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    # Weights and inputs move; scalars stay (a Pow's exponent 2 one ulp off is NaN on negatives).
    for t in copy.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and np.prod(t.dims) > 1:
            t.CopyFrom(numpy_helper.from_array(nudge(numpy_helper.to_array(t)), t.name))
    moved = {k: nudge(v) if v.dtype == np.float32 else v for k, v in feeds.items()}
    return copy, moved


def ill_conditioned(ort, job: dict, feeds: dict, device: str) -> str | None:
    """Why the CPU EP fails the device's gate against itself one ulp apart, or None."""
    model = onnx.load(job["model"])
    so = session_options(ort, "disable")
    ref = ort.InferenceSession(job["model"], sess_options=so,
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    for seed in (1, 2):
        moved_model, moved_feeds = one_ulp_apart(model, feeds, seed)
        got = ort.InferenceSession(moved_model.SerializeToString(), sess_options=so,
                                   providers=["CPUExecutionProvider"]).run(None, moved_feeds)
        verdict = classify(ref, got, 1, device)
        if verdict[0] != MATCHING:
            return f"the CPU EP one ulp apart: {verdict[1]}"
    return None


def judge(ort, devices, job: dict, feeds: dict, ref: list, device: str, mark) -> dict:
    report = Path(job["report_dir"]) / f"{job['id']}-{device}.jsonl"
    session, records = npuflow_session(ort, devices, job["model"], job["level"],
                                       device_options(job, device), report)
    outcome = {"claims": sum(len(r["claims"]) for r in records),
               "kinds": sorted({c["kind"] for r in records for c in r["claims"]}),
               "reasons": sorted({f"{r.get('matcher', 'qdq')}:{x['reason']}"
                                  for r in records for x in r["refusals"]})}
    if EP_NAME not in session.get_providers():
        outcome["class"], outcome["detail"] = ERROR, "the session dropped the npuflow EP"
        return outcome
    got = session.run(None, feeds)
    del session
    outcome["class"], outcome["detail"] = classify(ref, got, outcome["claims"], device)
    if outcome["class"] in (REFUSED, MATCHING, SHAPE):
        return outcome
    if not cpu_ep_reproduces(ort, job, feeds, ref):
        outcome.update({"class": UNREPRODUCIBLE, "detail": (
            f"{outcome['detail']}; the CPU EP does not reproduce its own outputs in a fresh "
            f"session (it reads memory it never wrote)")})
        return outcome
    if not outcome["claims"]:
        return outcome
    for level in references_before_fusion(job["level"]):
        verdict = classify(cpu_ep_at(ort, job, feeds, level), got, outcome["claims"], device)
        if verdict[0] == MATCHING:
            outcome.update({"class": MATCHING, "reference": level, "detail": (
                f"matches the CPU EP at level {level}; at level {job['level']}: "
                f"{outcome['detail']}")})
            return outcome
    at_exits = verdict_at_exits(ort, devices, job, feeds, device, report)
    claimed, claimed_got, claimed_feeds = onnx.load(job["model"]), got, feeds
    if at_exits:
        verdict, claimed, claimed_got, claimed_feeds = at_exits
        if verdict[0] == MATCHING:
            outcome.update({"class": MATCHING, "reference": "exits", "detail": (
                f"within the gate where the claims hand over; at the outputs: "
                f"{outcome['detail']}")})
            return outcome
        outcome["detail"] += f"; where the claims hand over: {verdict[1]}"
    overflow = fp32_overflow(ort, claimed, claimed_feeds)
    if overflow:
        # float64 judges rounding, not range: it does not overflow where fp32 does, so it would
        # vouch for a kernel that ignores fp32's range (a LayerNorm normalizing rows whose
        # squares are infinite in fp32). There the claim must give the CPU EP's own values.
        outcome["detail"] += f"; no float64 check: the CPU EP's fp32 {overflow}"
        exact = None
    else:
        mark(f"{device}-reference")  # the evaluator is slow: if it stalls, it is unjudged
        exact = float64_reference(claimed, claimed_feeds)
        mark(device)
    if exact is not None:
        verdict = classify(exact, claimed_got, outcome["claims"], device)
        if verdict[0] == MATCHING:
            outcome.update({"class": MATCHING, "reference": "float64", "detail": (
                f"matches a float64 evaluation; the CPU EP's float32: {outcome['detail']}")})
            return outcome
    if device == "sim":
        emulated = ort.InferenceSession(fp16_operands(claimed).SerializeToString(),
                                        sess_options=session_options(ort, "disable"),
                                        providers=["CPUExecutionProvider"])
        names = [o.name for o in claimed.graph.output]
        inputs = {i.name for i in claimed.graph.input}
        claimed_inputs = {k: v for k, v in claimed_feeds.items() if k in inputs}
        emulated_got = emulated.run(names, claimed_inputs)
        verdict = classify(emulated_got, claimed_got, outcome["claims"], device)
        if verdict[0] == MATCHING:
            outcome.update({"class": MATCHING, "reference": "fp16", "detail": (
                f"matches the CPU EP with fp16 GEMM operands; at fp32: {outcome['detail']}")})
            return outcome
        fp32 = ort.InferenceSession(claimed.SerializeToString(),
                                    sess_options=session_options(ort, "disable"),
                                    providers=["CPUExecutionProvider"]).run(names, claimed_inputs)
        verdict = classify(fp32, claimed_got, outcome["claims"], device,
                           fp16_error_bars(fp32, emulated_got, device))
        if verdict[0] == MATCHING:
            outcome.update({"class": MATCHING, "reference": "fp16-error", "detail": (
                f"within twice the error of fp16 GEMM operands themselves; at fp32: "
                f"{outcome['detail']}")})
            return outcome
    why = ill_conditioned(ort, job, feeds, device)
    if why:
        outcome.update({"class": ILL_CONDITIONED, "detail": f"{outcome['detail']}; {why}"})
    return outcome


def run_job(ort, devices, job: dict, progress) -> dict:
    def mark(stage):
        progress.write(f"{job['id']} {stage}\n")
        progress.flush()
        sys.stderr.write(f"==fuzz== {job['id']} {stage}\n")
        sys.stderr.flush()

    result = {"id": job["id"]}
    if "model" not in job:  # generated here: ONNX's shape inference can die on a mutant too
        from fuzz import make_mutant

        mark("mutate")
        made = make_mutant(job["run_seed"], job["id"], Path(job["mutants_dir"]))
        # What the mutant is, for the parent should this process die running it.
        Path(made["model"]).with_suffix(".made.json").write_text(json.dumps(made))
        job.update(made)
        result.update({k: v for k, v in made.items() if k != "id"})
    feeds = make_feeds(job["feeds"], job["feed_seed"], job["feed_kind"])
    mark("cpu")
    try:
        cpu = ort.InferenceSession(job["model"], sess_options=session_options(ort, job["level"]),
                                   providers=["CPUExecutionProvider"])
        ref = cpu.run(None, feeds)
        del cpu
    except Exception as error:  # noqa: BLE001 - the CPU EP's rejection is the verdict
        result["cpu_error"] = str(error).splitlines()[0][:300]
        return result
    result["devices"] = {}
    for device in job["run_on"]:
        mark(device)
        started = time.perf_counter()
        try:
            outcome = judge(ort, devices, job, feeds, ref, device, mark)
        except Exception as error:  # noqa: BLE001 - the CPU EP ran it; npuflow must too
            outcome = {"class": ERROR, "detail": str(error).splitlines()[0][:300]}
            if job["level"] != "disable" and unoptimized_fails(ort, job, feeds):
                # Invalid as written (a QuantizeLinear's block_size on a scalar scale): only the
                # CPU EP's level-2 fusion, which npuflow's claim pre-empted, had hidden it.
                outcome["class"] = INVALID
        outcome["seconds"] = round(time.perf_counter() - started, 3)
        result["devices"][device] = outcome
    return result


# Address space this process may use (FUZZ_CHILD_MEMORY_GB, not an npuflow knob): a mutant that
# blows a tensor up (a Resize scale of 7e4) then fails an allocation inside ONNX Runtime instead
# of waking the kernel's OOM killer on a shared machine; the CPU EP's own failure rejects it.
MEMORY_BYTES = int(float(os.environ.get("FUZZ_CHILD_MEMORY_GB", "8")) * 2**30)


def main(jobs_file: str, progress_file: str, results_file: str) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    import onnxruntime as ort

    ort.register_execution_provider_library("npuflow", str(EP_LIBRARY))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    assert devices, "onnxruntime lists no npuflow device"
    jobs = json.loads(Path(jobs_file).read_text())
    with open(progress_file, "a") as progress, open(results_file, "a") as results:
        for job in jobs:
            results.write(json.dumps(run_job(ort, devices, job, progress)) + "\n")
            results.flush()


if __name__ == "__main__":
    main(*sys.argv[1:4])
