"""Runs mutants in child processes (fuzz_child.py) and turns their deaths into verdicts: a child
that dies is a crash of the mutant and stage it last marked, one that stops making progress for
hang_s seconds is killed and its mutant is a hang. The rest of the batch goes on in a new child."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fuzz_oracle import CRASH, HANG, UNJUDGED

CHILD = Path(__file__).resolve().parent / "fuzz_child.py"


# Device-level refusals are logged, not reported: (pattern, what happened). The status text in
# the first group becomes the reason, its numbers masked.
DEVICE_REFUSALS = [
    (re.compile(r"cannot hold a \d+x\d+ weight \((.*?)\); it runs on the host"),
     "weight kept on the host"),
    (re.compile(r"projections through layer \d+'s q/k/v stay on the host \((.*)\)(?:\x1b\[m)?$",
                re.M),
     "projections kept exact on the host"),
    (re.compile(r"refused a \d+x\d+x\d+ projection \((.*?)\); such calls run on the host"),
     "projection call on the host"),
    (re.compile(r"npu_qdq_pack_fallback \S+ k=-?\d+ n=-?\d+: (.*?); every call"),
     "QDQ weight kept on the host"),
    (re.compile(r"npu_qdq_fallback \S+ m=\d+ k=\d+ n=\d+: (.*?); running"),
     "QDQ call on the host"),
]
MARK = re.compile(r"^==fuzz== (\d+) (\S+)$", re.M)


def device_refusals(stderr: str) -> dict[tuple[int, str], set[str]]:
    """The device-level refusals npuflow logged, per (mutant, device), from a child's stderr
    split at the stage marks."""
    found: dict[tuple[int, str], set[str]] = {}
    marks = list(MARK.finditer(stderr))
    for k, mark in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(stderr)
        segment = stderr[mark.end():end]
        device = mark.group(2).removesuffix("-reference")
        for pattern, what in DEVICE_REFUSALS:
            for m in pattern.finditer(segment):
                reason = re.sub(r"\b\d+\b", "N", m.group(1))[:100]
                found.setdefault((int(mark.group(1)), device), set()).add(
                    f"device:{what}: {reason}")
    return found


def _last_mark(progress: Path) -> tuple[int, str] | None:
    lines = progress.read_text().splitlines() if progress.exists() else []
    if not lines:
        return None
    job, stage = lines[-1].split()
    return int(job), stage


def _death(job_id: int, stage: str, verdict: str, detail: str) -> dict:
    if stage == "mutate":  # ONNX (shape inference) died building the mutant: no mutant
        return {"id": job_id, "generator_error": f"{verdict} while mutating: {detail}"}
    if stage.endswith("-reference"):  # the harness's float64 evaluation, not npuflow, stalled
        return {"id": job_id, "devices": {stage.removesuffix("-reference"): {
            "class": UNJUDGED, "detail": f"{verdict} in the float64 reference: {detail}"}}}
    if stage == "cpu":  # ONNX Runtime itself died on the CPU EP: not npuflow's, not accepted
        return {"id": job_id, "cpu_error": f"{verdict} on the CPU EP: {detail}"}
    return {"id": job_id, "devices": {stage: {"class": verdict, "detail": detail}}}


def run_jobs(jobs: list[dict], work: Path, hang_s: float = 120.0) -> list[dict]:
    """Results for every job, in order; jobs carry 'id', the child's inputs and 'devices'.
    work is a directory of this call's own (removed at the end)."""
    work = work.resolve()  # the child runs in tests/fuzz
    work.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict] = {}
    pending = list(jobs)
    attempt = 0
    while pending:
        attempt += 1
        tag = f"{pending[0]['id']}-{attempt}"
        jobs_file, progress, out = (work / f"jobs-{tag}.json", work / f"progress-{tag}",
                                    work / f"results-{tag}.jsonl")
        stderr_file = work / f"stderr-{tag}.txt"
        jobs_file.write_text(json.dumps(pending))
        with open(stderr_file, "w") as stderr:
            child = subprocess.Popen([sys.executable, str(CHILD), str(jobs_file), str(progress),
                                      str(out)], stdout=subprocess.DEVNULL, stderr=stderr,
                                     cwd=CHILD.parent, start_new_session=True)
            hung = False
            last_mark, since = None, time.monotonic()
            while child.poll() is None:
                time.sleep(0.05)
                mark = _last_mark(progress)
                if mark != last_mark:
                    last_mark, since = mark, time.monotonic()
                elif time.monotonic() - since > hang_s:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
                    hung = True
        done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
        logged = device_refusals(stderr_file.read_text(errors="replace"))
        for r in done:
            results[r["id"]] = r
            for device, outcome in r.get("devices", {}).items():
                outcome["device_reasons"] = sorted(logged.get((r["id"], device), ()))
        finished = {r["id"] for r in done}
        pending = [j for j in pending if j["id"] not in finished]
        if not pending:
            break
        if child.returncode == 0:
            raise RuntimeError(f"the child exited cleanly with {len(pending)} jobs left: "
                               f"{stderr_file}")
        mark = _last_mark(progress)
        if mark is None or mark[0] != pending[0]["id"]:
            raise RuntimeError(f"the child died before its first job (rc {child.returncode}): "
                               f"{stderr_file.read_text()[-2000:]}")
        tail = stderr_file.read_text(errors="replace")[-1500:]
        if hung:
            results[mark[0]] = _death(mark[0], mark[1], HANG, f"no progress for {hang_s:.0f} s")
        else:
            rc = child.returncode
            name = signal.Signals(-rc).name if rc < 0 and -rc in signal.Signals._value2member_map_ \
                else f"exit {rc}"
            results[mark[0]] = _death(mark[0], mark[1], CRASH, f"{name}; stderr tail: {tail}")
        # A device stage that died leaves the mutant's other devices unrun: they are lost with it.
        pending = pending[1:]
    shutil.rmtree(work, ignore_errors=True)
    return [results[j["id"]] for j in jobs]
