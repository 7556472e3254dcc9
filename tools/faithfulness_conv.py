"""The convolution table of docs/faithfulness.md: every Conv and ConvTranspose node of the U-Net
generator fixtures (tests/fixtures/conv), the Depth Anything fixture (its DPT head's convolutions;
the patch embedding is inside the claimed encoder), the tiny SAM (tests/fixtures/sam, six
prompts: patch embedding, neck, mask decoder) and RF-DETR's projector after its windowed backbone
(tests/fixtures/windowed/rfdetr_*), npuflow against the CPU EP on `host` and `sim`.

Per node, as seed 000 scores its ConvTranspose claim: each node alone, with the model's own
weights, fed the input the CPU EP computes for it in the model. End to end: the model's outputs
with every claim on (a node's input is then what npuflow computed before it); for SAM also the
masks' IoU over the prompts.

    NPUFLOW_BUILD_DIR=build .venv/bin/python tools/faithfulness_conv.py
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from gates import agreement  # noqa: E402
from test_conv_transpose import mask_iou, sam_prompts  # noqa: E402

OPS = ("Conv", "ConvTranspose")


def normal(name, shape):
    return [{name: np.random.default_rng(7).standard_normal(shape).astype(np.float32)}]


MODELS = [("U-Net, TorchScript", ROOT / "tests/fixtures/conv/unet_torchscript.onnx",
           normal("image", (2, 3, 32, 32))),
          ("U-Net, dynamo", ROOT / "tests/fixtures/conv/unet_dynamo.onnx",
           normal("image", (2, 3, 32, 32))),
          ("Depth Anything", ROOT / "tests/fixtures/vision/depth_anything_torchscript.onnx",
           normal("pixel_values", (1, 3, 56, 56))),
          ("SAM, TorchScript", ROOT / "tests/fixtures/sam/sam_tiny_torchscript.onnx",
           sam_prompts()),
          ("SAM, dynamo", ROOT / "tests/fixtures/sam/sam_tiny_dynamo.onnx", sam_prompts()),
          *[(f"RF-DETR {stem}, {exporter}",
             ROOT / f"tests/fixtures/windowed/rfdetr_{stem}_{exporter}.onnx",
             normal("pixel_values", (1, 3, size, size)))
            for stem, size in (("p4", 56), ("p3p5", 112))
            for exporter in ("torchscript", "dynamo")]]


def node_inputs(model: onnx.ModelProto, feeds: list[dict]) -> dict[str, list[np.ndarray]]:
    """The CPU EP's value of each convolution's input, per feed, by the node's output name."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    wanted = {}
    known = {o.name for o in probe.graph.output} | {i.name for i in probe.graph.input}
    for node in probe.graph.node:
        if node.op_type in OPS:
            wanted[node.output[0]] = node.input[0]
            if node.input[0] not in known:
                probe.graph.output.append(
                    helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT, None))
                known.add(node.input[0])
    cpu = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    names = sorted(set(wanted.values()))
    values = [dict(zip(names, cpu.run(names, feed))) if all(n not in feed for n in names) else
              {**dict(zip([n for n in names if n not in feed],
                          cpu.run([n for n in names if n not in feed], feed))), **feed}
              for feed in feeds]
    return {out: [v[name] for v in values] for out, name in wanted.items()}


def single_node(model: onnx.ModelProto, output: str) -> onnx.ModelProto:
    """The convolution that computes `output`, alone, with its initializers."""
    [node] = [n for n in model.graph.node if n.output and n.output[0] == output]
    inits = [i for i in model.graph.initializer if i.name in node.input[1:]]
    graph = helper.make_graph([node], "node",
                              [helper.make_tensor_value_info(node.input[0], TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], inits)
    single = helper.make_model(graph, opset_imports=model.opset_import)
    single.ir_version = model.ir_version
    return single


def npuflow_session(devices, data, device: str):
    """(session, claims by matcher) for `device` with every claim on."""
    report = Path(tempfile.mkstemp(suffix=".jsonl")[1])
    options = ort.SessionOptions()
    options.add_provider_for_devices(devices, {"device": device, "claim": "all",
                                               "report": str(report)})
    session = ort.InferenceSession(data, options)
    records = [json.loads(line) for line in report.read_text().splitlines()]
    report.unlink()
    return session, {m: sum(len(r["claims"]) for r in records if r["matcher"] == m)
                     for m in ("conv", "conv_transpose", "vision")}


def main():
    build = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build")).resolve()
    ort.register_execution_provider_library("npuflow", str(build / "lib" /
                                                           "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]
    print("| model | Conv / ConvTranspose nodes claimed | device | worst node cosine | worst node "
          "relative L2 | whole model: worst output cosine | relative L2 | mask IoU |")
    print("|---|---|---|---|---|---|---|---|")
    for title, path, feeds in MODELS:
        model = onnx.load(str(path))
        inputs = node_inputs(model, feeds)
        outputs = [o.name for o in model.graph.output]
        cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        refs = [dict(zip(outputs, cpu.run(outputs, feed))) for feed in feeds]
        masks = "pred_masks" if "pred_masks" in outputs else None
        for device in ("host", "sim"):
            session, claimed = npuflow_session(devices, model.SerializeToString(), device)
            gots = [dict(zip(outputs, session.run(outputs, feed))) for feed in feeds]
            whole = [agreement(r[n], g[n]) for r, g in zip(refs, gots) for n in outputs
                     if r[n].dtype == np.float32]
            nodes = []
            for output, xs in inputs.items():
                data = single_node(model, output).SerializeToString()
                alone, _ = npuflow_session(devices, data, device)
                ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
                name = alone.get_inputs()[0].name
                nodes += [agreement(ref.run(None, {name: x})[0], alone.run(None, {name: x})[0])
                          for x in xs]
            iou = (f"{mask_iou(np.stack([r[masks] for r in refs]), np.stack([g[masks] for g in gots])):.4f}"
                   if masks else "")
            counts = {op: sum(n.op_type == op for n in model.graph.node) for op in OPS}
            print(f"| {title} | {claimed['conv']} of {counts['Conv']} / "
                  f"{claimed['conv_transpose']} of {counts['ConvTranspose']} | {device} | "
                  f"{min(m.cosine for m in nodes):.9f} | {max(m.rel_l2 for m in nodes):.1e} | "
                  f"{min(m.cosine for m in whole):.9f} | {max(m.rel_l2 for m in whole):.1e} | "
                  f"{iou} |", flush=True)


if __name__ == "__main__":
    main()
