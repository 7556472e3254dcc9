"""Runs mutants in child processes (fuzz_child.py) and turns their deaths into verdicts: a child
that dies is a crash of the mutant and stage it last marked, one that stops making progress for
hang_s seconds is killed and its mutant is a hang. The rest of the batch goes on in a new child."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fuzz_oracle import CRASH, HANG, UNJUDGED

CHILD = Path(__file__).resolve().parent / "fuzz_child.py"


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
        for r in done:
            results[r["id"]] = r
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
