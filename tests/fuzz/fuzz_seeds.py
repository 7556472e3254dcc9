"""The fuzzer's seed models: every committed vision fixture, the committed U-Net generators (the
ConvTranspose claim) and QDQ models generated in-process from tools/qdq_models.py (nothing
downloaded, nothing cached, so a fresh clone fuzzes the same seeds)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "vision"
CONV_FIXTURES = ROOT / "tests" / "fixtures" / "conv"


def fixture_path(file: str) -> Path:
    """A committed seed fixture by file name (a regression's `base`), in whichever seed folder
    holds it."""
    conv = CONV_FIXTURES / file
    return conv if conv.exists() else FIXTURES / file

import sys  # noqa: E402  (tools/ is not a package)

sys.path.insert(0, str(ROOT / "tools"))
from qdq_models import QdqSpec, add_group, single_group_model  # noqa: E402


@dataclass(frozen=True)
class Seed:
    name: str
    # The value a symbolic dimension takes in the feeds (rows of a QDQ MatMul, batch of images).
    dim_values: tuple[tuple[str, int], ...]
    data: bytes  # the serialized model (protobuf parsing is cheaper than rebuilding)

    def model(self) -> onnx.ModelProto:
        return onnx.load_from_string(self.data)


# Small QDQ groups in every form the matcher knows: per-channel and per-tensor, int8 and uint8,
# float or quantized output, com.microsoft, float I/O (quantize_static's form), the K-axis scales
# it must refuse. Sizes stay small so a mutant runs in milliseconds.
QDQ_SPECS = {
    "qdq_per_channel": QdqSpec(k=64, n=32, zp_x=-3, zp_w=2, zp_y=1, seed=1),
    "qdq_per_tensor": QdqSpec(k=96, n=48, per_channel=False, zp_x=4, seed=2),
    "qdq_uint8": QdqSpec(k=64, n=64, x_type=np.uint8, w_type=np.uint8, y_type=np.uint8, zp_x=120,
                         zp_w=128, zp_y=128, per_channel=False, seed=3),
    "qdq_float_output": QdqSpec(k=128, n=32, with_q=False, zp_x=-40, zp_w=-5, seed=4),
    "qdq_exact": QdqSpec(k=64, n=32, exact_arithmetic=True, zp_x=-40, zp_w=-25, zp_y=-7, seed=5),
    "qdq_com_microsoft": QdqSpec(k=64, n=32, domain="com.microsoft", zp_x=5, seed=6),
    "qdq_k_axis_scales": QdqSpec(k=64, n=32, scale_axis=0, seed=7),
}


def _two_group_model() -> onnx.ModelProto:
    """Two groups reading one quantized input, the second feeding a third through a float Relu:
    shared readers and a float op between groups (what quantize_static emits for an MLP)."""
    nodes, inits = [], []
    add_group(nodes, inits, QdqSpec(k=64, n=48, zp_x=-2, zp_y=3, seed=11, name="up"), "x", "up.out")
    add_group(nodes, inits, QdqSpec(k=64, n=48, zp_x=-2, zp_y=3, seed=12, name="gate"), "x",
              "gate.out")
    nodes.append(helper.make_node("DequantizeLinear",
                                  ["gate.out", "gate.y_scale", "gate.y_zero_point"], ["gate.f"],
                                  name="gate.dq_out"))
    nodes.append(helper.make_node("Relu", ["gate.f"], ["gate.relu"], name="gate.relu"))
    nodes.append(helper.make_node("QuantizeLinear",
                                  ["gate.relu", "down.x_scale", "down.x_zero_point"], ["gate.q"],
                                  name="gate.requant"))
    add_group(nodes, inits, QdqSpec(k=48, n=64, with_q=False, zp_x=-2, seed=13, name="down"),
              "gate.q", "down.out")
    graph = helper.make_graph(
        nodes, "qdq_mlp", [helper.make_tensor_value_info("x", TensorProto.INT8, ["M", 64])],
        [helper.make_tensor_value_info("up.out", TensorProto.INT8, ["M", 48]),
         helper.make_tensor_value_info("down.out", TensorProto.FLOAT, ["M", 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def qdq_models() -> dict[str, onnx.ModelProto]:
    models = {name: single_group_model(spec) for name, spec in QDQ_SPECS.items()}
    models["qdq_float_io"] = single_group_model(QdqSpec(k=64, n=32, zp_x=-3, zp_y=2, seed=8),
                                                float_io=True)
    models["qdq_mlp"] = _two_group_model()
    return models


@lru_cache(maxsize=1)
def all_seeds() -> tuple[Seed, ...]:
    seeds = []
    for path in sorted(FIXTURES.glob("*.onnx")):
        seeds.append(Seed(path.stem, (("batch", 1),), path.read_bytes()))
    for path in sorted(CONV_FIXTURES.glob("*.onnx")):
        seeds.append(Seed(path.stem, (("batch", 1), ("height", 32), ("width", 32)),
                          path.read_bytes()))
    for name, model in qdq_models().items():
        # 32 rows reach the devices' integer paths (min_rows 16); 5 is a ragged count.
        for rows in (5, 32):
            seeds.append(Seed(f"{name}_m{rows}", (("M", rows),), model.SerializeToString()))
    return tuple(seeds)
