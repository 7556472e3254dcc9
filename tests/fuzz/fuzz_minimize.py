"""Greedy minimization of a failing mutant: drop graph outputs, bypass or delete nodes, drop
initializers nothing reads, keeping each step only if the mutant still fails the same way (same
device, same outcome class)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import onnx


def prune(model: onnx.ModelProto, dead_nodes: bool = True) -> None:
    """Removes nodes no graph output depends on (if dead_nodes) and initializers no node reads."""
    g = model.graph
    live = {o.name for o in g.output}
    keep = []
    for node in reversed(g.node):
        if not dead_nodes or any(o in live for o in node.output):
            keep.append(node)
            live.update(x for x in node.input if x)
            for a in node.attribute:  # subgraphs read outer values by name
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    for n in sub.node:
                        live.update(x for x in n.input if x)
    keep.reverse()
    del g.node[:]
    g.node.extend(keep)
    inits = [t for t in g.initializer if t.name in live]
    del g.initializer[:]
    g.initializer.extend(inits)
    infos = [v for v in g.value_info if v.name in live]
    del g.value_info[:]
    g.value_info.extend(infos)


def _without_output(model, k, dead_nodes):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[k]
    prune(m, dead_nodes)
    return m


def _bypassed(model, i, with_input, dead_nodes):
    """A copy whose node i is gone, its readers (and graph outputs) taking its input with_input."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    node = m.graph.node[i]
    replacement = node.input[with_input]
    for out in node.output:
        for n in m.graph.node:
            for k, name in enumerate(n.input):
                if name == out:
                    n.input[k] = replacement
        for o in m.graph.output:
            if o.name == out:
                o.name = replacement
    del m.graph.node[i]
    del m.graph.value_info[:]
    prune(m, dead_nodes)
    return m


def minimize(model: onnx.ModelProto, still_fails: Callable[[onnx.ModelProto], bool],
             budget_s: float = 600.0, log: Callable[[str], None] = print) -> onnx.ModelProto:
    """The smallest model greedy removal reaches within budget_s that still_fails."""
    deadline = time.monotonic() + budget_s
    best = onnx.ModelProto()
    best.CopyFrom(model)
    prune(best)
    dead_nodes = still_fails(best)
    if not dead_nodes:  # the failure needs a dead node (a claimed group nothing reads): keep them
        best.CopyFrom(model)
        prune(best, dead_nodes=False)

    def attempt(candidate) -> bool:
        nonlocal best
        if time.monotonic() > deadline or len(candidate.graph.output) == 0:
            return False
        if still_fails(candidate):
            best = candidate
            return True
        return False

    k = 0
    while len(best.graph.output) > 1 and k < len(best.graph.output):
        if not attempt(_without_output(best, k, dead_nodes)):
            k += 1
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        i = len(best.graph.node) - 1
        while i >= 0 and time.monotonic() < deadline:
            node = best.graph.node[i]
            for j, name in enumerate(node.input):
                if name and attempt(_bypassed(best, i, j, dead_nodes)):
                    changed = True
                    break
            i = min(i - 1, len(best.graph.node) - 1)
    log(f"minimized to {len(best.graph.node)} nodes, {len(best.graph.initializer)} initializers, "
        f"{best.ByteSize()} bytes")
    return best


def save(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
