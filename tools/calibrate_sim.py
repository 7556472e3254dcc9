#!/usr/bin/env python3
"""Turns a board's benchmark output into the simulator's cost-constant table.

    tools/calibrate_sim.py BOARD.csv            # print the regenerated table rows
    tools/calibrate_sim.py BOARD.csv --write    # rewrite the table in src/sim/cost_model.cc
    tools/calibrate_sim.py BOARD.csv --check    # exit 1 if the table holds other values

Input: CSV with a header `kind,dtype,m,k,n,workers,value,unit`; blank lines and lines starting
with `#` are ignored. Kinds (docs/simulator.md, "Recalibrating from a board"):

  submit_wait        tiny one-task submit+wait, us; several rows -> the median
  submit_wait_stock  the same on a stock (unpatched) kernel, us
  matmul             a resident matmul: dtype, m, k, n, workers and its throughput (GOP/s) or
                     wall time (ms). The rows with the most workers are the calibration point
                     (every dtype must share its shape); rows of that shape with 1..4 workers
                     give the fd scaling when no `scaling` rows do.
  scaling            throughput with `workers` fds over one fd, x
  pack, readback     host pack / readback bandwidth, GB/s
  attention_ratio    attention score matmul time per MAC over a projection's, x
  gemv_ratio         M=1 GEMV time on the NPU over the CPU's, x

Only rows the CSV determines are replaced; every other constant keeps its value and source.
Standard library only.
"""
from __future__ import annotations

import argparse
import csv
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "src" / "sim" / "cost_model.cc"
ROW = re.compile(r'^(\s*)CostConstant\{"(?P<name>[a-z0-9_]+)", (?P<value>[-0-9.e+]+), '
                 r'"(?P<unit>[^"]*)", \'(?P<tag>[MDUCA])\', "(?P<source>(?:[^"\\]|\\.)*)"\},$')
DTYPES = ("fp16", "int8", "int4")


class CalibrationError(Exception):
    pass


def read_rows(path: Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    rows = list(csv.DictReader(lines))
    for number, row in enumerate(rows, 1):
        missing = {"kind", "value", "unit"} - {k for k, v in row.items() if v not in (None, "")}
        if missing:
            raise CalibrationError(f"row {number}: missing {', '.join(sorted(missing))}")
        try:
            row["value"] = float(row["value"])
        except ValueError:
            raise CalibrationError(f"row {number}: value {row['value']!r} is not a number")
        for key in ("m", "k", "n", "workers"):
            row[key] = int(row[key]) if row.get(key) else None
    return rows


def derive(rows: list[dict], label: str) -> dict[str, tuple[float, str]]:
    """name -> (value, source) for every constant the rows determine."""
    out: dict[str, tuple[float, str]] = {}
    by_kind: dict[str, list[dict]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    unknown = set(by_kind) - {"submit_wait", "submit_wait_stock", "matmul", "scaling", "pack",
                              "readback", "attention_ratio", "gemv_ratio"}
    if unknown:
        raise CalibrationError(f"unknown kinds: {', '.join(sorted(unknown))}")

    def expect_unit(row, *units):
        if row["unit"] not in units:
            raise CalibrationError(f"{row['kind']}: unit {row['unit']!r}, expected {' or '.join(units)}")

    for kind, name in (("submit_wait", "submit_wait_floor_us"),
                       ("submit_wait_stock", "submit_wait_floor_stock_us")):
        if kind in by_kind:
            for row in by_kind[kind]:
                expect_unit(row, "us")
            values = [r["value"] for r in by_kind[kind]]
            out[name] = (statistics.median(values),
                         f"{label}: {kind}, median of {len(values)} run(s)")
    for kind, name, unit in (("pack", "pack_gbps", "GB/s"), ("readback", "readback_gbps", "GB/s"),
                             ("attention_ratio", "attention_penalty", "x"),
                             ("gemv_ratio", "gemv_slowdown_vs_cpu", "x")):
        if kind in by_kind:
            for row in by_kind[kind]:
                expect_unit(row, unit)
            out[name] = (statistics.median(r["value"] for r in by_kind[kind]), f"{label}: {kind}")

    def gops(row) -> float:
        expect_unit(row, "GOP/s", "ms")
        if row["unit"] == "GOP/s":
            return row["value"]
        return 2.0 * row["m"] * row["k"] * row["n"] / (row["value"] * 1e-3) / 1e9

    matmuls = by_kind.get("matmul", [])
    for row in matmuls:
        if None in (row["m"], row["k"], row["n"], row["workers"]) or row["dtype"] not in DTYPES:
            raise CalibrationError(f"matmul rows need dtype ({'/'.join(DTYPES)}), m, k, n, workers")
    if matmuls:
        most = max(r["workers"] for r in matmuls)
        calibration = [r for r in matmuls if r["workers"] == most]
        shapes = {(r["m"], r["k"], r["n"]) for r in calibration}
        if len(shapes) != 1:
            raise CalibrationError(f"the {most}-fd matmul rows disagree on the shape: {sorted(shapes)}")
        m, k, n = shapes.pop()
        shape = f"{m}x{k}x{n}, {most} fds"
        for name, value in (("calibration_m", m), ("calibration_k", k), ("calibration_n", n),
                            ("calibration_workers", most)):
            out[name] = (float(value), f"{label}: the resident matmul shape ({shape})")
        for dtype in DTYPES:
            rates = [gops(r) for r in calibration if r["dtype"] == dtype]
            if rates:
                out[f"resident_gops_{dtype}"] = (statistics.median(rates),
                                                 f"{label}: resident matmul {dtype}, {shape}")
        if "scaling" not in by_kind:
            for dtype in DTYPES:
                same = {r["workers"]: gops(r) for r in matmuls
                        if r["dtype"] == dtype and (r["m"], r["k"], r["n"]) == (m, k, n)}
                if 1 in same:
                    for workers in (2, 3, 4):
                        if workers in same and f"fd_scaling_{workers}" not in out:
                            out[f"fd_scaling_{workers}"] = (
                                same[workers] / same[1],
                                f"{label}: {dtype} {m}x{k}x{n} at {workers} fds over 1 fd")
    for row in by_kind.get("scaling", []):
        expect_unit(row, "x")
        if row["workers"] not in (2, 3, 4):
            raise CalibrationError("scaling rows need workers 2, 3 or 4")
        out[f"fd_scaling_{row['workers']}"] = (row["value"], f"{label}: scaling at {row['workers']} fds")
    return out


def format_value(value: float) -> str:
    return repr(round(value, 6))


def regenerate(table_text: str, derived: dict[str, tuple[float, str]]) -> tuple[str, list[str]]:
    """Returns (new table text, the rows that changed)."""
    lines, changed, seen = [], [], set()
    for line in table_text.splitlines():
        match = ROW.match(line)
        if match and match["name"] in derived:
            name = match["name"]
            seen.add(name)
            value, source = derived[name]
            old = float(match["value"])
            new_line = (f'{match.group(1)}CostConstant{{"{name}", {format_value(value)}, '
                        f'"{match["unit"]}", \'M\', "{source}"}},')
            if abs(old - value) > 1e-9 * max(1.0, abs(old)):
                changed.append(f"{name}: {old:g} -> {value:g}")
            lines.append(new_line)
        else:
            lines.append(line)
    missing = set(derived) - seen
    if missing:
        raise CalibrationError(f"{TABLE} has no rows named {', '.join(sorted(missing))}")
    return "\n".join(lines) + "\n", changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--table", type=Path, default=TABLE)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if any value would change")
    args = parser.parse_args(argv)
    try:
        derived = derive(read_rows(args.csv), f"board CSV {args.csv.name}")
        text, changed = regenerate(args.table.read_text(), derived)
    except (CalibrationError, OSError) as error:
        print(f"calibrate_sim: {error}", file=sys.stderr)
        return 2
    if args.check:
        for line in changed:
            print(f"differs: {line}")
        return 1 if changed else 0
    if args.write:
        args.table.write_text(text)
        print(f"{args.table}: {len(changed)} value(s) changed")
        for line in changed:
            print(f"  {line}")
        return 0
    for line in text.splitlines():
        if ROW.match(line) and ROW.match(line)["name"] in derived:
            print(line.strip())
    for line in changed:
        print(f"# changed: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
