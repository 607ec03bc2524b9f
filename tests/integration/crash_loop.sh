#!/usr/bin/env bash
# Crash loop (docs/checkpoints.md): a deterministic run with a checkpoint every 25 steps and
# --resume auto is killed 20 times at random moments, then run to completion. Every attempt
# either dies by the kill or finishes, every resume works and skips nothing as damaged, and
# the final weights are bit-identical to an uninterrupted run's (model.pt bytes, which the
# C++ archive writer makes reproducible).
# Kills: SIGKILL 0-19 ms after the attempt has logged 1-60 steps (in training, evaluation or a
# checkpoint write); or 0-5 ms after it logged step 25 or 50 past its start, i.e. inside the
# checkpoint write that follows; or, one time in four, TRAINBOX_FAULT=checkpoint_commit:N:
# death inside a commit, files written and fsync'ed, not yet renamed.
# The plan comes from a seeded RNG, printed first; CRASH_LOOP_SEED=… replays it (where in a
# step a kill lands still depends on timing).
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
seed=${CRASH_LOOP_SEED:-$((($$ * 7919 + $(date +%s)) % 1000003))}
kills=${CRASH_LOOP_KILLS:-20}
echo "# seed $seed (replay: CRASH_LOOP_SEED=$seed $0)"
RANDOM=$seed
# 8 epochs x 63 steps: 20 attempts make ~350 steps of progress, so no kill is wasted on a
# finished run.
job=("${small[@]}" --set train.epochs=8 --set checkpoint.every_steps=25 --set checkpoint.keep=3)
t0=$SECONDS
"$bin" train "${job[@]}" --run-dir "$tmp/a" --quiet >"$tmp/a.out" 2>&1 || { cat "$tmp/a.out"; exit 1; }
final=$(cat "$tmp/a/checkpoints/latest")
run=$tmp/crash
mkdir -p "$run"
events() { grep -c '"event": *"train"' "$run/metrics.jsonl" 2>/dev/null || echo 0; }

bad=0 in_save=0
for i in $(seq "$kills"); do
  log=$tmp/attempt_$i.out
  opts=("${job[@]}")
  [[ -s $run/checkpoints/latest ]] && opts=(--resume auto)  # the first attempt starts the run
  if ((RANDOM % 4 == 0)); then
    nth=$((1 + RANDOM % 2))
    how="TRAINBOX_FAULT=checkpoint_commit:$nth"
    TRAINBOX_FAULT=checkpoint_commit:$nth "$bin" train "${opts[@]}" --run-dir "$run" >"$log" 2>&1
    rc=$?
  else
    if ((RANDOM % 3 == 0)); then  # aimed at a checkpoint write: its step's loss is logged just before
      after=$((25 * (1 + RANDOM % 2))) delay_ms=$((RANDOM % 6))
    else
      after=$((1 + RANDOM % 60)) delay_ms=$((RANDOM % 20))
    fi
    how="SIGKILL ${delay_ms} ms after logged step $after of this attempt"
    target=$(($(events) + after))
    "$bin" train "${opts[@]}" --run-dir "$run" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 3000); do  # at most 30 s
      (($(events) >= target)) || ! kill -0 "$pid" 2>/dev/null && break
      sleep 0.01
    done
    sleep "$(printf '0.%03d' "$delay_ms")"
    kill -KILL "$pid" 2>/dev/null
    { wait "$pid"; } 2>/dev/null
    rc=$?
  fi
  at=$(cat "$run/checkpoints/latest" 2>/dev/null || echo none)
  left=$(compgen -G "$run/checkpoints/.tmp-*" | head -1)
  [[ -n $left ]] && ((in_save += 1)) && left=" (inside a save: ${left##*/} left behind)"
  echo "#    attempt $i: $how: exit $rc, latest $at$left"
  case $rc in
    137 | 86) ;;
    0) echo "#    (the run finished before its kill)" ;;
    *) echo "FAIL attempt $i: exit $rc"; tail -5 "$log"; bad=1 ;;
  esac
  if grep -qE "is damaged|is unusable|falling back|no usable checkpoint" "$log"; then
    echo "FAIL attempt $i: a checkpoint was rejected after a kill"; grep -E "damaged|falling back|usable" "$log"; bad=1
  fi
done
echo "# $in_save of $kills kills landed inside a checkpoint save"
check "every attempt died by its kill or finished; no checkpoint ever rejected" test "$bad" = 0

# --- to completion ---
"$bin" train --resume auto --run-dir "$run" >"$tmp/last.out" 2>&1
rc=$?
check "the last resume runs to the end (exit 0)" test "$rc" = 0
((rc == 0)) || tail -5 "$tmp/last.out"
check "resumed runs announced where they resumed" grep -qE "resuming from .*step_[0-9]+" "$tmp/last.out"
check "final weights bit-identical to the uninterrupted run's ($final/model.pt)" \
  cmp -s "$tmp/a/checkpoints/$final/model.pt" "$run/checkpoints/$final/model.pt"
losses "$tmp/a/metrics.jsonl" >"$tmp/a.loss"
losses "$run/metrics.jsonl" >"$tmp/crash.loss"
check "logged losses == the uninterrupted run's" cmp -s "$tmp/a.loss" "$tmp/crash.loss"
echo "# $((SECONDS - t0)) s (seed $seed)"
exit $fail
