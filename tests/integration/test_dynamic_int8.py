"""Dynamic int8 groups (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add]) as
onnxruntime.quantization.quantize_dynamic writes them, generated here from float models over a
seeded matrix of shapes and options, claimed as one fused node each.

Two references: the exact one (numpy, int64 sums, the graph's fp32 operations one by one), which
npuflow must match to the bit, and the CPU EP. The CPU EP's u8s8 kernels on a machine without
VNNI add pairs of u8*s8 products in int16 with saturation (pmaddubsw), so where those pairs
overflow its sums are not the exact ones; every element where npuflow and the CPU EP differ must
be one where the CPU EP differs from the exact reference, and the counts are printed."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import LEVELS, claimed, refusal_reasons
from gates import ended_session_profile

quantization = pytest.importorskip("onnxruntime.quantization")


@dataclass(frozen=True)
class Case:
    k: int
    n: int
    rows: tuple  # leading dims of x
    per_channel: bool
    weight_type: str  # "QInt8" | "QUInt8"
    bias: bool
    opset: int
    reduce_range: bool = False
    consumers: int = 1  # MatMuls reading the same x (one shared DynamicQuantizeLinear)

    @property
    def name(self) -> str:
        return (f"k{self.k}n{self.n}r{'x'.join(map(str, self.rows))}-"
                f"{'pc' if self.per_channel else 'pt'}-{self.weight_type}-"
                f"{'bias' if self.bias else 'nobias'}-op{self.opset}"
                f"{'-rr' if self.reduce_range else ''}-c{self.consumers}")


def float_model(case: Case, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes, outputs = [], [], []
    for c in range(case.consumers):
        w = (rng.standard_normal((case.k, case.n)) / np.sqrt(case.k)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{c}"))
        mm_out = f"mm{c}" if case.bias else f"y{c}"
        nodes.append(helper.make_node("MatMul", ["x", f"W{c}"], [mm_out], name=f"MatMul{c}"))
        if case.bias:
            b = rng.standard_normal(case.n).astype(np.float32)
            inits.append(numpy_helper.from_array(b, f"B{c}"))
            nodes.append(helper.make_node("Add", [f"B{c}", mm_out], [f"y{c}"], name=f"Add{c}"))
        outputs.append(helper.make_tensor_value_info(f"y{c}", TensorProto.FLOAT,
                                                     [*case.rows, case.n]))
    graph = helper.make_graph(
        nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         [*case.rows, case.k])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8
    return model


def quantized_model(case: Case, tmp_path: Path, seed: int) -> str:
    source = tmp_path / f"{case.name}-f32.onnx"
    target = tmp_path / f"{case.name}-q.onnx"
    onnx.save(float_model(case, seed), str(source))
    quantization.quantize_dynamic(str(source), str(target), per_channel=case.per_channel,
                                  reduce_range=case.reduce_range,
                                  weight_type=getattr(quantization.QuantType, case.weight_type))
    ops = [n.op_type for n in onnx.load(str(target)).graph.node]
    assert ops.count("MatMulInteger") == case.consumers, ops
    assert ops.count("DynamicQuantizeLinear") == 1, ops
    return str(target)


def exact_reference(path: str, x: np.ndarray) -> list[np.ndarray]:
    """The quantized graph's definition in exact arithmetic: DynamicQuantizeLinear in fp32 as ONNX
    Runtime computes it, the integer sum in int64, then Cast, Mul, Add one fp32 op at a time."""
    model = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    f32 = np.float32
    lo, hi = min(f32(0), x.min()), max(f32(0), x.max())
    scale = f32(1) if hi == lo else f32(f32(hi - lo) / f32(255))
    zp = np.rint(np.clip(f32(0) - f32(lo / scale), 0, 255)).astype(np.int64)
    q = np.rint(np.clip(x / scale, -zp, 255 - zp).astype(f32)).astype(np.int64) + zp
    outputs = []
    for node in (n for n in model.graph.node if n.op_type == "MatMulInteger"):
        w = inits[node.input[1]].astype(np.int64)
        w_zp = inits[node.input[3]].astype(np.int64)
        acc = (q - zp) @ (w - w_zp)
        assert np.abs(acc).max() < 2**31
        scale_mul = next(n for n in model.graph.node
                         if n.op_type == "Mul" and node.input[1].replace("_quantized", "_scale")
                         in n.input)
        w_scale = inits[[i for i in scale_mul.input if i in inits][0]]
        y = acc.astype(f32) * (scale * w_scale).astype(f32)
        outputs.append(y)
    return outputs


def apply_bias(path: str, outputs: list[np.ndarray]) -> list[np.ndarray]:
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    return [y + inits[f"B{c}"] if f"B{c}" in inits else y for c, y in enumerate(outputs)]


def compare(case: Case, cpu_out, npu_out, exact_out) -> tuple[int, int]:
    """npuflow must equal the exact reference; returns (values, values where the CPU EP differs
    from npuflow), each of them explained by a CPU EP difference from the exact reference."""
    total = differ = 0
    for cpu, npu, exact in zip(cpu_out, npu_out, exact_out):
        np.testing.assert_array_equal(npu, exact, err_msg=case.name)
        mismatch = npu != cpu
        unexplained = mismatch & (cpu == exact)
        assert not unexplained.any(), f"{case.name}: {int(unexplained.sum())} unexplained"
        total += npu.size
        differ += int(mismatch.sum())
    return total, differ


SHAPES = [(32, 16), (64, 48), (384, 384), (384, 1536), (1536, 384), (100, 70)]
ROWS = [(1, 7), (2, 5, 3), (4, 32)]


def matrix(count: int, seed: int) -> list[Case]:
    """A seeded draw over every option quantize_dynamic takes for MatMul."""
    rng = np.random.default_rng(seed)
    cases = []
    for per_channel, weight_type, bias in itertools.product(
            [False, True], ["QInt8", "QUInt8"], [False, True]):
        for _ in range(count):
            k, n = SHAPES[rng.integers(len(SHAPES))]
            rows = ROWS[rng.integers(len(ROWS))]
            cases.append(Case(k, n, rows, per_channel, weight_type, bias,
                              opset=int(rng.choice([11, 13, 17, 21])),
                              reduce_range=bool(rng.integers(2)),
                              consumers=int(rng.choice([1, 1, 3]))))
    return cases


CASES = matrix(2, seed=13)


def run_case(sessions, tmp_path, case: Case, level="disable", options=None, seed=0):
    path = quantized_model(case, tmp_path, seed)
    cpu = sessions.cpu(path, level)
    npu, records = sessions.npuflow(path, level, {"device": "host", **(options or {})})
    integer = [r for r in records if r["matcher"] == "integer"]
    assert claimed(integer) == case.consumers, (case.name, integer)
    x = (np.random.default_rng(seed + 1).standard_normal((*case.rows, case.k)) * 3).astype(
        np.float32)
    x[..., 0] += 2.0  # an asymmetric range, so the activation zero point is not 128
    cpu_out = cpu.run(None, {"x": x})
    npu_out = npu.run(None, {"x": x})
    exact = apply_bias(path, exact_reference(path, x))
    return integer, cpu_out, npu_out, exact


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_quantize_dynamic_matrix_is_exact(sessions, tmp_path, case):
    integer, cpu_out, npu_out, exact = run_case(sessions, tmp_path, case)
    inside = case.consumers == 1
    for claim in integer[0]["claims"]:
        assert claim["kind"] == "integer_matmul"
        # DynamicQuantizeLinear, the scale Mul, MatMulInteger, Cast, Mul [, Add]; a shared
        # DynamicQuantizeLinear stays on the CPU EP.
        assert len(claim["nodes"]) == (5 if inside else 4) + case.bias, claim
    total, differ = compare(case, cpu_out, npu_out, exact)
    print(f"{case.name}: {differ} of {total} values differ from the CPU EP "
          "(each one a CPU EP difference from the exact sum)")


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_every_optimization_level(sessions, tmp_path, level):
    """At `all` the CPU EP fuses its own copy into DynamicQuantizeMatMul, whose epilogue scales
    in one step: there it may differ by 1 ulp, and the count is printed."""
    case = Case(384, 384, (2, 9), True, "QInt8", True, opset=13)
    _, cpu_out, npu_out, exact = run_case(sessions, tmp_path, case, level=level)
    for cpu, npu, ex in zip(cpu_out, npu_out, exact):
        np.testing.assert_array_equal(npu, ex)
        ulps = np.abs(cpu.view(np.int32).astype(np.int64) - npu.view(np.int32).astype(np.int64))
        far = (ulps > 1) & (cpu == ex)
        assert not far.any(), f"{int(far.sum())} values more than 1 ulp from the CPU EP"
        print(f"level {level}: {int((ulps == 1).sum())} of {npu.size} at 1 ulp, "
              f"{int((ulps > 1).sum())} further (CPU EP sum saturated)")


def test_sim_runs_the_gemm_on_the_device(sessions, tmp_path, capfd):
    case = Case(384, 1536, (2, 5, 3), True, "QUInt8", True, opset=13)
    options = {"device": "sim", "min_rows": "1", "prof": "1"}
    _, cpu_out, npu_out, exact = run_case(sessions, tmp_path, case, options=options)
    compare(case, cpu_out, npu_out, exact)
    profile = ended_session_profile(capfd)
    # 30 rows, padded to the RK3588's M % 4: one call, on the simulated NPU, none refused.
    assert profile.sim_calls == 1 and profile.submits > 0


def test_refusals_are_reported(sessions, tmp_path):
    """The knob turns the matcher off; the CPU EP then runs everything unchanged."""
    case = Case(64, 48, (1, 7), False, "QInt8", False, opset=13)
    path = quantized_model(case, tmp_path, 0)
    _, records = sessions.npuflow(path, "disable", {"qdq": "0"})
    integer = [r for r in records if r["matcher"] == "integer"]
    assert claimed(integer) == 0 and refusal_reasons(integer) == ["disabled_by_knob"]


@pytest.mark.parametrize("verify", [False, True], ids=["unverified", "verified"])
def test_verify_catches_a_corrupted_device_and_keeps_the_output_exact(sessions, tmp_path, capfd,
                                                                       verify):
    """sim_corrupt_every=1 corrupts every device result: without verify it reaches the output;
    with verify=1 the first device run is checked against the host group, the node is disabled
    and every output (the first included) is the exact one."""
    from test_verified_claims import verify_summary

    case = Case(384, 384, (4, 8), True, "QInt8", True, opset=13)
    path = quantized_model(case, tmp_path, 3)
    options = {"device": "sim", "min_rows": "1", "prof": "1", "sim_corrupt_every": "1"}
    if verify:
        options["verify"] = "1"
    npu, records = sessions.npuflow(path, "disable", options)
    assert claimed([r for r in records if r["matcher"] == "integer"]) == 1
    runs = 3
    outputs = []
    for seed in range(runs):
        x = np.random.default_rng(seed).standard_normal((*case.rows, case.k)).astype(np.float32)
        outputs.append((npu.run(None, {"x": x})[0], apply_bias(path, exact_reference(path, x))[0]))
    del npu
    profile = ended_session_profile(capfd)
    if verify:
        for got, exact in outputs:
            np.testing.assert_array_equal(got, exact)
        assert verify_summary(profile.text) == (1, 1, runs - 1)
    else:
        assert all(not np.array_equal(got, exact) for got, exact in outputs)


def test_a_runtime_right_operand_is_refused(sessions, tmp_path):
    """MatMulConstBOnly=False quantizes a MatMul of two runtime values too (two
    DynamicQuantizeLinear nodes): there is no weight to pack, so the group is refused with a
    reason and the CPU EP runs it unchanged."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "y"], ["z"], name="MatMul")], "runtime_b",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 32]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    source, target = tmp_path / "runtime_b.onnx", tmp_path / "runtime_b-q.onnx"
    onnx.save(model, str(source))
    quantization.quantize_dynamic(str(source), str(target),
                                  extra_options={"MatMulConstBOnly": False})
    ops = [n.op_type for n in onnx.load(str(target)).graph.node]
    assert ops.count("MatMulInteger") == 1 and ops.count("DynamicQuantizeLinear") == 2, ops
    npu, records = sessions.npuflow(str(target), "disable")
    integer = [r for r in records if r["matcher"] == "integer"]
    assert claimed(integer) == 0 and refusal_reasons(integer) == ["weight_not_constant"]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((3, 32)).astype(np.float32),
             "y": rng.standard_normal((32, 16)).astype(np.float32)}
    np.testing.assert_array_equal(npu.run(None, feeds)[0],
                                  sessions.cpu(str(target), "disable").run(None, feeds)[0])
