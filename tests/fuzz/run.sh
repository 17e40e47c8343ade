#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build (make fuzz):
#   1. replays the inputs checked in under tests/fuzz/regressions/TARGET
#      (each once: a crash found once stays a failing test),
#   2. fuzzes for SECONDS from the seed corpus tests/fuzz/corpus/TARGET (a
#      copy: the checked-in corpus is not changed), under ASan+UBSan,
# JOBS targets at a time. Prints executions, executions per second and the
# total; exits 1 if any target crashed, leaked or timed out (its input is
# in BUILD/fuzz-artifacts/TARGET-*).
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS] [JOBS]
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:?usage: run.sh BUILD_DIR [SECONDS] [JOBS]}
SECONDS_EACH=${2:-20}
JOBS=${3:-2}
TARGETS=(fuzz_requests fuzz_model_dir fuzz_vector_store fuzz_index_file fuzz_fgd_file
         fuzz_texmex fuzz_config fuzz_snapshot fuzz_payload_fields fuzz_filter
         fuzz_log_entry)
OUT="$BUILD/fuzz-out"
ART="$BUILD/fuzz-artifacts"
rm -rf "$OUT"
mkdir -p "$OUT" "$ART"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

run_one() {
  local t=$1 bin="$BUILD/tests/fuzz/$1" log="$OUT/$1.log"
  local corpus="$OUT/$1.corpus"
  mkdir -p "$corpus"
  if [[ -d tests/fuzz/corpus/$t ]]; then cp -r "tests/fuzz/corpus/$t/." "$corpus/" 2>/dev/null; fi
  # 1. The regressions: every input once.
  if [[ -d tests/fuzz/regressions/$t ]] && compgen -G "tests/fuzz/regressions/$t/*" >/dev/null; then
    if ! "$bin" -runs=0 tests/fuzz/regressions/$t/* >"$OUT/$t.regressions.log" 2>&1; then
      echo "FAIL $t: a checked-in regression input fails again (see $OUT/$t.regressions.log)"
      return 1
    fi
  fi
  # 2. Fuzzing, bounded.
  if ! "$bin" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$ART/$t-" "$corpus" >"$log" 2>&1; then
    echo "FAIL $t: see $log and $ART/$t-*"
    tail -40 "$log"
    return 1
  fi
  local execs rate
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  echo "ok   $t: ${execs:-?} executions, ${rate:-?}/s, corpus $(ls "$corpus" | wc -l) inputs"
}

status=0
pids=()
names=()
for t in "${TARGETS[@]}"; do
  ( run_one "$t" ) > "$OUT/$t.summary" &
  pids+=($!)
  names+=("$t")
  if (( ${#pids[@]} >= JOBS )); then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
total=0
for t in "${TARGETS[@]}"; do
  cat "$OUT/$t.summary"
  n=$(grep -o 'ok   [a-z_]*: [0-9]*' "$OUT/$t.summary" | grep -o '[0-9]*$')
  total=$((total + ${n:-0}))
done
echo "fuzz: $total executions in all, ${SECONDS_EACH} s per target"
exit $status
