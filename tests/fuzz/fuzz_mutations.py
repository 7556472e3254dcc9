"""Structure-aware, seeded mutations of an ONNX model: constants (value, shape, dtype, broadcast
form), attributes, edges, ops and dims. Each mutation edits the model in place and returns a
one-line description, or None when the model offers it nothing to mutate (the caller draws
another). Mutants need not be valid: the CPU EP is the judge of that."""
from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
INT8_TYPES = {TensorProto.INT8: (np.int8, -128, 127), TensorProto.UINT8: (np.uint8, 0, 255)}
# Attributes worth setting on ops that lack them (the matchers read them).
ADDABLE = {
    "DequantizeLinear": {"axis": [0, 1, -1, 2], "block_size": [0, 1, 2, 16, 32]},
    "QuantizeLinear": {"axis": [0, 1, -1], "saturate": [0, 1], "block_size": [0, 16]},
    "Gemm": {"transA": [0, 1], "transB": [0, 1], "alpha": [0.5, 2.0], "beta": [0.0, 2.0]},
    "Softmax": {"axis": [-1, 0, 1, 2]},
    "LayerNormalization": {"axis": [-1, 0, 1, 2], "epsilon": [0.0, 1e-12, 1.0]},
    "Gelu": {"approximate": ["tanh", "none"]},
}
INT_CHOICES = {
    "transA": lambda v: [1 - v], "transB": lambda v: [1 - v], "saturate": lambda v: [1 - v],
    "block_size": lambda v: [0, 1, 2, 3, 16, 32, 64, v * 2],
}
FLOAT_CHOICES = [0.0, -1.0, 1.0, 1e-30, 1e30, float("nan"), float("inf")]
UNARY_INSERTS = ["Identity", "Relu", "Neg", "Abs", "Sigmoid", "Cast", "Mul", "Add", "QDQ"]


class Mutator:
    """One model under mutation: the indexes (producers, consumers, types) the mutations need,
    rebuilt after each mutation since a mutation changes them."""

    def __init__(self, model: onnx.ModelProto, rng: random.Random):
        self.model = model
        self.rng = rng
        self.counter = 0
        self.shape_changed = False
        self.reindex()

    # ---- indexes --------------------------------------------------------------------------

    def reindex(self) -> None:
        g = self.model.graph
        self.initializers = {t.name: t for t in g.initializer}
        self.position = {}
        for i, node in enumerate(g.node):
            for out in node.output:
                self.position[out] = i
        self.types = {}
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model).graph
            infos = list(inferred.value_info) + list(inferred.input) + list(inferred.output)
        except Exception:  # noqa: BLE001 - a broken mutant has no types; mutations degrade
            infos = list(g.input) + list(g.output)
        for vi in infos:
            t = vi.type.tensor_type
            if t.elem_type:
                dims = None
                if t.HasField("shape"):
                    dims = tuple(d.dim_value if d.HasField("dim_value") else None
                                 for d in t.shape.dim)
                self.types[vi.name] = (t.elem_type, dims)
        for name, t in self.initializers.items():
            self.types[name] = (t.data_type, tuple(t.dims))

    def opset(self, domain: str = "") -> int:
        for o in self.model.opset_import:
            if o.domain in (domain, "ai.onnx" if domain == "" else domain):
                return o.version
        return 21

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"fuzz_{stem}_{self.counter}"

    def constants(self):
        """(kind, owner, tensor) for every initializer and Constant node value."""
        out = [("init", None, t) for t in self.model.graph.initializer]
        for node in self.model.graph.node:
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value":
                        out.append(("const", node, a.t))
        return out

    @staticmethod
    def replace_tensor(tensor: onnx.TensorProto, array: np.ndarray) -> None:
        tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))

    # ---- constants ------------------------------------------------------------------------

    def const_value(self) -> str | None:
        items = [c for c in self.constants() if c[2].data_type in FLOAT_TYPES | set(INT8_TYPES)
                 | {TensorProto.INT64, TensorProto.INT32}]
        if not items:
            return None
        _, _, tensor = self.rng.choice(items)
        a = numpy_helper.to_array(tensor).copy()
        if a.size == 0:
            return None
        where = self.rng.choice(["all", "one", "some"])
        mask = np.zeros(a.shape, bool)
        flat = mask.reshape(-1)
        if where == "all":
            flat[:] = True
        elif where == "one":
            flat[self.rng.randrange(a.size)] = True
        else:
            flat[np.random.default_rng(self.rng.randrange(2**32)).random(a.size) < 0.1] = True
        if a.dtype.kind == "f":
            kind = self.rng.choice(["zero", "negative", "nan", "inf", "-inf", "huge", "tiny",
                                    "fp16_overflow"])
            value = {"zero": 0.0, "nan": np.nan, "inf": np.inf, "-inf": -np.inf, "huge": 1e30,
                     "tiny": 1e-40, "fp16_overflow": 7e4}.get(kind)
            if kind == "negative":
                a[mask] = -np.abs(a[mask]) - 0.5
            else:
                a[mask] = value
        else:
            info = np.iinfo(a.dtype)
            kind = self.rng.choice(["zero", "min", "max", "negative", "one"])
            value = {"zero": 0, "min": info.min, "max": info.max, "one": 1,
                     "negative": -1 if info.min < 0 else 0}[kind]
            a[mask] = value
        self.replace_tensor(tensor, a)
        return f"value of {tensor.name} ({where}) := {kind}"

    def const_shape(self) -> str | None:
        items = [c for c in self.constants() if c[2].data_type != TensorProto.STRING]
        if not items:
            return None
        _, _, tensor = self.rng.choice(items)
        a = numpy_helper.to_array(tensor)
        kinds = ["scalar", "unsqueeze", "empty"]
        if a.ndim:
            kinds += ["truncate", "grow", "squeeze", "flatten", "expand"]
        kind = self.rng.choice(kinds)
        axis = self.rng.randrange(a.ndim) if a.ndim else 0
        if kind == "scalar":
            if a.size == 0:
                return None
            b = a.reshape(-1)[:1].reshape(())
        elif kind == "unsqueeze":
            b = a.reshape((1,) + a.shape)
        elif kind == "empty":
            b = np.zeros((0,) if not a.ndim else a.shape[:axis] + (0,) + a.shape[axis + 1:],
                         a.dtype)
        elif kind == "truncate":
            if a.shape[axis] < 2:
                return None
            b = np.take(a, range(self.rng.randrange(1, a.shape[axis])), axis=axis)
        elif kind == "grow":
            b = np.concatenate([a, np.take(a, [-1], axis=axis)], axis=axis) \
                if a.shape[axis] else a
        elif kind == "squeeze":
            ones = [i for i, d in enumerate(a.shape) if d == 1]
            if not ones:
                return None
            b = np.squeeze(a, axis=self.rng.choice(ones))
        elif kind == "flatten":
            b = a.reshape(-1)
        else:  # a per-tensor (size-1) dim broadcast to several channels
            ones = [i for i, d in enumerate(a.shape) if d == 1]
            if not ones:
                return None
            i = self.rng.choice(ones)
            b = np.repeat(a, self.rng.choice([2, 3, 32]), axis=i)
        self.replace_tensor(tensor, np.ascontiguousarray(b))
        self.shape_changed = True
        return f"shape of {tensor.name} {list(a.shape)} -> {list(b.shape)} ({kind})"

    def const_dtype(self) -> str | None:
        # Coherent: a Q/DQ's integer input and zero point change type together; or one tensor.
        qdq = [n for n in self.model.graph.node
               if n.op_type == "DequantizeLinear" and len(n.input) >= 3
               and n.input[0] in self.initializers and n.input[2] in self.initializers]
        if qdq and self.rng.random() < 0.5:
            node = self.rng.choice(qdq)
            target = self.rng.choice(["uint8", "int8", "int16", "int32", "int4"])
            for name in (node.input[0], node.input[2]):
                t = self.initializers[name]
                a = numpy_helper.to_array(t).astype(np.int64)
                if a.dtype.kind != "i" and t.data_type not in INT8_TYPES:
                    continue
                if t.data_type == TensorProto.INT8 and target == "uint8":
                    a = a + 128
                elif t.data_type == TensorProto.UINT8 and target != "uint8":
                    a = a - 128
                if target == "int4":
                    a = np.clip(a, -8, 7)
                    t.CopyFrom(helper.make_tensor(name, TensorProto.INT4, a.shape,
                                                  a.reshape(-1).tolist()))
                else:
                    self.replace_tensor(t, a.astype(target))
            return f"dtype of DQ {node.name} weight and zero point -> {target}"
        items = [c for c in self.constants()
                 if c[2].data_type in FLOAT_TYPES | set(INT8_TYPES) | {TensorProto.INT64}]
        if not items:
            return None
        _, _, tensor = self.rng.choice(items)
        a = numpy_helper.to_array(tensor)
        target = self.rng.choice(["float16", "float64", "int8", "uint8", "int32", "int64",
                                  "float32"])
        if str(a.dtype) == target:
            return None
        with np.errstate(all="ignore"):
            b = a.astype(target) if a.dtype.kind != "f" or target.startswith("float") \
                else np.nan_to_num(a).clip(-1e9, 1e9).astype(target)
        self.replace_tensor(tensor, b)
        return f"dtype of {tensor.name} {a.dtype} -> {target}"

    def blocked_scales(self) -> str | None:
        """A weight DequantizeLinear made blocked (opset 21): scales and zero points of shape
        [K / block, N] along axis 0, the form the CPU EP runs and a per-channel matcher must not
        mistake for per-channel."""
        dqs = [n for n in self.model.graph.node if n.op_type == "DequantizeLinear"
               and n.input[0] in self.initializers and len(self.initializers[n.input[0]].dims) == 2
               and len(n.input) >= 2 and n.input[1] in self.initializers]
        if not dqs or self.opset() < 21:
            return None
        node = self.rng.choice(dqs)
        k, n = self.initializers[node.input[0]].dims
        block = self.rng.choice([b for b in (1, 2, 4, 16, 32, k) if b <= k] or [1])
        blocks = -(-k // block)
        scale = self.initializers[node.input[1]]
        base = numpy_helper.to_array(scale).reshape(-1)
        values = np.resize(base, blocks * n).reshape(blocks, n).astype(base.dtype)
        values = values * np.linspace(0.5, 2.0, blocks, dtype=base.dtype)[:, None]
        self.replace_tensor(scale, values)
        if len(node.input) >= 3 and node.input[2] in self.initializers:
            zp = self.initializers[node.input[2]]
            z = numpy_helper.to_array(zp).reshape(-1)
            self.replace_tensor(zp, np.resize(z, blocks * n).reshape(blocks, n).astype(z.dtype))
        for a in list(node.attribute):
            if a.name in ("axis", "block_size"):
                node.attribute.remove(a)
        node.attribute.extend([helper.make_attribute("axis", 0),
                               helper.make_attribute("block_size", block)])
        return f"DQ {node.name}: blocked scales [{blocks}, {n}], block_size {block}"

    # ---- attributes -----------------------------------------------------------------------

    def attribute(self) -> str | None:
        choices = []
        for node in self.model.graph.node:
            present = {a.name for a in node.attribute}
            for a in node.attribute:
                if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT,
                              onnx.AttributeProto.INTS, onnx.AttributeProto.STRING) \
                        and node.op_type != "Constant":
                    choices.append((node, a.name))
            for name in ADDABLE.get(node.op_type, {}):
                if name not in present:
                    choices.append((node, name))
        if not choices:
            return None
        node, name = self.rng.choice(choices)
        attr = next((a for a in node.attribute if a.name == name), None)
        if attr is None:
            value = self.rng.choice(ADDABLE[node.op_type][name])
            node.attribute.append(helper.make_attribute(name, value))
            self.shape_changed = True
            return f"{node.op_type} {node.name}: add {name}={value}"
        if attr.type == onnx.AttributeProto.INT:
            v = attr.i
            options = INT_CHOICES.get(name, lambda v: [v + 1, v - 1, 0, 1, -1, -v, 2**31 - 1])(v)
            attr.i = self.rng.choice([o for o in options if o != v] or [v + 1])
            new = attr.i
        elif attr.type == onnx.AttributeProto.FLOAT:
            attr.f = self.rng.choice(FLOAT_CHOICES + [attr.f * 10, -attr.f])
            new = attr.f
        elif attr.type == onnx.AttributeProto.INTS:
            values = list(attr.ints)
            if not values:
                return None
            if name == "perm" or self.rng.random() < 0.3:
                self.rng.shuffle(values)
            else:
                i = self.rng.randrange(len(values))
                values[i] = self.rng.choice([values[i] + 1, values[i] - 1, 0, -1])
            del attr.ints[:]
            attr.ints.extend(values)
            new = values
        else:
            attr.s = self.rng.choice([b"tanh", b"none", b"bogus", b""])
            new = attr.s.decode()
        self.shape_changed = True
        return f"{node.op_type} {node.name}: {name} -> {new}"

    # ---- edges and ops --------------------------------------------------------------------

    def _edges(self):
        """(node index, input slot) of every input fed by a computed value or a graph input."""
        return [(i, j) for i, node in enumerate(self.model.graph.node)
                for j, name in enumerate(node.input) if name and name not in self.initializers
                and name in self.types]

    def rewire(self) -> str | None:
        edges = self._edges()
        if not edges:
            return None
        i, j = self.rng.choice(edges)
        node = self.model.graph.node[i]
        if len(node.input) >= 2 and self.rng.random() < 0.25 and node.op_type in (
                "Add", "Mul", "Sub", "Div", "MatMul", "Concat"):
            node.input[0], node.input[1] = node.input[1], node.input[0]
            self.shape_changed = True
            return f"{node.op_type} {node.name}: inputs swapped"
        old = node.input[j]
        elem, dims = self.types[old]
        inputs = {v.name for v in self.model.graph.input}
        candidates = [name for name, (e, d) in self.types.items()
                      if e == elem and name != old and name not in self.initializers
                      and (name in inputs or self.position.get(name, i) < i)]
        same_shape = [c for c in candidates if self.types[c][1] == dims]
        pool = same_shape if same_shape and self.rng.random() < 0.7 else candidates
        if not pool:
            return None
        new = self.rng.choice(sorted(pool))
        node.input[j] = new
        self.shape_changed = True
        return f"{node.op_type} {node.name}: input {j} {old} -> {new}"

    def insert_op(self) -> str | None:
        edges = [(i, j) for i, j in self._edges()
                 if self.types[self.model.graph.node[i].input[j]][0] == TensorProto.FLOAT]
        if not edges:
            return None
        i, j = self.rng.choice(edges)
        node = self.model.graph.node[i]
        value = node.input[j]
        op = self.rng.choice(UNARY_INSERTS)
        out = self.fresh(op.lower())
        new_nodes, inits = [], []
        if op == "Cast":
            new_nodes.append(helper.make_node("Cast", [value], [out], to=TensorProto.FLOAT))
        elif op in ("Mul", "Add"):
            c = self.fresh("const")
            inits.append(numpy_helper.from_array(
                np.array(self.rng.choice([0.0, 1.0, 2.0, -1.0]), np.float32), c))
            new_nodes.append(helper.make_node(op, [value, c], [out]))
        elif op == "QDQ":
            s, z, q = self.fresh("scale"), self.fresh("zp"), self.fresh("q")
            scale = np.array(self.rng.choice([0.01, 0.1, 1.0]), np.float32)
            inits += [numpy_helper.from_array(scale, s),
                      numpy_helper.from_array(np.array(0, np.int8), z)]
            new_nodes += [helper.make_node("QuantizeLinear", [value, s, z], [q]),
                          helper.make_node("DequantizeLinear", [q, s, z], [out])]
        else:
            new_nodes.append(helper.make_node(op, [value], [out]))
        for k, n in enumerate(new_nodes):
            n.name = self.fresh(f"{op.lower()}_node")
        self.model.graph.initializer.extend(inits)
        everywhere = self.rng.random() < 0.5
        targets = [n for n in self.model.graph.node if value in n.input] if everywhere else [node]
        for n in targets:
            for k, name in enumerate(n.input):
                if name == value:
                    n.input[k] = out
        at = min(list(self.model.graph.node).index(n) for n in targets)
        for k, n in enumerate(new_nodes):
            self.model.graph.node.insert(at + k, n)
        return f"insert {op} on {value} before {'all readers' if everywhere else node.name}"

    def delete_op(self) -> str | None:
        g = self.model.graph
        candidates = []
        for i, node in enumerate(g.node):
            if len(node.output) != 1 or node.op_type == "Constant":
                continue
            out_type = self.types.get(node.output[0], (None,))[0]
            bypass = [x for x in node.input if x and x not in self.initializers
                      and self.types.get(x, (None,))[0] == out_type]
            if out_type and bypass:
                candidates.append((i, bypass))
        if not candidates:
            return None
        i, bypass = self.rng.choice(candidates)
        node = g.node[i]
        out, new = node.output[0], self.rng.choice(bypass)
        for n in g.node:
            for k, name in enumerate(n.input):
                if name == out:
                    n.input[k] = new
        for o in g.output:
            if o.name == out:
                o.name = new
        del g.node[i]
        self.shape_changed = True
        return f"delete {node.op_type} {node.name} (readers take {new})"

    # ---- dims and optional inputs ---------------------------------------------------------

    def dynamic_dim(self) -> str | None:
        g = self.model.graph
        options = []
        for vi in list(g.input) + list(g.output):
            for k, d in enumerate(vi.type.tensor_type.shape.dim):
                if d.HasField("dim_value"):
                    options.append((vi, k))
        reshapes = [n for n in g.node if n.op_type == "Reshape" and n.input[1] in self.initializers]
        if reshapes and (not options or self.rng.random() < 0.3):
            node = self.rng.choice(reshapes)
            t = self.initializers[node.input[1]]
            a = numpy_helper.to_array(t).copy()
            positive = [k for k, v in enumerate(a) if v > 0]
            if -1 in a or not positive:
                return None
            k = self.rng.choice(positive)
            a[k] = -1
            self.replace_tensor(t, a)
            return f"Reshape {node.name}: shape[{k}] -> -1"
        if not options:
            return None
        vi, k = self.rng.choice(options)
        d = vi.type.tensor_type.shape.dim[k]
        d.Clear()
        d.dim_param = self.fresh("dim")
        return f"dim {k} of {vi.name} made dynamic"

    def drop_optional_input(self) -> str | None:
        choices = []
        for node in self.model.graph.node:
            try:
                schema = onnx.defs.get_schema(node.op_type, self.opset(node.domain), node.domain)
            except Exception:  # noqa: BLE001 - unknown ops have no schema to consult
                continue
            formal = schema.inputs
            for j, name in enumerate(node.input):
                if name and j < len(formal) and formal[j].option == \
                        onnx.defs.OpSchema.FormalParameterOption.Optional:
                    choices.append((node, j))
        if not choices:
            return None
        node, j = self.rng.choice(choices)
        dropped = node.input[j]
        if j == len(node.input) - 1:
            del node.input[j]
        else:
            node.input[j] = ""
        self.shape_changed = True
        return f"{node.op_type} {node.name}: optional input {j} ({dropped}) dropped"


MUTATIONS = ["const_value", "const_shape", "const_dtype", "blocked_scales", "attribute", "rewire",
             "insert_op", "delete_op", "dynamic_dim", "drop_optional_input"]


def mutate(model: onnx.ModelProto, rng: random.Random, count: int) -> list[str]:
    """Applies count mutations drawn with rng; returns their descriptions."""
    m = Mutator(model, rng)
    done = []
    for _ in range(count * 4):
        if len(done) == count:
            break
        what = rng.choice(MUTATIONS)
        description = getattr(m, what)()
        if description:
            done.append(f"{what}: {description}")
            m.reindex()
    if m.shape_changed:
        # Stale shapes in value_info would only make ONNX Runtime reject the mutant.
        del model.graph.value_info[:]
    return done
