"""Builds A8W8 QDQ ONNX models (DequantizeLinear -> MatMul [-> QuantizeLinear]) for npuflow's demo,
tests and benchmarks. Random weights with a fixed seed; nothing is downloaded.

    python tools/qdq_models.py demo OUT.onnx   # the Qwen3-0.6B-shaped layer of `make demo`
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Qwen3-0.6B: hidden 1024, 16 query heads x 128 = 2048, 8 KV heads x 128 = 1024, MLP 3072.
QWEN3_PROJECTIONS = {
    "q_proj": (1024, 2048),
    "k_proj": (1024, 1024),
    "v_proj": (1024, 1024),
    "o_proj": (2048, 1024),
    "gate_proj": (1024, 3072),
    "up_proj": (1024, 3072),
    "down_proj": (3072, 1024),
}

# What each projection reads, and those inputs' widths.
QWEN3_SOURCES = {"q_proj": "hidden", "k_proj": "hidden", "v_proj": "hidden", "gate_proj": "hidden",
                 "up_proj": "hidden", "o_proj": "attention", "down_proj": "mlp"}
QWEN3_INPUT_WIDTHS = {"hidden": 1024, "attention": 2048, "mlp": 3072}

ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


@dataclass
class QdqSpec:
    """One QDQ MatMul group. Scales are float32; zero points in the integer type."""

    k: int
    n: int
    x_type: type = np.int8
    w_type: type = np.int8
    per_channel: bool = True
    x_scale: float = 0.02
    zp_x: int = 0
    zp_w: int | list[int] = 0
    zp_y: int = 0
    y_scale: float = 0.5
    y_type: type = np.int8
    with_q: bool = True
    domain: str = ""  # "" (ai.onnx) or "com.microsoft"
    scale_axis: int = 1  # 0 puts the weight scales along K: a group npuflow must refuse
    exact_arithmetic: bool = False  # power-of-two scales and small magnitudes, see below
    seed: int = 0
    name: str = "mm"
    w_scales: np.ndarray | None = field(default=None, repr=False)


def _range(t):
    info = np.iinfo(t)
    return int(info.min), int(info.max)


def make_weights(spec: QdqSpec):
    """Returns (w, w_scales, w_zero_points) for a spec.

    With exact_arithmetic every scale is a power of two and |w - zp_w| <= 15, so that the CPU EP's
    float path (DQ -> float MatMul -> Q) computes exactly the integer result for |x - zp_x| <= 15
    and K <= 3072 (every partial sum stays below 2^24): any difference is then npuflow's.
    """
    rng = np.random.default_rng(spec.seed)
    lo, hi = _range(spec.w_type)
    count = spec.n if spec.scale_axis == 1 else spec.k
    zp = np.broadcast_to(np.asarray(spec.zp_w, dtype=np.int64), (count if spec.per_channel else 1,))
    if spec.exact_arithmetic:
        w = rng.integers(-15, 16, size=(spec.k, spec.n)) + (zp[None, :] if spec.scale_axis == 1 and spec.per_channel else zp[0])
        scales = (2.0 ** -rng.integers(6, 10, size=count)).astype(np.float32)
    else:
        w = rng.integers(lo, hi + 1, size=(spec.k, spec.n))
        scales = rng.uniform(0.002, 0.02, size=count).astype(np.float32)
    if not spec.per_channel:
        scales = scales[:1]
    w = np.clip(w, lo, hi).astype(spec.w_type)
    return w, scales, zp.astype(spec.w_type)


def make_activations(spec: QdqSpec, m: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    lo, hi = _range(spec.x_type)
    if spec.exact_arithmetic:
        x = rng.integers(-15, 16, size=(m, spec.k)) + spec.zp_x
    else:
        x = rng.integers(lo, hi + 1, size=(m, spec.k))
    return np.clip(x, lo, hi).astype(spec.x_type)


def _scalar(name, value, dtype):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def add_group(graph_nodes, initializers, spec: QdqSpec, x_quantized: str, output: str):
    """Appends DQ(x), DQ(W), MatMul and, if spec.with_q, Q(y) to a graph under construction."""
    p = spec.name
    w, w_scales, w_zp = make_weights(spec)
    x_scale = 2.0 ** -5 if spec.exact_arithmetic else spec.x_scale
    y_scale = 2.0 ** -2 if spec.exact_arithmetic else spec.y_scale
    initializers += [
        numpy_helper.from_array(w, f"{p}.weight"),
        numpy_helper.from_array(w_scales if spec.per_channel else w_scales.reshape(()), f"{p}.w_scale"),
        numpy_helper.from_array(w_zp if spec.per_channel else w_zp.reshape(()), f"{p}.w_zero_point"),
        _scalar(f"{p}.x_scale", x_scale, np.float32),
        _scalar(f"{p}.x_zero_point", spec.zp_x, spec.x_type),
    ]
    dq_attrs = {"axis": spec.scale_axis} if spec.per_channel else {}
    graph_nodes.append(helper.make_node("DequantizeLinear", [x_quantized, f"{p}.x_scale", f"{p}.x_zero_point"],
                                        [f"{p}.x_dq"], name=f"{p}.dq_x", domain=spec.domain))
    graph_nodes.append(helper.make_node("DequantizeLinear", [f"{p}.weight", f"{p}.w_scale", f"{p}.w_zero_point"],
                                        [f"{p}.w_dq"], name=f"{p}.dq_w", domain=spec.domain, **dq_attrs))
    matmul_out = f"{p}.y" if spec.with_q else output
    graph_nodes.append(helper.make_node("MatMul", [f"{p}.x_dq", f"{p}.w_dq"], [matmul_out], name=p))
    if spec.with_q:
        initializers += [_scalar(f"{p}.y_scale", y_scale, np.float32),
                         _scalar(f"{p}.y_zero_point", spec.zp_y, spec.y_type)]
        graph_nodes.append(helper.make_node("QuantizeLinear", [matmul_out, f"{p}.y_scale", f"{p}.y_zero_point"],
                                            [output], name=f"{p}.q_y", domain=spec.domain))


def _opsets(domains):
    opsets = [helper.make_opsetid("", 21)]
    if "com.microsoft" in domains:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    return opsets


def single_group_model(spec: QdqSpec, rows="M", float_io=False) -> onnx.ModelProto:
    """One group. With float_io the model takes and returns float (a QuantizeLinear in front, a
    DequantizeLinear behind), the form quantize_static emits: only then does the CPU EP at
    ORT_ENABLE_ALL fuse the group into its own QLinearMatMul (it leaves groups that read a graph
    input or write a graph output unfused)."""
    nodes, inits = [], []
    add_group(nodes, inits, spec, "x", "y")
    out_type = ONNX_TYPE[spec.y_type] if spec.with_q else TensorProto.FLOAT
    x_in, y_out, x_type = "x", "y", ONNX_TYPE[spec.x_type]
    if float_io:
        x_in, x_type = "x_float", TensorProto.FLOAT
        nodes.insert(0, helper.make_node("QuantizeLinear", [x_in, "mm.x_scale", "mm.x_zero_point"], ["x"],
                                         name="quantize_input"))
        if spec.with_q:
            y_out, out_type = "y_float", TensorProto.FLOAT
            nodes.append(helper.make_node("DequantizeLinear", ["y", "mm.y_scale", "mm.y_zero_point"], [y_out],
                                          name="dequantize_output"))
    graph = helper.make_graph(
        nodes, "qdq_matmul", [helper.make_tensor_value_info(x_in, x_type, [rows, spec.k])],
        [helper.make_tensor_value_info(y_out, out_type, [rows, spec.n])], inits)
    model = helper.make_model(graph, opset_imports=_opsets({spec.domain}))
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def demo_layer_model(rows=32, seed=0, per_channel=True) -> onnx.ModelProto:
    """Seven A8W8 projections of one Qwen3-0.6B layer in the form quantize_static emits: float
    inputs, quantized and dequantized once per reader; every projection's int8
    output is dequantized to a float graph output. o_proj reads the attention output and
    down_proj the MLP activation. The CPU EP at ORT_ENABLE_ALL fuses every group into
    QLinearMatMul, so it is compared at its best."""
    sources, widths = QWEN3_SOURCES, QWEN3_INPUT_WIDTHS
    nodes, inits, outputs = [], [], []
    for i, (name, (k, n)) in enumerate(QWEN3_PROJECTIONS.items()):
        spec = QdqSpec(k=k, n=n, per_channel=per_channel, zp_x=-3, zp_y=1, seed=seed + i, name=name)
        group_nodes, group_inits = [], []
        add_group(group_nodes, group_inits, spec, sources[name], f"{name}.out")
        nodes += group_nodes
        inits += group_inits
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}.out", f"{name}.y_scale", f"{name}.y_zero_point"],
                                      [name], name=f"{name}.dq_out"))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [rows, n]))
    # One QuantizeLinear per reader: the CPU EP leaves a group unfused when its input Q feeds
    # several groups, and the comparison is meant against the CPU EP at its best.
    for name in QWEN3_PROJECTIONS:
        src = sources[name]
        nodes.insert(0, helper.make_node("QuantizeLinear", [f"{src}_float", f"{name}.x_scale",
                                                            f"{name}.x_zero_point"], [f"{name}.x"],
                                         name=f"{name}.quantize"))
        for node in nodes:
            if node.name == f"{name}.dq_x":
                node.input[0] = f"{name}.x"
    inputs = [helper.make_tensor_value_info(f"{s}_float", TensorProto.FLOAT, [rows, w]) for s, w in widths.items()]
    graph = helper.make_graph(nodes, "qwen3_layer_projections", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=_opsets({""}))
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def demo_layer_float_model(rows=32, seed=0) -> onnx.ModelProto:
    """The demo layer's seven projections in float form: plain MatMuls with Gaussian weights
    (std 1/sqrt(K), as a trained layer's are in scale), what NPUFLOW_FLOAT_MATMUL=int8 takes."""
    sources, widths = QWEN3_SOURCES, QWEN3_INPUT_WIDTHS
    rng = np.random.default_rng(seed)
    nodes, inits, outputs = [], [], []
    for name, (k, n) in QWEN3_PROJECTIONS.items():
        w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}.weight"))
        nodes.append(helper.make_node("MatMul", [f"{sources[name]}_float", f"{name}.weight"], [name],
                                      name=f"{name}.matmul"))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [rows, n]))
    inputs = [helper.make_tensor_value_info(f"{s}_float", TensorProto.FLOAT, [rows, w]) for s, w in widths.items()]
    graph = helper.make_graph(nodes, "qwen3_layer_projections_float", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=_opsets({""}))
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["demo"])
    parser.add_argument("output")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--per-tensor", action="store_true")
    args = parser.parse_args()
    model = demo_layer_model(rows=args.rows, per_channel=not args.per_tensor)
    onnx.save(model, args.output)
    print(f"wrote {args.output}: {len(model.graph.node)} nodes, rows={args.rows}")


if __name__ == "__main__":
    main()
