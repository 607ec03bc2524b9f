#!/usr/bin/env bash
# A full disk while saving a checkpoint (docs/checkpoints.md): the run stops with exit 1 and
# one line "checkpoint save failed: No space left on device (…)"; nothing of that save is
# left behind; `latest` still names the previous checkpoint, and after space is freed
# --resume auto continues from it to the uninterrupted run's weights, bit for bit.
# The run dir is a 3 MiB tmpfs, filled until the next checkpoint cannot fit.
# Root only (mount); skips (77) with the reason elsewhere.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
mnt=$tmp/mnt
trap 'umount "$mnt" 2>/dev/null; rm -rf "$tmp"' EXIT
((EUID == 0)) || { echo "SKIPPED: mounting a tmpfs needs root"; exit 77; }
mkdir -p "$mnt"
why=$(mount -t tmpfs -o size=3m,mode=0755 trainbox-enospc "$mnt" 2>&1) || { echo "SKIPPED: cannot mount a tmpfs: $why"; exit 77; }
job=("${small[@]}" --set train.epochs=2 --set checkpoint.every_steps=20 --set checkpoint.keep=3)
run=$mnt/run

# --- the uninterrupted run (on the ordinary disk); then 40 steps on the tmpfs ---
"$bin" train "${job[@]}" --run-dir "$tmp/a" --quiet >"$tmp/a.out" 2>&1 || { cat "$tmp/a.out"; exit 1; }
final=$(cat "$tmp/a/checkpoints/latest")
ckpt_bytes=$(du -sb "$tmp/a/checkpoints/$final" | cut -f1)
"$bin" train "${job[@]}" --set train.max_steps=40 --run-dir "$run" --quiet >"$tmp/b.out" 2>&1 || { cat "$tmp/b.out"; exit 1; }
check "40 steps on the tmpfs: latest is step_40" grep -qx step_40 "$run/checkpoints/latest"

# --- fill it: room for the start-up writes and half a checkpoint, not a whole one ---
avail=$(df --output=avail -B1 "$mnt" | tail -1)
leave=$((ckpt_bytes / 2)) && fill=$((avail - leave))
frc=1
((fill > 0)) && { head -c "$fill" /dev/zero >"$mnt/fill"; frc=$?; }
left=$(df --output=avail -B1 "$mnt" | tail -1)
echo "#    checkpoint $ckpt_bytes bytes; filled $fill of $avail free bytes; $left bytes left on the tmpfs"
check "the fill wrote all $fill bytes" test "$frc" = 0 -a "$(stat -c %s "$mnt/fill" 2>/dev/null)" = "$fill"
check "... leaving less room ($left bytes) than one checkpoint ($ckpt_bytes bytes)" test "$left" -lt "$ckpt_bytes"

"$bin" train --run-dir "$run" --resume auto --set train.max_steps=0 >"$tmp/full.out" 2>&1
rc=$?
check "save on a full disk: exit 1" test "$rc" = 1
check "one clear line: checkpoint save failed: No space left on device (step_60 …)" \
  grep -qE "^trainbox: (error: )?checkpoint save failed: No space left on device \(step_60 in .*; \`latest\` still names step_40\)$" "$tmp/full.out"
check "the hint says to free space" grep -qE "^  fix: free space" "$tmp/full.out"
check "latest still names step_40" grep -qx step_40 "$run/checkpoints/latest"
check "no step_60 left behind" test ! -e "$run/checkpoints/step_60"
check "no temporary dirs or files left behind" test -z "$(compgen -G "$run/checkpoints/.tmp*")$(compgen -G "$run/checkpoints/latest.tmp")"
((rc == 1)) || tail -5 "$tmp/full.out"

# --- free space: the resume from step_40 ends with the uninterrupted weights ---
rm -f "$mnt/fill"
"$bin" train --run-dir "$run" --resume auto --set train.max_steps=0 >"$tmp/resumed.out" 2>&1
rc=$?
check "after freeing space the run resumes and finishes (exit 0)" test "$rc" = 0
check "resumed from step_40" grep -qE "resuming from .*step_40" "$tmp/resumed.out"
check "no checkpoint was skipped as damaged" bash -c "! grep -q 'is damaged' '$tmp/resumed.out'"
check "final weights == the uninterrupted run's (model.pt bytes)" \
  cmp -s "$tmp/a/checkpoints/$final/model.pt" "$run/checkpoints/$final/model.pt"
((rc == 0)) || tail -5 "$tmp/resumed.out"
exit $fail
