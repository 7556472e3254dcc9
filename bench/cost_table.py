"""The cost table claim=faster reads (src/route/claim_policy.cc): where it lives on this machine,
and how a bench writes its rows into it without dropping another bench's."""
from __future__ import annotations

import json
import os
import platform
from pathlib import Path

CACHE = Path(os.environ.get("NPUFLOW_CACHE_DIR", Path.home() / ".cache" / "npuflow"))


def machine_signature() -> str:
    """The name src/route/claim_policy.cc gives this machine's cost table."""
    arch = platform.machine()
    if arch != "x86_64":
        return arch
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    if "avx512f" in flags:
        return "x86_64-avx512" + ("-vnni" if "avx512_vnni" in flags else "")
    return "x86_64-avx2" if "avx2" in flags else "x86_64"


def default_path() -> Path:
    return CACHE / f"claim-costs-{machine_signature()}.json"


def claimed_flops(claim: dict, tokens: int) -> float:
    """2 x MACs of an encoder claim's GEMM work (one input), symbolic dims read as T = tokens."""
    flops = 0.0
    for gemm in claim.get("work", []):
        rows, k, n = gemm["rows"], gemm["k"], gemm["n"]
        if rows <= 0:
            rows = tokens * (claim.get("heads", 1) if gemm.get("attention") else 1)
        k, n = (tokens if k <= 0 else k), (tokens if n <= 0 else n)
        flops += 2.0 * rows * k * n
    return flops


def write_rows(path: Path | None, kinds: set[str], rows: list[dict], threads: int,
               command: str) -> Path:
    """Replaces the rows of `kinds` in the table at `path` (default: this machine's) by `rows`,
    keeping every other kind another bench measured on this machine."""
    path = path or default_path()
    signature = machine_signature()
    old = {}
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except json.JSONDecodeError:
            old = {}
        if old.get("machine") != signature:
            old = {}
    kept = [row for row in old.get("rows", []) if row.get("kind") not in kinds]
    commands = sorted(set(old.get("commands", [])) | {command})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(machine=signature, threads=threads, commands=commands,
                                    rows=kept + rows), indent=1))
    return path
