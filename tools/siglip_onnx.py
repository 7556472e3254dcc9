"""A SigLIP vision encoder (google/siglip-base-patch16-224's configuration by default) written
directly as an ONNX graph with onnx.helper and numpy: random weights under a fixed seed, no torch,
nothing downloaded. The graph has the form exporters give it at opset 17: a patch Conv, learned
position embeddings, pre-norm layers with LayerNormalization, separate q/k/v projections,
eager attention (scores scaled, Softmax), tanh-GELU MLP, and the post-LayerNorm.

    python tools/siglip_onnx.py OUT.onnx                  # SigLIP-B/16 at 224 px (86 M weights)
    python tools/siglip_onnx.py OUT.onnx --small          # a 2-layer d=64 one, for tests
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass(frozen=True)
class SiglipConfig:
    image: int = 224
    patch: int = 16
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    ffn: int = 3072
    eps: float = 1e-6

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2


BASE = SiglipConfig()
SMALL = SiglipConfig(image=32, patch=8, hidden=64, layers=2, heads=4, ffn=128)


class Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def weight(self, name, shape, scale):
        array = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type, inputs, **attrs):
        self.count += 1
        out = f"{op_type.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"/{op_type}_{self.count}",
                                           **attrs))
        return out

    def linear(self, x, prefix, k, n):
        w = self.weight(f"{prefix}.weight", (k, n), 1 / math.sqrt(k))
        b = self.weight(f"{prefix}.bias", (n,), 0.02)
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x, prefix, width, eps):
        gamma = self.const(f"{prefix}.weight",
                           (1 + 0.1 * self.rng.standard_normal(width)).astype(np.float32))
        beta = self.weight(f"{prefix}.bias", (width,), 0.02)
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=eps)


def build(config: SiglipConfig, seed: int = 1234) -> onnx.ModelProto:
    c, b = config, Builder(seed)
    d, t, h = c.hidden, c.tokens, c.heads
    hd = d // h
    patch_w = b.weight("embeddings.patch_embedding.weight", (d, 3, c.patch, c.patch),
                       1 / math.sqrt(3 * c.patch * c.patch))
    patch_b = b.weight("embeddings.patch_embedding.bias", (d,), 0.02)
    x = b.op("Conv", ["pixel_values", patch_w, patch_b], kernel_shape=[c.patch, c.patch],
             strides=[c.patch, c.patch])
    x = b.op("Reshape", [x, b.const("shape_bdt", np.array([1, d, t], np.int64))])
    x = b.op("Transpose", [x], perm=[0, 2, 1])
    x = b.op("Add", [x, b.weight("embeddings.position_embedding", (1, t, d), 0.02)])
    heads_shape = b.const("shape_heads", np.array([1, t, h, hd], np.int64))
    merged_shape = b.const("shape_merged", np.array([1, t, d], np.int64))
    scale = b.const("attention_scale", np.array(1 / math.sqrt(hd), np.float32))
    half, one = b.const("half", np.array(0.5, np.float32)), b.const("one", np.array(1, np.float32))
    cubic = b.const("gelu_cubic", np.array(0.044715, np.float32))
    root = b.const("gelu_root", np.array(math.sqrt(2 / math.pi), np.float32))
    three = b.const("three", np.array(3, np.float32))
    for i in range(c.layers):
        p = f"encoder.layers.{i}"
        y = b.layer_norm(x, f"{p}.layer_norm1", d, c.eps)
        q = b.op("Transpose", [b.op("Reshape", [b.linear(y, f"{p}.self_attn.q_proj", d, d),
                                                heads_shape])], perm=[0, 2, 1, 3])
        k = b.op("Transpose", [b.op("Reshape", [b.linear(y, f"{p}.self_attn.k_proj", d, d),
                                                heads_shape])], perm=[0, 2, 3, 1])
        v = b.op("Transpose", [b.op("Reshape", [b.linear(y, f"{p}.self_attn.v_proj", d, d),
                                                heads_shape])], perm=[0, 2, 1, 3])
        scores = b.op("Mul", [b.op("MatMul", [q, k]), scale])
        probs = b.op("Softmax", [scores], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, merged_shape])
        x = b.op("Add", [x, b.linear(ctx, f"{p}.self_attn.out_proj", d, d)])
        y = b.layer_norm(x, f"{p}.layer_norm2", d, c.eps)
        u = b.linear(y, f"{p}.mlp.fc1", d, c.ffn)
        # gelu_pytorch_tanh: 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))
        inner = b.op("Mul", [root, b.op("Add", [u, b.op("Mul", [cubic,
                                                                b.op("Pow", [u, three])])])])
        g = b.op("Mul", [b.op("Mul", [half, u]), b.op("Add", [one, b.op("Tanh", [inner])])])
        x = b.op("Add", [x, b.linear(g, f"{p}.mlp.fc2", c.ffn, d)])
    out = b.layer_norm(x, "post_layernorm", d, c.eps)
    b.nodes.append(helper.make_node("Identity", [out], ["last_hidden_state"], name="/output"))
    graph = helper.make_graph(
        b.nodes, "siglip_vision",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT,
                                       [1, 3, c.image, c.image])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, t, d])],
        b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="npuflow tools/siglip_onnx.py")
    model.ir_version = 8
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args()
    model = build(SMALL if args.small else BASE)
    onnx.checker.check_model(model)
    onnx.save(model, args.out)


if __name__ == "__main__":
    main()
