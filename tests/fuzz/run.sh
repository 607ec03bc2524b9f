#!/usr/bin/env bash
# Runs the libFuzzer harnesses built in BUILD (make fuzz / make fuzz-replay; README.md here).
#   run.sh BUILD fuzz SECONDS [NAME…]   fuzz each harness SECONDS (one core each, in turn),
#                                       starting from corpus/NAME/ and BUILD/fuzz/corpus/NAME/
#                                       (new inputs go there, not into git), with NAME.dict
#   run.sh BUILD replay [NAME…]         run every input of corpus/NAME/ once (CI: seconds)
# FUZZ_SEED=N and FUZZ_RUNS=N make a fuzz run reproducible: libFuzzer's -seed and -runs (CI
# fuzzes a fixed number of inputs from a fixed seed, so its verdict does not depend on luck).
# A crash, leak, UB, timeout (> 10 s per input) or out-of-memory (> 2 GB) stops that harness
# and leaves the input as BUILD/fuzz/crashes/NAME-crash-…; exit 1 if any harness found one.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD fuzz SECONDS | replay [NAME…]} mode=${2:?}
shift 2
secs=0
[[ $mode == fuzz ]] && { secs=${1:?fuzz needs SECONDS}; shift; }
names=("$@")
((${#names[@]})) || for d in "$here"/corpus/*/; do names+=("$(basename "$d")"); done
out=$build/fuzz
mkdir -p "$out/crashes" "$out/logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
printf '# %-12s %8s %10s %8s  %s\n' harness seconds execs corpus result
for name in "${names[@]}"; do
  bin=$build/bin/fuzz_$name
  [[ -x $bin ]] || { echo "FAIL $name: no $bin (make fuzz builds it)"; status=1; continue; }
  log=$out/logs/$name.log
  dict=(); [[ -f $here/$name.dict ]] && dict=(-dict="$here/$name.dict")
  t0=$SECONDS
  if [[ $mode == replay ]]; then
    inputs=("$here"/corpus/"$name"/*)
    "$bin" -timeout=10 -rss_limit_mb=2048 "${inputs[@]}" >"$log" 2>&1
    rc=$?
    execs=${#inputs[@]} corpus=${#inputs[@]}
  else
    mkdir -p "$out/corpus/$name"
    bounded=()
    [[ -n ${FUZZ_SEED:-} ]] && bounded+=(-seed="$FUZZ_SEED")
    [[ -n ${FUZZ_RUNS:-} ]] && bounded+=(-runs="$FUZZ_RUNS")
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${bounded[@]}" \
      -artifact_prefix="$out/crashes/$name-" "${dict[@]}" "$out/corpus/$name" "$here/corpus/$name" >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    corpus=$(ls "$out/corpus/$name" | wc -l)
  fi
  if ((rc == 0)); then
    result=clean
  else
    result="FOUND (exit $rc): $(grep -m1 -E 'ERROR: |runtime error|fuzz property|Test unit written' "$log" | cut -c1-150); log $log"
    status=1
  fi
  printf '  %-12s %8d %10s %8s  %s\n' "$name" $((SECONDS - t0)) "${execs:-?}" "$corpus" "$result"
done
exit $status
