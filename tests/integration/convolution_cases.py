"""What the Conv and ConvTranspose claim tests share: a one-node graph of a case (a dict of
channels, kernel, attributes, bias and opset), and the check each case of their seeded matrices
must pass on every device."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEVICES = ("host", "sim")
ATTRIBUTES = {"Conv": ("strides", "pads", "dilations", "group"),
              "ConvTranspose": ("strides", "pads", "output_padding", "dilations", "group")}


def single_convolution(op: str, rng, case: dict, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """x [n, ic, h, w] -> op -> y, the weight (and the bias, where the case has one) drawn from
    rng: Conv's [oc, ic / group, kh, kw], ConvTranspose's [ic, oc, kh, kw], scaled by the taps
    each output sums. `x_channels` in the case declares another input width (a mismatch)."""
    ic, oc, (kh, kw) = case["ic"], case["oc"], case["kernel"]
    group = case.get("group", 1) if op == "Conv" else 1
    shape = (oc, ic // group, kh, kw) if op == "Conv" else (ic, oc, kh, kw)
    weight = (rng.standard_normal(shape) / np.sqrt(ic * kh * kw / group)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w")]
    inputs = ["x", "w"]
    if case.get("bias"):
        inits.append(numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "b"))
        inputs.append("b")
    attrs = {k: case[k] for k in ATTRIBUTES[op] if k in case}
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], name="node", **attrs)], "single",
        [helper.make_tensor_value_info("x", dtype, ["n", case.get("x_channels", ic), "h", "w"])],
        [helper.make_tensor_value_info("y", dtype, ["n", "c", "oh", "ow"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.get("opset", 17))])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def assert_claimed_alone_within_the_gate(case: dict, matcher: str, run_on):
    """run_on(device) runs the case's graph with the CPU EP and npuflow on `device`, asserts the
    gate, and returns (the claim records, the worst relative L2). On each device the node must be
    claimed with the case's attributes; on sim its error must show fp16 (the device ran it)."""
    for device in DEVICES:
        records, worst = run_on(device)
        if device == "sim":
            assert worst > 1e-5, (case, worst)
        [record] = [r for r in records if r.get("matcher") == matcher]
        assert len(record["claims"]) == 1, (case, record["refusals"])
        [claim] = record["claims"]
        for key in ("pads", "strides", "dilations"):
            if key in case:
                assert claim[key] == case[key], (key, claim)
