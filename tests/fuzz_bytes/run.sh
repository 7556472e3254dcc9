#!/usr/bin/env bash
# Runs every libFuzzer target of tests/fuzz_bytes: first each saved crash input under
# regressions/<corpus>/ (each must now pass), then SECONDS of fuzzing from a scratch copy of the
# committed seeds (corpus/<corpus>/, which the run never changes).
#
#   tests/fuzz_bytes/run.sh BUILD_DIR SECONDS      (FUZZ_SEED=N for a fixed libFuzzer seed)
#
# A crash stops the run; its input lands in BUILD_DIR/fuzz-artifacts/. Fix the bug, then commit
# the input under regressions/<corpus>/ with a name that says what it was.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR SECONDS}" && pwd)
seconds=${2:?usage: run.sh BUILD_DIR SECONDS}
artifacts=$build/fuzz-artifacts
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$artifacts"

# ONNX Runtime's own allocations may fail cleanly (bad_alloc) on a model that declares a huge
# tensor, instead of libFuzzer calling a single large malloc a crash.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1:max_allocation_size_mb=2048}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# corpus name, fuzzer, extra libFuzzer flags
targets=(
  "knobs knob_values_fuzzer"
  "json json_report_fuzzer"
  "model model_bytes_fuzzer -max_len=409600"
)

for entry in "${targets[@]}"; do
  read -r corpus fuzzer flags <<<"$entry"
  asan=$ASAN_OPTIONS
  # ONNX Runtime (not ours, not instrumented) leaks on some of its own error paths (allocations
  # made directly by libonnxruntime.so), and a leak check cannot tell them from ours when ORT is
  # the caller: leaks in the EP are checked by test-asan and test-python-asan instead.
  [[ $corpus == model ]] && asan+=:detect_leaks=0
  exe=$build/bin/$fuzzer
  regressions=("$here/regressions/$corpus"/*)
  if [[ -e ${regressions[0]} ]]; then
    echo "fuzz-bytes: $fuzzer replays ${#regressions[@]} saved crash inputs"
    # shellcheck disable=SC2086
    ASAN_OPTIONS=$asan "$exe" $flags "${regressions[@]}" >"$scratch/replay.log" 2>&1 ||
      { tail -40 "$scratch/replay.log"; echo "fuzz-bytes: $fuzzer fails a saved crash input" >&2; exit 1; }
  fi
  mkdir -p "$scratch/$corpus"
  cp "$here/corpus/$corpus"/* "$scratch/$corpus/"
  # The model seeds are small QDQ graphs; one committed vision fixture adds the encoder matcher.
  [[ $corpus == model ]] && cp "$root/tests/fixtures/vision/vit_encoder_torchscript.onnx" "$scratch/$corpus/"
  seed=()
  [[ -n ${FUZZ_SEED:-} ]] && seed=(-seed="$FUZZ_SEED")
  start=$(date +%s)
  # shellcheck disable=SC2086
  if ! (cd "$scratch" && ASAN_OPTIONS=$asan "$exe" $flags -max_total_time="$seconds" -timeout=120 -rss_limit_mb=4096 \
        -artifact_prefix="$artifacts/$fuzzer-" -print_final_stats=1 "${seed[@]}" "$scratch/$corpus" \
        >"$scratch/$fuzzer.log" 2>&1); then
    grep -v '^#' "$scratch/$fuzzer.log" | tail -60
    echo "fuzz-bytes: $fuzzer found a crash; the input is in $artifacts/" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$fuzzer.log")
  echo "fuzz-bytes: $fuzzer clean: $runs inputs in $(($(date +%s) - start)) s"
done
