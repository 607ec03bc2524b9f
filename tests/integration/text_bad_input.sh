#!/usr/bin/env bash
# The text dataset's bad inputs through `trainbox train`: each exits 2 with one line that
# names the file and the number, then a fix line, and leaves nothing in the run dir. A
# good text file and a good .bin train, so the refusals are not of everything.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
# A tiny GPT: windows of 8 tokens, so a split needs 9; 2 steps.
gpt=(--set model.name=gpt --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=16 --set model.block_size=8
     --set data.dataset=text --set data.text_holdout=0.5 --set train.batch_size=2 --set train.eval_batch_size=4
     --set train.max_steps=2 --set train.threads=1 --set train.device=cpu --set output.progress=off
     --set output.tensorboard=false --set checkpoint.every_epochs=0)
n=0
# refused NAME PATTERN PATH [--set …]: exit 2, PATTERN on the one error line, a fix line,
# no run dir.
refused() {
  local name=$1 pattern=$2 path=$3; shift 3
  n=$((n + 1)); local run=$tmp/run$n
  "$bin" train "${gpt[@]}" --set data.path="$path" "$@" --run-dir "$run" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  local first; first=$(head -n 1 "$tmp/err")
  if [[ $rc != 2 ]]; then
    echo "FAIL $name: exit $rc, wanted 2"; tail -n 5 "$tmp/out" "$tmp/err"; fail=1
  elif ! grep -qE -- "$pattern" <<<"$first"; then
    echo "FAIL $name: the error line lacks /$pattern/"; cat "$tmp/err"; fail=1
  elif [[ $(wc -l <"$tmp/err") != 2 ]] || ! sed -n 2p "$tmp/err" | grep -q '^  fix: '; then
    echo "FAIL $name: wanted one error line and one fix line"; cat "$tmp/err"; fail=1
  elif [[ -e $run ]]; then
    echo "FAIL $name: the run dir was created:"; ls -la "$run"; fail=1
  else
    echo "ok   $name"
  fi
}
# bin_file PATH MAGIC VERSION COUNT NTOKENS [EXTRA_BYTES]: an llm.c token file (ids 0..9).
bin_file() {
  "$py" - "$@" <<'PY'
import struct, sys
path, magic, version, count, ntok = sys.argv[1], *map(int, sys.argv[2:6])
extra = int(sys.argv[6]) if len(sys.argv) > 6 else 0
header = struct.pack("<3i", magic, version, count) + bytes(1024 - 12)
with open(path, "wb") as f:
    f.write(header + struct.pack(f"<{ntok}H", *(i % 10 for i in range(ntok))) + bytes(extra))
PY
}

# --- good inputs train ---
"$py" -c 'import sys; open(sys.argv[1], "w").write("the quick brown fox jumps over the lazy dog\n" * 20)' "$tmp/ok.txt"
bin_file "$tmp/ok.bin" 20240520 1 400 400
for f in ok.txt ok.bin; do
  if "$bin" train "${gpt[@]}" --set data.path="$tmp/$f" --run-dir "$tmp/run-$f" >"$tmp/out" 2>&1 && \
     grep -q '"event": *"train"' "$tmp/run-$f/metrics.jsonl"; then
    echo "ok   trains on $f"
  else
    echo "FAIL trains on $f"; tail -n 5 "$tmp/out"; fail=1
  fi
done

# --- text files ---
: >"$tmp/empty.txt"
refused empty "empty.txt is empty: 0 tokens; block_size 8" "$tmp/empty.txt"
printf 'twelve bytes' >"$tmp/short.txt"
refused shorter-than-a-window "short.txt: 12 tokens leave the train split 6 .*fewer than block_size \+ 1 = 9" "$tmp/short.txt"
"$py" -c 'import sys; open(sys.argv[1], "wb").write(b"caf\xe9 au lait\n" * 10)' "$tmp/latin1.txt"
refused invalid-utf8 "latin1.txt is not UTF-8 text: byte 0xe9 at offset 3 \(line 1\)" "$tmp/latin1.txt"
refused missing "data.path = \".*/nowhere.txt\" does not exist" "$tmp/nowhere.txt"

# --- .bin token files ---
printf 'not a token file' >"$tmp/header.bin"
refused bin-shorter-than-header "header.bin: 16 bytes, shorter than the 1024-byte header" "$tmp/header.bin"
bin_file "$tmp/magic.bin" 12345 1 100 100
refused bin-bad-magic "magic.bin: bad magic 12345 .* at offset 0, expected 20240520" "$tmp/magic.bin"
bin_file "$tmp/version.bin" 20240520 2 100 100
refused bin-bad-version "version.bin: unsupported version 2 at offset 4 for magic 20240520, expected 1 \(uint16 token ids\)" "$tmp/version.bin"
bin_file "$tmp/count.bin" 20240520 1 150 100
refused bin-count-mismatch "count.bin: the header's token count 150 \(offset 8\) does not match .* hold 100 uint16 tokens" \
  "$tmp/count.bin"
bin_file "$tmp/odd.bin" 20240520 1 100 100 1
refused bin-odd-byte-count "odd.bin: 201 bytes of tokens at offset 1024, not a multiple of 2" "$tmp/odd.bin"

# --- the model's shape, checked with the config ---
refused n-embd-not-divisible "model.n_embd = 18 is not divisible by model.n_head = 4" "$tmp/ok.txt" \
  --set model.n_embd=18 --set model.n_head=4
exit $fail
