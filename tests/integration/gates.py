"""The agreement gates of the integration tests: an output against the CPU EP's, and the device
profile that says where the work ran.

A cosine alone ignores a uniform gain error (an output scaled by 1.01 keeps cosine 1), so every
comparison also bounds the relative L2 error ||ref - got|| / ||ref||."""
from __future__ import annotations

import gc
import re
from dataclasses import dataclass

import numpy as np

# (cosine at least, relative L2 error at most), per device: `host` is fp32 throughout; `sim`
# runs the projections in the NPU's fp16 operands with fp32 accumulation.
# `sim_attention` is sim with attention on the device too (the `attention` knob): librocketnpu's
# flash attention rounds the scores to fp16 before the softmax, whose relative error grows with the
# logits (|s| x 2^-11), and P to fp16 twice; real sentence encoders measure relL2 up to 4.2e-3
# there (docs/faithfulness.md), so its relative L2 bar is 1e-2 at the same cosine.
BARS = {
    "host": (0.99999, 1e-5),
    "sim": (0.9999, 1e-3),
    "sim_attention": (0.9999, 1e-2),
    # A model output behind a chain of claimed fp16 nodes outside an encoder (Depth Anything's
    # depth after its DPT head's 30 convolutions on the device): each node meets `sim` alone, fed
    # the CPU EP's input (test_conv_claim.py); their composition grows the relative error to ~2e-3
    # (docs/faithfulness.md), so the end-to-end bar is attention's, at the same cosine.
    "sim_chain": (0.9999, 1e-2),
}


@dataclass(frozen=True)
class Agreement:
    cosine: float
    rel_l2: float

    def __str__(self) -> str:
        return f"cosine {self.cosine:.9f} (1-cos {1 - self.cosine:.1e}), relL2 {self.rel_l2:.1e}"


def agreement(ref, got) -> Agreement:
    """Cosine and relative L2 error of got against the reference ref (same shape)."""
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    assert ref.shape == got.shape, f"shapes differ: {ref.shape} vs {got.shape}"
    ref, got = ref.ravel(), got.ravel()
    ref_norm, got_norm = np.linalg.norm(ref), np.linalg.norm(got)
    assert ref_norm > 0 and got_norm > 0, "an all-zero output cannot show agreement"
    return Agreement(float(ref @ got / (ref_norm * got_norm)),
                     float(np.linalg.norm(ref - got) / ref_norm))


def cosine(a, b) -> float:
    return agreement(a, b).cosine


def assert_matches(ref, got, device: str = "host", what: str = "") -> Agreement:
    """Asserts got agrees with ref within the device's bars, both cosine and relative L2."""
    min_cosine, max_rel_l2 = BARS[device]
    measured = agreement(ref, got)
    failures = []
    if not measured.cosine >= min_cosine:
        failures.append(f"cosine below {min_cosine}")
    if not measured.rel_l2 <= max_rel_l2:
        failures.append(f"relative L2 error above {max_rel_l2:g}")
    assert not failures, f"{what} on {device}: {' and '.join(failures)}: {measured}"
    return measured


@dataclass(frozen=True)
class DeviceProfile:
    """The counters that `prof=1` prints when an npuflow session on `sim` ends."""
    sim_calls: int
    refused: int
    failed_submits: int
    submits: int
    qdq_device_calls: int
    qdq_host_row_calls: int
    qdq_fallbacks: int
    text: str


PROFILE = re.compile(r"sim profile: (\d+) calls \((\d+) refused, (\d+) failed submits\), "
                     r"(\d+) submits")
SUMMARY = re.compile(r"session summary: \d+ fused QDQ MatMuls on \w+, (\d+) device calls, "
                     r"(\d+) host-rows calls, (\d+) fallbacks")


def parse_profile(text: str) -> DeviceProfile:
    """The one session's profile in text (stderr of a test or of the CLI)."""
    profiles, summaries = PROFILE.findall(text), SUMMARY.findall(text)
    assert len(profiles) == 1 and len(summaries) == 1, (
        f"expected one ended sim session with prof=1, found {len(profiles)} profiles and "
        f"{len(summaries)} summaries in:\n{text[-3000:]}")
    calls, refused, failed, submits = map(int, profiles[0])
    device, host_rows, fallbacks = map(int, summaries[0])
    return DeviceProfile(calls, refused, failed, submits, device, host_rows, fallbacks, text)


def ended_session_profile(capfd) -> DeviceProfile:
    """Parses the profile of the npuflow session the caller has just dropped (its last reference
    deleted): the EP prints it when the session is destroyed, which gc.collect() makes certain."""
    gc.collect()
    return parse_profile(capfd.readouterr().err)


def assert_every_call_on_the_device(profile: DeviceProfile) -> None:
    """The simulated device ran every call: there were calls, none refused or failed, and no
    fused QDQ MatMul ran rows on the host or fell back."""
    assert profile.sim_calls > 0, f"nothing ran on the device:\n{profile.text[-3000:]}"
    assert (profile.refused, profile.failed_submits, profile.qdq_fallbacks,
            profile.qdq_host_row_calls) == (0, 0, 0, 0), (
        f"some calls did not run on the device:\n{profile.text[-3000:]}")
    assert "refused a" not in profile.text, "a projection fell back to the host"


def one_ulp_moves(model, trials: int = 4, seed: int = 0) -> list[bytes]:
    """`trials` copies of the ONNX model (a path or a ModelProto) with a random tenth of the
    elements of every 1-D float initializer of more than 16 elements (norm gains and biases,
    projection biases; not a Resize's scales) moved by one ulp up or down, seeded: how far the CPU EP itself moves under last-bit differences is the
    floor of a gate on a model whose dynamic quantization amplifies them (a rounding that flips in
    the element that sets a DynamicQuantizeLinear's range moves every value it quantizes)."""
    import onnx
    from onnx import numpy_helper

    base = onnx.load(model) if isinstance(model, str) else model
    rng = np.random.default_rng(seed)
    moved_models = []
    for _ in range(trials):
        moved = onnx.ModelProto()
        moved.CopyFrom(base)
        for init in moved.graph.initializer:
            if init.data_type != onnx.TensorProto.FLOAT or len(init.dims) != 1 or \
                    init.dims[0] <= 16:
                continue
            values = numpy_helper.to_array(init).copy()
            pick = rng.random(values.shape) < 0.1
            way = np.where(rng.random(int(pick.sum())) < 0.5, np.inf, -np.inf).astype(np.float32)
            values[pick] = np.nextafter(values[pick], way)
            init.CopyFrom(numpy_helper.from_array(values, init.name))
        moved_models.append(moved.SerializeToString())
    return moved_models


def exact_integer_model(model: str) -> str:
    """The model at `model` with every MatMulInteger computed exactly by the CPU EP: its operands
    cast to double less their zero points, a double MatMul (every int8 sum is exact below 2^53)
    and a Cast to int32; everything else as written. Saved beside it; returns the path.

    The graph's definition, which npuflow computes. The CPU EP's own MatMulInteger is that on a
    machine with VNNI; on x86 without it its u8 x s8 kernels add pairs of products in int16 with
    saturation (pmaddubsw), so its outputs of an int8-weight model are not the graph's there.
    """
    import onnx
    from onnx import TensorProto, helper

    proto = onnx.load(model)
    nodes = []
    for node in proto.graph.node:
        if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        base = f"{node.output[0]}__exact"
        operands = []
        for side, (value, zero_point) in enumerate(
                ((node.input[0], node.input[2] if len(node.input) > 2 else ""),
                 (node.input[1], node.input[3] if len(node.input) > 3 else ""))):
            wide = f"{base}_{side}"
            nodes.append(helper.make_node("Cast", [value], [wide], to=TensorProto.DOUBLE))
            if zero_point:
                nodes.append(helper.make_node("Cast", [zero_point], [f"{wide}_zp"],
                                              to=TensorProto.DOUBLE))
                nodes.append(helper.make_node("Sub", [wide, f"{wide}_zp"], [f"{wide}_centred"]))
                wide = f"{wide}_centred"
            operands.append(wide)
        nodes.append(helper.make_node("MatMul", operands, [f"{base}_sum"]))
        nodes.append(helper.make_node("Cast", [f"{base}_sum"], [node.output[0]],
                                      to=TensorProto.INT32))
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    out = f"{model[:-len('.onnx')] if model.endswith('.onnx') else model}.exact-integer.onnx"
    onnx.save(proto, out)
    return out
