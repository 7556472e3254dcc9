"""The tensor-program interpreter (ops/tensor_program.h) against the CPU EP, on random graphs.

A text encoder's claim runs the embedding lookups and the mask arithmetic the exporter wrote
(Shape, Gather, Slice, Range, Cast, Where, comparisons, ...) in npuflow's own interpreter, so its
every op must compute what ONNX Runtime computes. Each graph here is drawn from a seeded
generator: random ops of the interpreter's set, wired to earlier values of fitting types and
shapes, with attributes and constants at the spec's corners (negative axes, clamped slice bounds,
negative steps and indices, empty tensors, NaN and infinities, the attribute forms of older
opsets). The `program_ops` knob has npuflow claim the whole graph as one program (a session with
the CPU EP fallback disabled proves it), and every value of the graph must come out bit for bit as
the CPU EP's, except those of Exp, Log, Cos, Sin, Pow and Reciprocal (the C library and a true
division against Eigen's vectorized approximations), which get a few ulp and feed nothing
else.

`python tests/integration/test_tensor_program.py --count N --seed S` runs any other batch."""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

SEED = 20261201
COUNT = 48  # graphs in `make test` (about 15 s)
# The C library's results against Eigen's vectorized ones: a few ulp apart.
INEXACT = {"Exp", "Log", "Cos", "Sin", "Pow", "Reciprocal"}
TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL}
NUMERIC = (np.float32, np.int64, np.int32)


class Builder:
    """A graph under construction: every value with its concrete numpy value (ORT computed it),
    so the next op is drawn to fit."""

    def __init__(self, rng: random.Random, opset: int):
        self.rng, self.opset = rng, opset
        self.nodes, self.inputs, self.initializers = [], [], []
        self.values = {}  # name -> numpy value
        self.pool = []  # names later ops may read
        self.feeds = {}
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def constant(self, array) -> str:
        name = self.name("c")
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        self.values[name] = np.asarray(array)
        return name

    def graph_input(self, array) -> str:
        name = self.name("x")
        self.inputs.append(helper.make_tensor_value_info(name, TYPES[array.dtype],
                                                         list(array.shape)))
        self.feeds[name] = array
        self.values[name] = array
        self.pool.append(name)
        return name

    def model(self, nodes, outputs, types=None):
        types = types or {o: TYPES[self.values[o].dtype] for o in outputs}
        graph = helper.make_graph(nodes, "program", self.inputs, [
            helper.make_tensor_value_info(o, types[o], None) for o in outputs], self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        return model

    def try_node(self, node) -> bool:
        """Adds `node` if the CPU EP runs it (recording its outputs' values)."""
        try:
            # The new outputs' types, from ONNX's shape inference.
            inferred = onnx.shape_inference.infer_shapes(self.model(self.nodes + [node], []))
            types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
            if any(types.get(o, 0) not in TYPES.values() for o in node.output):
                return False
            model = self.model(self.nodes + [node], list(node.output), types)
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            so.log_severity_level = 4
            session = ort.InferenceSession(model.SerializeToString(), sess_options=so,
                                           providers=["CPUExecutionProvider"])
            outputs = session.run(None, self.feeds)
        except Exception:  # not a valid op for these operands: draw another
            return False
        self.nodes.append(node)
        for name, value in zip(node.output, outputs):
            self.values[name] = value
            if node.op_type not in INEXACT:
                self.pool.append(name)
        return True


def random_array(rng: random.Random, dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    if dtype is np.bool_:
        return np.array([rng.random() < 0.5 for _ in range(n)], np.bool_).reshape(shape)
    if dtype is np.float32:
        specials = [0.0, -0.0, 0.5, -2.5, 1.5, np.inf, -np.inf, np.nan, 3.0e38]
        data = [rng.choice(specials) if rng.random() < 0.15 else round(rng.gauss(0, 3), 2)
                for _ in range(n)]
        return np.array(data, np.float32).reshape(shape)
    data = [rng.randint(-6, 6) for _ in range(n)]
    return np.array(data, dtype).reshape(shape)


def random_shape(rng: random.Random):
    rank = rng.choice([0, 1, 1, 2, 2, 3, 3, 4])
    return [rng.choice([1, 1, 2, 3, 4, 5] + ([0] if rng.random() < 0.05 else []))
            for _ in range(rank)]


def pick(b: Builder, want=None):
    names = [n for n in b.pool
             if want is None or b.values[n].dtype in [np.dtype(w) for w in want]]
    return b.rng.choice(names) if names else None


def axes_input(b: Builder, axes, op: str):
    """Axes as an attribute before opset 13 (Unsqueeze, Squeeze), else as an input."""
    if b.opset < 13:
        return [], {"axes": axes}
    return [b.constant(np.array(axes, np.int64))], {}


def draw_node(b: Builder):
    rng = b.rng
    op = rng.choice(OPS)
    out = b.name("v")
    ints = lambda v: np.array(v, np.int64)  # noqa: E731
    if op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        x = pick(b, NUMERIC)
        if x is None:
            return None
        xv = b.values[x]
        # The other operand: a value of the same type, or a constant that broadcasts.
        y = pick(b, (xv.dtype,)) if rng.random() < 0.5 else None
        if y is None or (op == "Div" and xv.dtype != np.float32):
            shape = list(xv.shape[rng.randint(0, len(xv.shape)):]) if xv.ndim else []
            shape = [1 if rng.random() < 0.3 else d for d in shape]
            yv = random_array(rng, xv.dtype.type, shape)
            if op == "Div" and xv.dtype != np.float32:
                yv = np.where(yv == 0, 3, yv).astype(xv.dtype)
            y = b.constant(yv)
        return helper.make_node(op, [x, y], [out])
    if op == "Pow":
        x = pick(b, (np.float32,))
        e = b.constant(np.array(rng.choice([2.0, 0.5, 3.0, -1.0]), np.float32))
        return None if x is None else helper.make_node(op, [x, e], [out])
    if op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        x = pick(b, NUMERIC)
        if x is None:
            return None
        xv = b.values[x]
        y = pick(b, (xv.dtype,)) or b.constant(random_array(rng, xv.dtype.type, []))
        return helper.make_node(op, [x, y], [out])
    if op in ("And", "Or", "Xor"):
        x, y = pick(b, (np.bool_,)), pick(b, (np.bool_,))
        return None if x is None else helper.make_node(op, [x, y], [out])
    if op in ("Not", "IsNaN", "IsInf", "Neg", "Abs", "Sqrt", "Reciprocal", "Floor", "Ceil",
              "Round", "Identity", "Exp", "Log", "Cos", "Sin"):
        want = ((np.bool_,) if op == "Not" else NUMERIC if op in ("Neg", "Abs") else None
                if op == "Identity" else (np.float32,))
        x = pick(b, want)
        attrs = {}
        if op == "IsInf":
            attrs = {"detect_negative": rng.randint(0, 1), "detect_positive": rng.randint(0, 1)}
        return None if x is None else helper.make_node(op, [x], [out], **attrs)
    if op == "Where":
        c, x = pick(b, (np.bool_,)), pick(b)
        if c is None or x is None:
            return None
        y = pick(b, (b.values[x].dtype,))
        return helper.make_node(op, [c, x, y], [out])
    if op == "Cast":
        x = pick(b)
        to = rng.choice([TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL])
        if x is None:
            return None
        xv = b.values[x]
        if xv.dtype == np.float32 and to in (TensorProto.INT64, TensorProto.INT32):
            if not np.all(np.isfinite(xv)) or np.any(np.abs(xv) > 2e9):
                return None  # undefined in C++: ORT's result is the compiler's
        return helper.make_node(op, [x], [out], to=to)
    if op in ("Shape", "Size"):
        x = pick(b)
        attrs = {}
        if op == "Shape" and b.opset >= 15 and rng.random() < 0.5:
            attrs = {"start": rng.randint(-3, 2), "end": rng.randint(-2, 4)}
        return None if x is None else helper.make_node(op, [x], [out], **attrs)
    x = pick(b)
    if x is None:
        return None
    xv = b.values[x]
    rank = xv.ndim
    if op == "Reshape":
        n = xv.size
        dims = [d for d in range(1, n + 1) if n % d == 0] or [1]
        first = rng.choice(dims)
        target = [first, -1] if n else [0, rng.choice([0, 1, 2])]
        if rank and rng.random() < 0.4:
            target = [0] + [-1]
        return helper.make_node(op, [x, b.constant(ints(target))], [out])
    if op == "Unsqueeze":
        axes = sorted(set(rng.randint(-(rank + 2), rank + 1) for _ in range(rng.randint(1, 2))))
        inputs, attrs = axes_input(b, axes, op)
        return helper.make_node(op, [x] + inputs, [out], **attrs)
    if op == "Squeeze":
        ones = [i for i, d in enumerate(xv.shape) if d == 1]
        if ones and rng.random() < 0.7:
            axes = [a - rank if rng.random() < 0.5 else a for a in rng.sample(ones, 1)]
            inputs, attrs = axes_input(b, axes, op)
            return helper.make_node(op, [x] + inputs, [out], **attrs)
        return helper.make_node(op, [x], [out])
    if op == "Flatten":
        return helper.make_node(op, [x], [out], axis=rng.randint(-rank, rank) if rank else 0)
    if op == "Transpose":
        if not rank:
            return None
        perm = list(range(rank))
        rng.shuffle(perm)
        attrs = {"perm": perm} if rng.random() < 0.8 else {}
        return helper.make_node(op, [x], [out], **attrs)
    if op == "Expand":
        target = [rng.choice([d, 2, 3]) if d == 1 else d for d in xv.shape]
        target = [rng.choice([1, 2])] * rng.randint(0, 1) + target
        return helper.make_node(op, [x, b.constant(ints(target))], [out])
    if op == "Tile":
        return helper.make_node(op, [x, b.constant(ints([rng.randint(0, 2) for _ in xv.shape]))],
                                [out])
    if op == "Concat":
        if not rank:
            return None
        axis = rng.randint(-rank, rank - 1)
        shape = list(xv.shape)
        shape[axis] = rng.randint(0, 3)
        other = b.constant(random_array(rng, xv.dtype.type, shape))
        order = [x, other] if rng.random() < 0.5 else [other, x, x]
        return helper.make_node(op, order, [out], axis=axis)
    if op == "Slice":
        if not rank:
            return None
        axes = rng.sample(range(rank), rng.randint(1, rank))
        big = np.iinfo(np.int64).max
        starts = [rng.choice([0, 1, -1, -2, big, -big - 1, 2]) for _ in axes]
        ends = [rng.choice([0, 2, -1, big, -big - 1, 3]) for _ in axes]
        steps = [rng.choice([1, 1, 2, -1, -2]) for _ in axes]
        neg_axes = [a - rank if rng.random() < 0.3 else a for a in axes]
        if b.opset < 10:
            return helper.make_node(op, [x], [out], starts=starts, ends=ends, axes=neg_axes)
        inputs = [x, b.constant(ints(starts)), b.constant(ints(ends)), b.constant(ints(neg_axes))]
        if rng.random() < 0.7:
            inputs.append(b.constant(ints(steps)))
        return helper.make_node(op, inputs, [out])
    if op == "Gather":
        if not rank or xv.shape[0] == 0:
            return None
        axis = rng.randint(-rank, rank - 1)
        dim = xv.shape[axis]
        if dim == 0:
            return None
        shape = random_shape(rng)[:2]
        idx = np.array([rng.randint(-dim, dim - 1) for _ in range(int(np.prod(shape)))],
                       np.int64).reshape(shape)
        return helper.make_node(op, [x, b.constant(idx.astype(rng.choice([np.int64, np.int32])))],
                                [out], axis=axis)
    if op == "GatherElements":
        if not rank or 0 in xv.shape:
            return None
        axis = rng.randint(-rank, rank - 1)
        shape = [rng.randint(1, d) for d in xv.shape]
        dim = xv.shape[axis]
        idx = np.array([rng.randint(-dim, dim - 1) for _ in range(int(np.prod(shape)))],
                       np.int64).reshape(shape)
        return helper.make_node(op, [x, b.constant(idx)], [out], axis=axis)
    if op == "GatherND":
        if not rank or 0 in xv.shape:
            return None
        q = rng.randint(1, rank)
        rows = rng.randint(1, 3)
        idx = [[rng.randint(-xv.shape[a], xv.shape[a] - 1) for a in range(q)] for _ in range(rows)]
        return helper.make_node(op, [x, b.constant(np.array(idx, np.int64))], [out])
    if op == "CumSum":
        if not rank or xv.dtype == np.bool_:
            return None
        return helper.make_node(op, [x, b.constant(np.array(rng.randint(-rank, rank - 1)))], [out],
                                exclusive=rng.randint(0, 1), reverse=rng.randint(0, 1))
    if op == "Range":
        dtype = rng.choice([np.int64, np.float32, np.int32])
        start, delta = rng.randint(-4, 4), rng.choice([1, 2, -1, 3])
        limit = start + delta * rng.randint(0, 6) + (0.5 if dtype is np.float32 else 0)
        scalars = [b.constant(np.array(v, dtype)) for v in (start, limit, delta)]
        return helper.make_node(op, scalars, [out])
    if op == "ConstantOfShape":
        shape = b.constant(ints([rng.randint(0, 3) for _ in range(rng.randint(0, 3))]))
        value = random_array(rng, rng.choice([np.float32, np.int64, np.bool_]), [1])
        attrs = {"value": numpy_helper.from_array(value)} if rng.random() < 0.8 else {}
        return helper.make_node(op, [shape], [out], **attrs)
    if op == "MatMul":  # the outer products of rotary tables: a contraction over one element
        f = pick(b, (np.float32,))
        if f is None:
            return None
        fv = b.values[f].reshape(-1)[:6]
        left = b.constant(np.array(fv, np.float32).reshape(1, -1, 1))
        right = b.constant(random_array(rng, np.float32, [1, 1, rng.randint(1, 4)]))
        return helper.make_node(op, [left, right], [out])
    raise AssertionError(op)


OPS = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Equal", "Less", "LessOrEqual",
       "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not", "IsNaN", "IsInf", "Neg", "Abs",
       "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Identity", "Exp", "Log", "Cos", "Sin",
       "Where", "Cast", "Shape", "Size", "Reshape", "Unsqueeze", "Squeeze", "Flatten",
       "Transpose", "Expand", "Tile", "Concat", "Slice", "Gather", "GatherElements", "GatherND",
       "CumSum", "Range", "ConstantOfShape", "MatMul"]
# Ops an older opset lacks (the generator skips them there).
SINCE = {"Range": 11, "CumSum": 11, "GatherElements": 11, "GatherND": 11, "Round": 11,
         "IsInf": 10, "Where": 9, "Expand": 8, "ConstantOfShape": 9, "Max": 8, "Min": 8}


def generate(seed: int, index: int):
    """Graph `index` of `seed`: (model, feeds)."""
    rng = random.Random(f"{seed}:{index}")
    opset = rng.choice([9, 11, 13, 17, 17, 18])
    b = Builder(rng, opset)
    for _ in range(rng.randint(1, 3)):
        dtype = rng.choice([np.float32, np.int64, np.int64, np.bool_, np.int32])
        b.graph_input(random_array(rng, dtype, random_shape(rng)))
    target = rng.randint(4, 12)
    for _ in range(target * 8):
        if len(b.nodes) >= target:
            break
        node = draw_node(b)
        if node is None or SINCE.get(node.op_type, 1) > opset:
            continue
        b.try_node(node)
    outputs = [o for n in b.nodes for o in n.output]
    return b.model(b.nodes, outputs), b.feeds, b


def compare(ref, got, op_type: str) -> str | None:
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return f"{op_type}: {got.dtype}{list(got.shape)} instead of {ref.dtype}{list(ref.shape)}"
    if op_type in INEXACT:
        ok = np.allclose(got, ref, rtol=4e-7, atol=1e-7, equal_nan=True)
    elif ref.dtype == np.float32:  # the same bits, NaNs (of any payload) in the same places
        rn, gn = np.isnan(ref), np.isnan(got)
        ok = np.array_equal(rn, gn) and np.array_equal(ref.view(np.uint32)[~rn],
                                                       got.view(np.uint32)[~gn])
    else:
        ok = np.array_equal(ref, got)
    return None if ok else f"{op_type}: {got.ravel()[:8]} instead of {ref.ravel()[:8]}"


def check(seed: int, index: int, devices) -> list[str]:
    model, feeds, builder = generate(seed, index)
    if not builder.nodes:
        return []
    data = model.SerializeToString()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    cpu = ort.InferenceSession(data, sess_options=so, providers=["CPUExecutionProvider"])
    ref = cpu.run(None, feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")  # all of it claimed
    so.add_provider_for_devices(devices, {"program_ops": "1", "device": "host"})
    try:
        got = ort.InferenceSession(data, sess_options=so).run(None, feeds)
    except Exception as error:  # the CPU EP ran it: npuflow must too
        return [f"graph {index} (opset {builder.opset}): {str(error)[-300:]}"]
    ops = [n.op_type for n in builder.nodes for _ in n.output]
    failures = [compare(r, g, op) for r, g, op in zip(ref, got, ops)]
    return [f"graph {index} (opset {builder.opset}): {f}" for f in failures if f]


@pytest.mark.parametrize("index", range(COUNT))
def test_random_program_matches_the_cpu_ep_bit_for_bit(npuflow_devices, index):
    failures = check(SEED, index, npuflow_devices)
    assert not failures, failures


def test_the_generator_covers_the_op_set():
    seen = set()
    for index in range(COUNT):
        _, _, builder = generate(SEED, index)
        seen.update(n.op_type for n in builder.nodes)
    missing = set(OPS) - seen
    assert len(missing) <= 6, f"the fixed batch never draws {sorted(missing)}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    parser.add_argument("--build", type=Path, default=Path(__file__).resolve().parents[2] / "build")
    args = parser.parse_args()
    ort.register_execution_provider_library("npuflow", str(args.build / "lib" /
                                                           "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    print(f"seed {args.seed}, {args.count} graphs")
    bad = 0
    for index in range(args.count):
        failures = check(args.seed, index, devices)
        bad += bool(failures)
        for f in failures:
            print(f)
    print(f"{args.count - bad} of {args.count} graphs match")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
