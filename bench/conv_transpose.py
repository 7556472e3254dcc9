"""npuflow's ConvTranspose and Conv claims (host device, fp32) against the ONNX Runtime CPU EP,
node by node.

The ConvTranspose shapes are the decoder of pix2pix's U-Net generator at 256x256 (ngf 64: 4x4
stride-2 transposed convolutions, pads 1); the Conv shapes its encoder (4x4 stride-2 convolutions,
pads 1) and SAM ViT-B's neck (1x1 from 768 to 256 channels, then 3x3, over the 64x64 grid). Each is
a one-node model. Both arms run in this process with the same intra-op thread count, alternating
run by run; the tables report each arm's median and the ratio CPU EP / npuflow (> 1: npuflow is
faster). --write-costs replaces the `conv_transpose` and `conv` rows of this machine's cost table
(bench/cost_table.py), which claim=faster reads.

    make bench-conv                  # the table in docs/performance.md
    .venv/bin/python bench/conv_transpose.py --runs 20 --threads 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from cost_table import write_rows  # noqa: E402

import os  # noqa: E402

BUILD_DIR = Path(os.environ.get("NPUFLOW_BUILD_DIR", ROOT / "build")).resolve()
# (input channels, output channels, input size): the U-Net decoder from the bottleneck out.
SHAPES = [(512, 512, 2), (1024, 512, 8), (1024, 256, 32), (512, 128, 64), (256, 64, 128),
          (128, 3, 128)]
# (input channels, output channels, input size, kernel, stride, pad): the U-Net encoder from the
# image in, then SAM ViT-B's neck.
CONV_SHAPES = [(3, 64, 256, 4, 2, 1), (64, 128, 128, 4, 2, 1), (128, 256, 64, 4, 2, 1),
               (256, 512, 32, 4, 2, 1), (512, 512, 16, 4, 2, 1), (512, 512, 4, 4, 2, 1),
               (768, 256, 64, 1, 1, 0), (256, 256, 64, 3, 1, 1)]


def model(ic: int, oc: int, size: int) -> bytes:
    rng = np.random.default_rng(ic * 7 + oc + size)
    weight = (rng.standard_normal((ic, oc, 4, 4)) / np.sqrt(ic * 16)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ic, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, 2 * size, 2 * size])],
        [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def conv_model(ic: int, oc: int, size: int, kernel: int, stride: int, pad: int) -> bytes:
    rng = np.random.default_rng(ic * 7 + oc + size + kernel)
    weight = (rng.standard_normal((oc, ic, kernel, kernel)) /
              np.sqrt(ic * kernel * kernel)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride, stride],
                            pads=[pad] * 4)
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ic, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def paired_medians(data: bytes, feed: dict, options, runs: int) -> tuple[float, float]:
    """(npuflow ms, CPU EP ms): medians of `runs` alternating runs after three warm-ups each
    (both arms' first runs are slower for several runs: page faults on fresh buffers, oneDNN's
    first calls on each pool thread)."""
    arms = {"npuflow": ort.InferenceSession(data, options(True)),
            "cpu": ort.InferenceSession(data, options(False), providers=["CPUExecutionProvider"])}
    times = {name: [] for name in arms}
    for session in arms.values():
        for _ in range(3):
            session.run(None, feed)
    for _ in range(runs):
        for name, session in arms.items():
            start = time.perf_counter()
            session.run(None, feed)
            times[name].append((time.perf_counter() - start) * 1e3)
    return statistics.median(times["npuflow"]), statistics.median(times["cpu"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write-costs", action="store_true")
    args = parser.parse_args()
    ort.register_execution_provider_library("npuflow", str(BUILD_DIR / "lib" /
                                                           "libonnxruntime_npuflow.so"))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "NpuflowExecutionProvider"]

    def options(npuflow: bool):
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        if npuflow:  # measure the claim, not the policy
            so.add_provider_for_devices(devices, {"device": "host", "claim": "all"})
        return so

    print(f"ConvTranspose 4x4 stride 2, host device vs CPU EP, {args.threads} threads, median of "
          f"{args.runs} alternating runs")
    print("| IC | OC | input | output | npuflow ms | CPU EP ms | CPU EP / npuflow |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for ic, oc, size in SHAPES:
        x = {"x": np.random.default_rng(1).standard_normal((1, ic, size, size)).astype(np.float32)}
        npuflow, cpu = paired_medians(model(ic, oc, size), x, options, args.runs)
        out = 2 * size
        print(f"| {ic} | {oc} | {size}x{size} | {out}x{out} | {npuflow:.2f} | {cpu:.2f} | "
              f"{cpu / npuflow:.2f}x |")
        # In the claim's terms (graph/conv_transpose_matcher.cc, a strided node): the GEMM over
        # the input's pixels, IC by OC KH KW, which the policy matches shapes by.
        m, k, n = size * size, ic, oc * 16
        rows.append(dict(kind="conv_transpose", model=f"ConvTranspose {ic}->{oc} at {size}px",
                         family="", tokens=0, hidden=0, rows=m, k=k, n=n,
                         flops=2.0 * m * k * n, npuflow_ms=npuflow, cpu_ep_ms=cpu))
    print(f"\nConv, host device vs CPU EP, {args.threads} threads, median of {args.runs} "
          "alternating runs")
    print("| IC | OC | input | kernel, stride, pad | npuflow ms | CPU EP ms | CPU EP / npuflow |")
    print("|---|---|---|---|---|---|---|")
    for ic, oc, size, kernel, stride, pad in CONV_SHAPES:
        x = {"x": np.random.default_rng(2).standard_normal((1, ic, size, size)).astype(np.float32)}
        npuflow, cpu = paired_medians(conv_model(ic, oc, size, kernel, stride, pad), x, options,
                                      args.runs)
        print(f"| {ic} | {oc} | {size}x{size} | {kernel}x{kernel}, {stride}, {pad} | "
              f"{npuflow:.2f} | {cpu:.2f} | {cpu / npuflow:.2f}x |")
        # In the claim's terms (graph/conv_matcher.cc): the GEMM over the output's pixels,
        # IC KH KW taps, OC padded to the device's group of 16.
        out = (size + 2 * pad - kernel) // stride + 1
        m, k, n = out * out, ic * kernel * kernel, (oc + 15) // 16 * 16
        rows.append(dict(kind="conv", model=f"Conv {ic}->{oc} {kernel}x{kernel}/{stride} at "
                         f"{size}px", family="", tokens=0, hidden=0, rows=m, k=k, n=n,
                         flops=2.0 * m * k * n, npuflow_ms=npuflow, cpu_ep_ms=cpu))
    if args.write_costs:
        path = write_rows(None, {"conv_transpose", "conv"}, rows, args.threads,
                          "bench/conv_transpose.py --write-costs")
        print(f"cost rows written to {path}")


if __name__ == "__main__":
    main()
