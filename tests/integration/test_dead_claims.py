"""A claimed node whose results nothing reads, for every kind of claim.

ONNX Runtime keeps a node whose outputs no node and no graph output reads (at least with its
optimizations off), and a fused node's kernel then gets no buffer for such an output:
KernelContext_GetOutput succeeds and hands back null. The fuzz batch found one such crash (a dead
Conv after a rewire); this file makes the case on purpose for each claim kind.

Each model gets a dead twin: every node copied, reading the original's graph inputs and constants
and its own copies of the intermediate values, and nothing reads what the copies produce. The twin
must change nothing: with npuflow loaded, the model with its twin gives the outputs of the model
alone, bit for bit, and the report shows the twin's nodes were claimed (else this proves
nothing). Each session runs in a child process (this file run as a script), so a crash fails its
test instead of ending pytest.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import EP_LIBRARY, EP_NAME
from qdq_models import demo_layer_float_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))  # fuzz_seeds: the QDQ seed models
TWIN = "__dead"
CHILD_TIMEOUT_S = 300


def dead_twin(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model plus a copy of all its nodes whose results nothing reads."""
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    produced = {o for n in model.graph.node for o in n.output if o}
    copies = []
    for index, node in enumerate(model.graph.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = f"{node.name or f'node{index}'}{TWIN}"
        copy.input[:] = [x + TWIN if x in produced else x for x in node.input]
        copy.output[:] = [o + TWIN if o else o for o in node.output]
        copies.append(copy)
    twin.graph.node.extend(copies)
    return twin


def vision_case(file: str, device: str):
    from vision_fixtures import FIXTURES, pixels
    path = FIXTURES / file
    return onnx.load(str(path)), pixels(path), {}


def conv_case(file: str, device: str):
    model = onnx.load(str(ROOT / "tests" / "fixtures" / "conv" / file))
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return model, {model.graph.input[0].name: x}, {}


def qdq_case(device: str):
    from fuzz_seeds import qdq_models
    x = np.random.default_rng(4).integers(-128, 128, (32, 64)).astype(np.int8)
    return qdq_models()["qdq_mlp"], {"x": x}, {}


def integer_case(device: str, tmp_path: Path):
    from test_dynamic_int8 import Case, quantized_model
    case = Case(k=64, n=48, rows=(32,), per_channel=True, weight_type="QInt8", bias=True,
                opset=17, consumers=2)
    x = np.random.default_rng(5).standard_normal((32, 64)).astype(np.float32)
    return onnx.load(quantized_model(case, tmp_path, seed=5)), {"x": x}, {}


def float_matmul_case(device: str):
    from test_float_matmul_int8 import demo_feeds
    return demo_layer_float_model(), demo_feeds(), {"float_matmul": "int8"}


def program_case(device: str):
    from test_tensor_program import generate
    model, feeds, _ = generate(20261206, 3)
    return model, feeds, {"program_ops": "1"}


# (case, the claim kinds its twin must show, devices): the program interpreter runs on the host
# whatever the device.
CASES = {
    "vision_encoder": (lambda d, t: vision_case("vit_encoder_torchscript.onnx", d),
                       {"vision_encoder"}, ("host", "sim")),
    "encoder_multi_exit": (lambda d, t: vision_case("dinov2_registers_dynamo.onnx", d),
                           {"vision_encoder"}, ("host", "sim")),
    "conv_and_conv_transpose": (lambda d, t: conv_case("unet_dynamo.onnx", d),
                                {"conv", "conv_transpose"}, ("host", "sim")),
    "depth_anything_head": (lambda d, t: vision_case("depth_anything_torchscript.onnx", d),
                            {"vision_encoder", "conv", "conv_transpose"}, ("host", "sim")),
    "qdq_matmul": (lambda d, t: qdq_case(d), {"qdq_matmul"}, ("host", "sim")),
    "integer_matmul": (integer_case, {"integer_matmul"}, ("host", "sim")),
    "float_matmul": (lambda d, t: float_matmul_case(d), {"float_matmul_int8"}, ("host", "sim")),
    "tensor_program": (lambda d, t: program_case(d), {"tensor_program"}, ("host",)),
}
PARAMS = [pytest.param(name, device, id=f"{name}-{device}")
          for name, (_, _, devices) in CASES.items() for device in devices]


def run_child(tmp_path: Path, model: onnx.ModelProto, feeds: dict, options: dict) -> dict:
    tag = f"{len(list(tmp_path.glob('run*')))}"
    folder = tmp_path / f"run{tag}"
    folder.mkdir()
    onnx.save(model, str(folder / "model.onnx"))
    np.savez(folder / "feeds.npz", **feeds)
    args = {"folder": str(folder), "options": options}
    result = subprocess.run([sys.executable, __file__, json.dumps(args)], capture_output=True,
                            text=True, timeout=CHILD_TIMEOUT_S)
    if result.returncode < 0:
        pytest.fail(f"the child died with {signal.Signals(-result.returncode).name}:\n"
                    f"{result.stderr[-3000:]}")
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = np.load(folder / "outputs.npz")
    return {"outputs": [outputs[f"out{i}"] for i in range(len(outputs.files))],
            "records": [json.loads(line) for line in (folder / "report.jsonl").read_text()
                        .splitlines()]}


def claimed_nodes(records) -> dict[str, set[str]]:
    """Claimed node names by claim kind."""
    by_kind: dict[str, set[str]] = {}
    for record in records:
        for claim in record["claims"]:
            by_kind.setdefault(claim["kind"], set()).update(claim["nodes"])
    return by_kind


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return np.array_equal(a, b, equal_nan=True)
    return np.array_equal(a, b)


@pytest.mark.parametrize("name,device", PARAMS)
def test_a_dead_claim_changes_nothing(tmp_path, name, device):
    build, kinds, _ = CASES[name]
    model, feeds, options = build(device, tmp_path)
    options = {"device": device, "min_rows": "1", **options}
    alone = run_child(tmp_path, model, feeds, options)
    twinned = run_child(tmp_path, dead_twin(model), feeds, options)

    live = claimed_nodes(alone["records"])
    dead = {kind: {n for n in nodes if n.endswith(TWIN)}
            for kind, nodes in claimed_nodes(twinned["records"]).items()}
    assert kinds <= set(live), f"the model alone claims {sorted(live)}, expected {sorted(kinds)}"
    missing = {kind for kind in kinds if not dead.get(kind)}
    assert not missing, f"no dead node of {sorted(missing)} was claimed: the case proves nothing"

    assert len(twinned["outputs"]) == len(alone["outputs"])
    for index, (a, b) in enumerate(zip(alone["outputs"], twinned["outputs"])):
        assert same_bits(a, b), f"output {index} changed when a dead twin was added"


def test_the_twin_reads_nothing_of_its_own_and_feeds_nothing():
    """The construction itself: every copy reads only graph inputs, constants and other copies,
    and no node or graph output reads a copy's result."""
    model, _, _ = vision_case("vit_encoder_torchscript.onnx", "host")
    twin = dead_twin(model)
    onnx.checker.check_model(twin)
    originals = {o for n in model.graph.node for o in n.output if o}
    copies = [n for n in twin.graph.node if n.name.endswith(TWIN)]
    assert len(copies) == len(model.graph.node)
    copy_outputs = {o for n in copies for o in n.output if o}
    assert all(o.endswith(TWIN) for o in copy_outputs)
    assert not any(x in originals for n in copies for x in n.input)
    readers = {x for n in twin.graph.node if not n.name.endswith(TWIN) for x in n.input}
    readers |= {o.name for o in twin.graph.output}
    assert not readers & copy_outputs


def child(args: dict) -> None:
    import onnxruntime as ort
    folder = Path(args["folder"])
    ort.register_execution_provider_library("npuflow", str(EP_LIBRARY))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP_NAME]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.add_provider_for_devices(devices, {**args["options"],
                                          "report": str(folder / "report.jsonl")})
    session = ort.InferenceSession(str(folder / "model.onnx"), sess_options=so)
    feeds = dict(np.load(folder / "feeds.npz"))
    # Twice: the first run of a claim may be its verification run, the second is the plain one.
    session.run(None, feeds)
    outputs = session.run(None, feeds)
    np.savez(folder / "outputs.npz", **{f"out{i}": o for i, o in enumerate(outputs)})


if __name__ == "__main__":
    child(json.loads(sys.argv[1]))
