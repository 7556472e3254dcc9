"""tools/calibrate_sim.py: the cost-constant table in src/sim/cost_model.cc is exactly what the
published figures give, and a board's benchmark CSV regenerates it."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys

from conftest import ROOT

TOOL = ROOT / "tools" / "calibrate_sim.py"
UPSTREAM = ROOT / "tools" / "sim_calibration_upstream.csv"
TABLE = ROOT / "src" / "sim" / "cost_model.cc"


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def value(table_text: str, name: str) -> float:
    match = re.search(rf'CostConstant\{{"{name}", ([-0-9.e+]+),', table_text)
    assert match, f"{name} is not in the table"
    return float(match.group(1))


def test_the_table_holds_the_published_figures():
    result = run(UPSTREAM, "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_board_csv_regenerates_the_table(tmp_path):
    table = tmp_path / "cost_model.cc"
    shutil.copy(TABLE, table)
    board = tmp_path / "board.csv"
    # fp16 512x3840x4096 in 40 ms at 5 fds, 110 ms at 1 fd, 55 ms at 2; three submit samples.
    board.write_text("\n".join([
        "# a board run",
        "kind,dtype,m,k,n,workers,value,unit",
        "submit_wait,,,,,1,30,us", "submit_wait,,,,,1,31,us", "submit_wait,,,,,1,90,us",
        "matmul,fp16,512,3840,4096,5,40,ms",
        "matmul,fp16,512,3840,4096,1,110,ms",
        "matmul,fp16,512,3840,4096,2,55,ms",
        "matmul,int8,512,3840,4096,5,400,GOP/s",
        "pack,,,,,,1.2,GB/s",
    ]) + "\n")
    assert run(board, "--table", table, "--check").returncode == 1
    result = run(board, "--table", table, "--write")
    assert result.returncode == 0, result.stderr
    text = table.read_text()
    ops = 2 * 512 * 3840 * 4096
    assert abs(value(text, "resident_gops_fp16") - ops / 0.040 / 1e9) < 1e-3
    assert value(text, "resident_gops_int8") == 400
    assert value(text, "resident_gops_int4") == 413  # not in the CSV: kept
    assert value(text, "submit_wait_floor_us") == 31  # the median
    assert abs(value(text, "fd_scaling_2") - 2.0) < 1e-6
    assert value(text, "fd_scaling_3") == 2.94  # kept
    assert value(text, "pack_gbps") == 1.2
    assert "board CSV board.csv: resident matmul fp16, 512x3840x4096, 5 fds" in text
    assert run(board, "--table", table, "--check").returncode == 0


def test_a_malformed_csv_is_a_clear_error(tmp_path):
    board = tmp_path / "bad.csv"
    board.write_text("kind,dtype,m,k,n,workers,value,unit\nmatmul,fp16,512,,4096,5,40,ms\n")
    result = run(board, "--check")
    assert result.returncode == 2
    assert "matmul rows need dtype" in result.stderr
