#!/usr/bin/env bash
# Damaged checkpoints are named and never loaded (docs/checkpoints.md):
#   1. a flipped byte in each kind of file of the newest checkpoint (model.pt, optimizer.pt,
#      rng.pt, state.json, config.toml), a truncated optimizer.pt, a deleted rng.pt:
#      --resume auto names the file, falls back to the previous checkpoint, saying so, and
#      the run ends with the uninterrupted run's weights, bit for bit (deterministic);
#   2. --resume DIR of a damaged checkpoint: exit 2 naming the file, nothing trained;
#   3. every checkpoint damaged: exit 2, one line naming every bad file, nothing trained.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
job=("${small[@]}" --set train.epochs=2 --set checkpoint.every_steps=20 --set checkpoint.keep=3)

# --- the uninterrupted run, and one stopped at step 60 (checkpoints step_20, 40, 60) ---
"$bin" train "${job[@]}" --run-dir "$tmp/a" --quiet >"$tmp/a.out" 2>&1 || { cat "$tmp/a.out"; exit 1; }
final=$(cat "$tmp/a/checkpoints/latest")
"$bin" train "${job[@]}" --set train.max_steps=60 --run-dir "$tmp/stopped" --quiet >/dev/null 2>&1
for s in 20 40 60; do check "stopped run has a complete step_$s" test -s "$tmp/stopped/checkpoints/step_$s/COMPLETE"; done
check "each checkpoint has a manifest" test -s "$tmp/stopped/checkpoints/step_60/MANIFEST.json"

flip_in() {  # flip_in FILE CHECKPOINT_DIR: invert one byte in the middle of the file
  "$py" -c '
import os, sys
p = sys.argv[1]; n = os.path.getsize(p)
with open(p, "r+b") as f:
    f.seek(n // 2); b = f.read(1); f.seek(n // 2); f.write(bytes([b[0] ^ 0xff]))' "$2/$1"
}
truncate_in() { truncate -s $(($(stat -c %s "$2/$1") / 2)) "$2/$1"; }  # to half its size
delete_in() { rm -f "$2/$1"; }
train_events() { grep -c '"event": *"train"' "$1/metrics.jsonl"; }

# resumes_past NAME PATTERN DAMAGE-COMMAND…: a copy of the stopped run, step_60 damaged by
# `DAMAGE-COMMAND… CHECKPOINT_DIR`, resumed: names the file (PATTERN), falls back to step_40
# saying so, and ends with the uninterrupted run's weights.
resumes_past() {
  local name=$1 pattern=$2; shift 2
  local run=$tmp/$name
  cp -a "$tmp/stopped" "$run"
  "$@" "$run/checkpoints/step_60"
  "$bin" train --run-dir "$run" --resume auto --set train.max_steps=0 >"$run.out" 2>&1
  local rc=$?
  check "$name: the resumed run exits 0" test "$rc" = 0
  check "$name: names the file: $pattern" grep -qE "step_60 is damaged: $pattern" "$run.out"
  check "$name: says it falls back to step_40" grep -qE "falling back to .*step_40" "$run.out"
  check "$name: resumed from step_40" grep -qE "resuming from .*step_40" "$run.out"
  check "$name: final weights == the uninterrupted run's (model.pt bytes)" \
    cmp -s "$tmp/a/checkpoints/$final/model.pt" "$run/checkpoints/$final/model.pt"
  ((rc == 0)) || tail -5 "$run.out"
}
for f in model.pt optimizer.pt rng.pt state.json config.toml; do
  resumes_past "flipped-${f%.*}" "$f: contents changed: sha256 [0-9a-f]+…, the manifest says [0-9a-f]+…" flip_in "$f"
done
resumes_past truncated-optimizer "optimizer.pt: [0-9]+ bytes, the manifest says [0-9]+ \(truncated\)" truncate_in optimizer.pt
resumes_past deleted-rng "rng.pt: missing" delete_in rng.pt
resumes_past damaged-manifest "MANIFEST.json: contents changed" flip_in MANIFEST.json

# --- --resume DIR names the damaged file and loads nothing ---
cp -a "$tmp/stopped" "$tmp/explicit"
flip_in model.pt "$tmp/explicit/checkpoints/step_60"
before=$(train_events "$tmp/explicit")
"$bin" train --run-dir "$tmp/explicit" --resume "$tmp/explicit/checkpoints/step_60" >"$tmp/explicit.out" 2>&1
rc=$?
check "--resume DIR of a damaged checkpoint: exit 2" test "$rc" = 2
check "--resume DIR: names model.pt" grep -qE "^trainbox: (error: )?checkpoint .*step_60 is damaged: model.pt: contents changed" "$tmp/explicit.out"
check "--resume DIR: nothing trained" test "$(train_events "$tmp/explicit")" = "$before"

# --- export of a run dir whose newest checkpoint is damaged: says so, names the step it read ---
cp -a "$tmp/stopped" "$tmp/export"
flip_in model.pt "$tmp/export/checkpoints/step_60"
"$bin" export "$tmp/export" "$tmp/export.safetensors" >"$tmp/export.out" 2>&1
rc=$?
check "export past a damaged checkpoint: exit 0" test "$rc" = 0
check "export: names the damaged file" grep -qE "trainbox export: note: checkpoint step_60 is damaged: model.pt" "$tmp/export.out"
check "export: says it falls back to step_40" grep -qE "trainbox export: note: falling back to .*step_40" "$tmp/export.out"
check "export: the wrote line names the step read" grep -qE "^wrote .*export.safetensors .* from .*checkpoints/step_40$" "$tmp/export.out"
((rc == 0)) || tail -5 "$tmp/export.out"
"$bin" export "$tmp/export/checkpoints/step_60" "$tmp/export60.safetensors" >"$tmp/export60.out" 2>&1
rc=$?
check "export of the damaged checkpoint by name: exit 2" test "$rc" = 2
check "export: the fix says what export takes (not --resume)" \
  bash -c "grep -q 'fix: pass an earlier checkpoint' '$tmp/export60.out' && ! grep -q -- '--resume' '$tmp/export60.out'"
check "export: nothing written" test ! -e "$tmp/export60.safetensors"
"$bin" export "$tmp/stopped" "$tmp/ok.safetensors" >"$tmp/ok.out" 2>&1
check "export of a sound run dir names its step (step_60)" grep -qE "^wrote .* from .*stopped/checkpoints/step_60$" "$tmp/ok.out"

# --- every checkpoint damaged: exit 2, one line naming each file, nothing trained ---
cp -a "$tmp/stopped" "$tmp/all"
flip_in model.pt "$tmp/all/checkpoints/step_60"
truncate_in state.json "$tmp/all/checkpoints/step_40"
flip_in rng.pt "$tmp/all/checkpoints/step_20"
before=$(train_events "$tmp/all")
"$bin" train --run-dir "$tmp/all" --resume auto >"$tmp/all.out" 2>&1
rc=$?
check "all damaged: exit 2" test "$rc" = 2
check "all damaged: one error line" test "$(grep -c '^trainbox: ' "$tmp/all.out")" = 1
check "all damaged: the line names every bad file" grep -qE "^trainbox: (error: )?no usable checkpoint in .*: step_60 is damaged: model.pt: .*; step_40 is damaged: state.json: .*truncated.*; step_20 is damaged: rng.pt: contents changed" "$tmp/all.out"
check "all damaged: nothing trained" test "$(train_events "$tmp/all")" = "$before"
((rc == 2)) || tail -5 "$tmp/all.out"
exit $fail
