#!/usr/bin/env bash
# What a first try found, in trainbox train / sample / export / bench / doctor (LibTorch side):
#   1  a failed resume writes nothing to the run dir, and a config/checkpoint mismatch is named
#      at the config level; a failed validation leaves no new run dir behind;
#   3  no CIFAR-10 data: the CIFAR-10 fix, not Fashion-MNIST's;
#   4  train.max_steps: the last progress line shows the real stop;
#   8  Ctrl-C says what was saved; --resume auto with nothing to resume says so;
#   9  init_from with the wrong width: the counts agree and a few names are shown;
#   10 sample / export / --resume take a run dir, `latest` and step_N;
#   11 keys the chosen model ignores are a warning;  12 bench names its flag, not a config key;
#   13 every exit 2 has a `fix:` line (a sweep of known bad inputs);  14 a bad config under
#      --nproc-per-node is one line from the launching process, and so is a bad count (abc, 0,
#      -1, 99999999999: issue 19);  16 small wording;
#   docs: datasets.md's sample error is what the tool prints.
# Needs TRAINBOX_BIN (ctest sets it). Every wait is bounded.
set -uo pipefail
bin=${TRAINBOX_BIN:?}
src=${TRAINBOX_SOURCE_DIR:?}
py=${TRAINBOX_PYTHON:-python3}
tmp=$(mktemp -d)
export TMPDIR=$tmp  # a launcher's kept folder goes with $tmp (tests/integration/own_tmpdir.sh)
cleanup() { [[ $BASHPID == "$$" ]] || return 0; [[ -n ${tpid:-} ]] && kill -KILL "$tpid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
source "$(dirname "$0")/check_lib.sh"
FLUNK_LOGS=$tmp/err FLUNK_TAIL=8
# run NAME WANTED_RC -- command…: output in $tmp/out, $tmp/err; sets rc.
run() {
  local name=$1 want=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [[ $rc == "$want" ]] && return 0
  flunk "$name" "exit $rc, wanted $want"
  return 1
}
has() { grep -qE -- "$2" "$1"; }
# snapshot DIR: every file (but the lock, whose content is its holder's pid) with its checksum.
snapshot() { (cd "$1" && find . -type f ! -name .lock -print0 | sort -z | xargs -0 sha256sum); }

tiny=(--set data.dataset=synthetic --set data.synthetic_samples=256 --set train.batch_size=32 --set train.epochs=1
      --set train.threads=1 --set train.device=cpu --set output.progress=off --set train.log_every=1)
cnn=(--set model.name=cnn --set model.channels=[4] --set model.fc=16)

# --- 1: a mistaken resume poisons nothing ---
run train-cnn 0 -- "$bin" train "${tiny[@]}" "${cnn[@]}" --run-dir "$tmp/poison" || exit 1
before=$(snapshot "$tmp/poison")
run wrong-model-resume 2 -- "$bin" train "$src/configs/fashion_mlp.toml" "${tiny[@]}" --run-dir "$tmp/poison" --resume auto
has "$tmp/err" 'was trained with model\.name = "cnn"; this config says "mlp"' && ! has "$tmp/err" 'shape \[' &&
  pass "mismatch named at the config level" || flunk config-level "$(head -2 "$tmp/err")"
[[ $(snapshot "$tmp/poison") == "$before" ]] && pass "failed resume wrote nothing to the run dir" ||
  flunk nothing-written "$(diff <(echo "$before") <(snapshot "$tmp/poison"))"
run plain-resume 0 -- "$bin" train --set train.epochs=2 --set output.progress=lines --run-dir "$tmp/poison" --resume auto &&
  has "$tmp/err" 'resuming from .*step_8' && pass "the run dir still resumes with its own config" ||
  flunk plain-resume "$(tail -2 "$tmp/err")"
# the other rule: every bad input leaves an existing run dir as it was, and creates no new one
for bad in "--set model.channels=[8]" "--set optim.name=sgd" "--set train.amp=fp16" "--resume $tmp/nowhere"; do
  before=$(snapshot "$tmp/poison")
  # shellcheck disable=SC2086
  "$bin" train "${tiny[@]}" "${cnn[@]}" --set train.epochs=3 --run-dir "$tmp/poison" $([[ $bad == --resume* ]] || echo --resume auto) $bad \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [[ $rc == 2 && $(snapshot "$tmp/poison") == "$before" ]] && pass "nothing written: $bad" ||
    flunk "nothing-written: $bad" "exit $rc"
done
run fresh-dir-bad-resume 2 -- "$bin" train "${tiny[@]}" --resume "$tmp/nowhere" --run-dir "$tmp/fresh"
[[ ! -e $tmp/fresh ]] && pass "a failed validation leaves no new run dir" || flunk no-fresh-dir "$(ls -A "$tmp/fresh")"

# --- 10: a run dir, `latest` and step_N wherever a checkpoint is taken ---
step=$(cat "$tmp/poison/checkpoints/latest")
for what in "$tmp/poison" "$tmp/poison/checkpoints/latest" "$tmp/poison/checkpoints/$step"; do
  run "export $what" 0 -- "$bin" export "$what" "$tmp/e.safetensors" --force &&
    { [[ ! -e $tmp/ref.safetensors ]] && cp "$tmp/e.safetensors" "$tmp/ref.safetensors"; cmp -s "$tmp/e.safetensors" "$tmp/ref.safetensors"; } &&
    pass "export takes ${what#"$tmp"/}" || flunk "export ${what#"$tmp"/}" "not the same weights"
done
cp -r "$tmp/poison" "$tmp/poison2"
run resume-latest 0 -- "$bin" train "${tiny[@]}" "${cnn[@]}" --set train.epochs=3 --run-dir "$tmp/poison2" \
  --resume "$tmp/poison2/checkpoints/latest" && has "$tmp/err" "resuming from $tmp/poison2/checkpoints/$step" &&
  pass "--resume takes checkpoints/latest" || flunk resume-latest "$(tail -2 "$tmp/err")"

# --- 8: --resume auto with nothing to resume says so ---
run resume-nothing 0 -- "$bin" train "${tiny[@]}" --run-dir "$tmp/empty" --resume auto &&
  has "$tmp/err" 'no checkpoint in .* starting at step 0' && pass "--resume auto with nothing says so" ||
  flunk resume-nothing "$(head -2 "$tmp/err")"
# --- 16: "1 epoch", not "1 epochs" ---
has "$tmp/out" 'after 1 epoch / 8 steps' && pass "summary wording" || flunk summary-wording "$(head -1 "$tmp/out")"

# --- 4: train.max_steps: the last progress line is the real stop ---
run max-steps 0 -- "$bin" train "${tiny[@]}" --set data.synthetic_samples=2048 --set train.epochs=10 \
  --set train.max_steps=5 --set output.progress=lines --run-dir "$tmp/max"
last=$(grep -E '^epoch [0-9]+/[0-9]+ batch' "$tmp/err" | tail -1)
[[ $last == "epoch 1/1 batch 5/5 step 5/5 "* ]] && pass "max_steps progress: ${last%% loss*}" || flunk max-steps "last line: $last"

# --- 8: Ctrl-C says what was saved ---
dfl=("$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])')
"${dfl[@]}" "$bin" train "${tiny[@]}" --set data.synthetic_samples=4096 --set train.epochs=1000 --set checkpoint.every_steps=3 \
  --run-dir "$tmp/int" >"$tmp/out" 2>"$tmp/err" &
tpid=$!
for _ in $(seq 600); do [[ -s $tmp/int/checkpoints/latest ]] && break; sleep 0.1; done
kill -INT "$tpid"
timeout 30 tail --pid="$tpid" -f /dev/null || kill -KILL "$tpid"
wait "$tpid"
rc=$?
tpid=
[[ $rc == 130 ]] && has "$tmp/err" "interrupted; the last checkpoint is $tmp/int/checkpoints/step_[0-9]+ \(--resume auto" &&
  pass "Ctrl-C names the last checkpoint" || flunk ctrl-c "exit $rc: $(tail -1 "$tmp/err")"
# No checkpoint before the end of the run (every_epochs=0): an epoch of this job takes ~0.1 s, less
# than the poll below, so with the default a checkpoint could be saved before the Ctrl-C lands.
"${dfl[@]}" "$bin" train "${tiny[@]}" --set data.synthetic_samples=4096 --set train.epochs=1000 \
  --set checkpoint.every_epochs=0 --run-dir "$tmp/int0" >"$tmp/out" 2>"$tmp/err" &
tpid=$!
for _ in $(seq 600); do has "$tmp/err" 'trainbox train: mlp on' && break; sleep 0.1; done
kill -INT "$tpid"
timeout 30 tail --pid="$tpid" -f /dev/null || kill -KILL "$tpid"
wait "$tpid"
rc=$?
tpid=
[[ $rc == 130 ]] && has "$tmp/err" 'interrupted; nothing was saved' && pass "Ctrl-C before any checkpoint says so" ||
  flunk ctrl-c-nothing "exit $rc: $(tail -1 "$tmp/err")"
has "$src/configs/text_gpt.toml" '^every_steps = [0-9]+' && pass "text_gpt.toml checkpoints before it stops" ||
  flunk text-gpt-checkpoints "no checkpoint.every_steps"

# --- 9: init_from with the wrong width ---
wide=(--set model.hidden=[32,32,32,32,32,32])
run init-src 0 -- "$bin" train "${tiny[@]}" "${wide[@]}" --run-dir "$tmp/wide" &&
  run init-export 0 -- "$bin" export "$tmp/wide" "$tmp/wide.safetensors"
run init-wrong-width 2 -- "$bin" train "${tiny[@]}" --set model.hidden=[16,16,16,16,16,16] \
  --set model.init_from="$tmp/wide.safetensors" --run-dir "$tmp/narrow"
total=$(sed -nE 's/.*does not fit the model \(([0-9]+) tensors.*/\1/p' "$tmp/err")
bad=$(sed -nE 's/.*: ([0-9]+) with another shape.*/\1/p' "$tmp/err")
[[ -n $total && -n $bad ]] && ((bad <= total)) && has "$tmp/err" '… \([0-9]+ more\)' && (($(head -1 "$tmp/err" | wc -c) < 1000)) &&
  pass "init_from mismatch: $bad of $total tensors, a few names" || flunk init-from "$(head -c 600 "$tmp/err")"

# --- 11: a key the model ignores is a warning ---
run ignored-key 0 -- "$bin" train "${tiny[@]}" "${cnn[@]}" --set model.hidden=[64] --print-config
has "$tmp/err" 'warning: model\.hidden = \[64\] has no effect: it is for model\.name = "mlp", and this config says "cnn"' &&
  pass "ignored key warned" || flunk ignored-key "$(cat "$tmp/err")"
run no-warning 0 -- "$bin" train "${tiny[@]}" "${cnn[@]}" --print-config
[[ ! -s $tmp/err ]] && pass "no warning without one" || flunk no-warning "$(cat "$tmp/err")"
for c in "$src"/configs/*.toml; do
  run "config $(basename "$c")" 0 -- "$bin" train "$c" --print-config && ! has "$tmp/err" warning ||
    flunk "shipped config warns: $(basename "$c")" "$(cat "$tmp/err")"
done

# --- 13/3/12/14: every exit 2 says how to fix it ---
: >"$tmp/empty.json"
mkdir -p "$tmp/nockpt/checkpoints"  # a run dir that never finished a checkpoint
echo '{"report": [' >"$tmp/garbage.json"
sweep=(
  "bench gemm --dtypes fp64"
  "bench allreduce -b 1M -e 8"
  "bench train --device cuda:99"
  "doctor --from $tmp/empty.json"
  "doctor --from $tmp/garbage.json"
  "doctor --from $tmp/missing.json"
  "train --set train.epoch=1"
  "train --set optim.betas=[0.9]"
  "train --nproc-per-node 2 --set train.epoch=1"
  "train --nproc-per-node abc"
  "train --nproc-per-node 0"
  "train --nproc-per-node -1"
  "train --nproc-per-node 99999999999"
  "train $src/configs/cifar10_resnet.toml --set data.path=$tmp/no-cifar --set train.device=cpu"
  "train --resume auto"
  "train --resume $tmp/nockpt"
  "sample $tmp/nowhere"
  "export $tmp/nowhere $tmp/x.safetensors"
  "run --nproc-per-node 0 -- true"
  "run"
  "entrypoint"
  "nosuchcommand"
)
for args in "${sweep[@]}"; do
  # shellcheck disable=SC2086
  timeout 60 "$bin" $args >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ $rc == 2 ]] && grep -qE '^ *fix: .+' "$tmp/err" && ! grep -q 'json.exception' "$tmp/err"; then
    pass "exit 2 with a fix: $args"
  else
    flunk "fix line: $args" "exit $rc"
  fi
  case $args in
  "bench gemm"*) has "$tmp/err" 'fp64' || flunk gemm-names-value "" ;;
  "bench train"*) has "$tmp/err" -- '--device cuda:99' && ! has "$tmp/err" 'train\.device' || flunk bench-names-flag "$(head -1 "$tmp/err")" ;;
  "doctor --from $tmp/empty.json") has "$tmp/err" "$tmp/empty.json" || flunk doctor-names-file "$(head -1 "$tmp/err")" ;;
  *betas*) has "$tmp/err" 'optim\.betas = \[0\.9\] is not allowed: a list of 2 numbers' || flunk betas-text "$(head -1 "$tmp/err")" ;;
  *nproc-per-node\ 2*)
    ! has "$tmp/err" '\[rank|root cause' && (($(wc -l <"$tmp/err") <= 3)) && has "$tmp/err" "did you mean 'train.epochs'" &&
      pass "nproc: the typo is one line from the launching process" || flunk nproc-validate "$(wc -l <"$tmp/err") lines" ;;
  "train --nproc-per-node "[a0-9-]*)  # a bad count: the error and its fix, from this process; no worker
    (($(wc -l <"$tmp/err") == 2)) && has "$tmp/err" "^trainbox: error: --nproc-per-node ${args##* }: must be" &&
      ! has "$tmp/err" '\[rank|root cause|LOCAL_RANK' && pass "nproc: '${args##* }' is one line and a fix" ||
      flunk nproc-bad-count "$(cat "$tmp/err")" ;;
  *cifar10*)
    has "$tmp/err" 'cifar-10-binary' && ! has "$tmp/err" 'fashion' && pass "cifar: the CIFAR-10 fix" || flunk cifar-fix "$(cat "$tmp/err")" ;;
  esac
done

# --- docs: datasets.md's Latin-1 sample is what the tool prints ---
"$py" - "$tmp/corpus.txt" <<'PY'
import sys
body = b"".join(b"%-40d\n" % i for i in range(209))  # 209 lines: the bad byte is on line 210
body += b"x" * (8812 - 3 - len(body)) + b"caf\xe9 au lait\n"  # the 0xe9 at offset 8812
open(sys.argv[1], "wb").write(body)
PY
(cd "$tmp" && "$bin" train "$src/configs/text_gpt.toml" --set data.path=corpus.txt --set train.device=cpu \
  >"$tmp/out" 2>"$tmp/err")
sed -n '/^  ```$/,/^  ```$/p' "$src/docs/datasets.md" | sed -n '/is not UTF-8 text/,/fix:/p' | sed 's/^  //' >"$tmp/doc-sample"
if [[ -s $tmp/doc-sample ]] && diff -u "$tmp/doc-sample" "$tmp/err" >"$tmp/diff"; then
  pass "docs/datasets.md's sample error is the real one"
else
  flunk doc-sample "$(cat "$tmp/diff")"
fi
exit $fail
