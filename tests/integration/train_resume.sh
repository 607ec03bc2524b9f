#!/usr/bin/env bash
# Resume equivalence: a run stopped at step k and resumed gives exactly the loss sequence
# of an uninterrupted run (deterministic = true). And a checkpoint interrupted mid-write
# never becomes `latest`: the run resumes from the one before and still matches.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"

"$bin" train "${small[@]}" --set train.epochs=2 --run-dir "$tmp/a" --quiet >"$tmp/a.out" 2>&1 || { cat "$tmp/a.out"; exit 1; }

# --- stop at step 50 (mid-epoch 1), resume ---
"$bin" train "${small[@]}" --set train.epochs=2 --set train.max_steps=50 --run-dir "$tmp/b" --quiet >/dev/null 2>&1
check "stopped run checkpointed at step 50" grep -qx step_50 "$tmp/b/checkpoints/latest"
"$bin" train --run-dir "$tmp/b" --resume auto --set train.max_steps=0 >"$tmp/b.out" 2>&1
check "resume announced" grep -q "resuming from .*step_50" "$tmp/b.out"
losses "$tmp/a/metrics.jsonl" >"$tmp/a.loss"
losses "$tmp/b/metrics.jsonl" >"$tmp/b.loss"
check "126 logged steps" test "$(wc -l <"$tmp/a.loss")" = 126
check "stop+resume loss sequence == uninterrupted, exactly" cmp -s "$tmp/a.loss" "$tmp/b.loss"
cmp -s "$tmp/a.loss" "$tmp/b.loss" || diff "$tmp/a.loss" "$tmp/b.loss" | head -5

# --- killed while committing the second checkpoint ---
TRAINBOX_FAULT=checkpoint_commit:2 "$bin" train "${small[@]}" --set train.epochs=2 --set checkpoint.every_steps=20 \
  --run-dir "$tmp/c" --quiet >/dev/null 2>&1
rc=$?
check "fault injection killed the run (86)" test "$rc" = 86
check "latest still names the complete step_20" grep -qx step_20 "$tmp/c/checkpoints/latest"
check "no step_40 directory" test ! -e "$tmp/c/checkpoints/step_40"
check "the interrupted write left only a .tmp dir" compgen -G "$tmp/c/checkpoints/.tmp-step_40-*" >/dev/null
"$bin" train --run-dir "$tmp/c" --resume auto >"$tmp/c.out" 2>&1
check "resumed from step_20" grep -q "resuming from .*step_20" "$tmp/c.out"
check "leftover .tmp removed" test -z "$(compgen -G "$tmp/c/checkpoints/.tmp-*")"
losses "$tmp/c/metrics.jsonl" >"$tmp/c.loss"
check "crash+resume loss sequence == uninterrupted" cmp -s "$tmp/a.loss" "$tmp/c.loss"
exit $fail
