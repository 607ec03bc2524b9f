#!/usr/bin/env bash
# Every `trainbox bench` subcommand runs at tiny sizes on CPU, --json holds the rows, a
# 2-rank allreduce runs under trainbox run, an injected wrong result is caught (exit 1),
# and bad flags exit 2.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
j() { "$py" -c 'import json,sys; d=json.load(sys.stdin); d = d if isinstance(d, list) else [d]; print(sum(len(x["rows"]) for x in d))'; }
for cmd in "gemm --sizes 64 128 --iters 3" "attention --sizes 13 64 --iters 3" "memcpy --sizes 4096 --iters 3" "allreduce -e 4096 -n 3 -w 1" \
           "train --quick" "dataloader --quick"; do
  rows=$("$bin" bench $cmd --device cpu --json 2>"$tmp/err" | j)
  check "bench $cmd: rows in JSON ($rows)" test "${rows:-0}" -gt 0
done
# bench train: the built-in rows include the GPT; --config/--set measure a job of your own (its model and
# data: here configs/text_gpt.toml's GPT, shrunk, on a generated text), one row, named in the header.
check "bench train --quick: an mlp, a cnn and a gpt row" "$py" -c '
import json, subprocess, sys
d = json.loads(subprocess.run([sys.argv[1], "bench", "train", "--quick", "--device", "cpu", "--json"],
                              capture_output=True, text=True).stdout)
models = {r["model"] for r in d["rows"]}
gpt = [r for r in d["rows"] if r["model"] == "gpt"]
sys.exit(0 if models == {"mlp", "cnn", "gpt"} and all(r["tokens_per_s"] > 0 for r in gpt) else 1)' "$bin"
"$py" -c 'open("'"$tmp"'/words.txt", "w").write("the cat sat on a mat and ran " * 2000)'
small_gpt=(--config "$(dirname "$0")/../../configs/text_gpt.toml" --set data.path="$tmp/words.txt" --set model.n_layer=1
           --set model.n_embd=32 --set model.block_size=32 --set train.batch_size=4)
"$bin" bench train --quick --device cpu --json "${small_gpt[@]}" >"$tmp/bt.json" 2>"$tmp/bt.err"
check "bench train --config text_gpt.toml --set …: exit 0, one gpt row at batch 4, the job in the header" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
ok = len(rows) == 1 and rows[0]["model"] == "gpt" and rows[0]["batch"] == 4 and rows[0]["samples_per_s"] > 0
ok = ok and "text_gpt.toml with --set" in d["header"]["job"]
if not ok: print(d)
sys.exit(0 if ok else 1)' "$tmp/bt.json"
"$bin" bench train --quick --device cpu "${small_gpt[@]}" --set dist.zero_stage=2 >/dev/null 2>"$tmp/bt2.err"
check "bench train with dist.zero_stage = 2 (one process): exit 2, naming it and trainbox train --nproc-per-node" \
  test $? = 2 -a -n "$(grep 'dist.zero_stage = 2' "$tmp/bt2.err")" -a -n "$(grep -- '--nproc-per-node 2' "$tmp/bt2.err")"
# Under a launcher every rank runs the job: a ZeRO stage measured as data parallelism (one row, the
# whole job's samples/s); the built-in rows there are refused (one job a launch).
"$bin" run --nproc-per-node 2 -- "$bin" bench train --quick --device cpu --json "${small_gpt[@]}" \
  --set dist.zero_stage=2 --set train.threads=1 >"$tmp/bt4.json" 2>"$tmp/bt4.err"
check "trainbox run -n 2 -- bench train --set dist.zero_stage=2: exit 0, one row of a 2-rank job" "$py" -c '
import json, sys
rc, d = int(sys.argv[2]), json.load(open(sys.argv[1]))
rows = d["rows"]
ok = rc == 0 and len(rows) == 1 and rows[0]["samples_per_s"] > 0 and d["header"]["ranks"].startswith("2 ")
if not ok: print(rc, d)
sys.exit(0 if ok else 1)' "$tmp/bt4.json" "$?" || tail -5 "$tmp/bt4.err"
"$bin" run --nproc-per-node 2 -- "$bin" bench train --quick --device cpu --json >"$tmp/bt5.json" 2>"$tmp/bt5.err"
check "bench train's built-in rows under a launcher: exit 0, no row, a skipped line asking for --config" "$py" -c '
import json, sys
rc, d = int(sys.argv[2]), json.load(open(sys.argv[1]))
sys.exit(0 if rc == 0 and not d["rows"] and "--config FILE" in d["header"]["skipped"] else 1)' "$tmp/bt5.json" "$?"
"$bin" bench gemm --device cpu --config "$(dirname "$0")/../../configs/text_gpt.toml" >/dev/null 2>"$tmp/bt3.err"
check "bench gemm --config: exit 2 (it applies to bench train)" test $? = 2 -a -n "$(grep 'apply to bench train' "$tmp/bt3.err")"
"$bin" bench attention --sizes 13 64 --iters 2 --device cpu --json >"$tmp/attn.json" 2>"$tmp/attn.err"
check "bench attention: trainbox's kernel agrees with ATen's SDPA at both lengths (check column ok)" "$py" -c '
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["impl"] == "trainbox"]
sys.exit(0 if len(rows) == 2 and all(r["check"].startswith("ok:") for r in rows) else 1)' "$tmp/attn.json"
out=$(timeout 120 "$bin" run --standalone --nproc-per-node 2 --no-prefix -- "$bin" bench allreduce -b 1K -e 64K -f 4 -n 3 -w 1 --device cpu 2>&1)
check "nccl-tests' size suffixes: -b 1K -e 64K runs 1024..65536" grep -qE '^ +65536 ' <<<"$out"
check "2-rank allreduce table (busbw column, no wrong values)" grep -q '# Out of bounds values : 0 OK' <<<"$out"
check "... its header names the backend and ranks" grep -q '# backend: gloo, 2 ranks' <<<"$out"
TRAINBOX_BENCH_FAULT=allreduce "$bin" bench allreduce -e 1024 -n 2 -w 0 >"$tmp/fault" 2>&1
rc=$?
check "injected wrong allreduce result: exit 1 (got $rc)" test "$rc" = 1
check "... and the #wrong column says so" grep -q 'FAILED' "$tmp/fault"
TRAINBOX_BENCH_FAULT=allreduce "$bin" bench allreduce -e 1024 -n 2 -w 0 --json >"$tmp/fault.json" 2>/dev/null
check "... and the JSON report is marked failed" "$py" -c '
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["failed"] is True else 1)' "$tmp/fault.json"
"$bin" bench allreduce -b 100 -e 10 >/dev/null 2>"$tmp/bad"
check "bad sizes: exit 2" test $? = 2
"$bin" bench allreduce -b 1K -e 4Q --device cpu >/dev/null 2>"$tmp/bad3"
check "unreadable size: exit 2 naming the option and the value" test $? = 2 -a -n "$(grep -- '--maxbytes.*4Q' "$tmp/bad3")"
check "... in one readable line (no 300-digit range)" test "$(grep -c '179769' "$tmp/bad3")" = 0
"$bin" bench gemm --iters 0 --device cpu >/dev/null 2>"$tmp/bad4"
check "--iters 0: exit 2, 'whole number >= 1'" test $? = 2 -a -n "$(grep 'whole number >= 1' "$tmp/bad4")"
# --json under a launcher: one document (rank 0's), unprefixed, that a machine can parse
timeout 120 "$bin" run --standalone --nproc-per-node 2 -- "$bin" bench allreduce -b 1K -e 4K -n 2 -w 0 --device cpu --json \
  >"$tmp/ar.json" 2>"$tmp/ar.err"
check "bench --json under trainbox run: exit 0" test $? = 0
check "... stdout is one JSON report of 2 ranks" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["bench"] == "allreduce" and d["header"]["backend"] == "gloo, 2 ranks" and not d["failed"] else 1)' "$tmp/ar.json"
# --- bench allreduce_compressed: 2 ranks, one GPT-shaped DDP exchange per method (docs/distributed.md) ---
timeout 120 "$bin" run --standalone --nproc-per-node 2 -- "$bin" bench allreduce_compressed --quick --iters 2 --warmup 3 \
  --dtypes none bf16 powersgd --sizes 4 --device cpu --json >"$tmp/ac.json" 2>"$tmp/ac.err"
check "bench allreduce_compressed under trainbox run: exit 0" test $? = 0
check "... none, bf16 and powersgd r4 rows: bytes sent = fp32 / 1, / 2, / the compress module's estimate" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["method"]: r for r in d["rows"]}
ok = not d["failed"] and set(rows) == {"none", "bf16", "powersgd"}
ok = ok and abs(rows["none"]["ratio"] - 1) < 1e-6 and abs(rows["bf16"]["ratio"] - 2) < 1e-3
ok = ok and rows["powersgd"]["ratio"] > 2 and abs(rows["powersgd"]["ratio"] / rows["powersgd"]["est_ratio"] - 1) < 0.02
ok = ok and rows["bf16"]["rel_error"] < 1e-2
if not ok: print(d["rows"])
sys.exit(0 if ok else 1)' "$tmp/ac.json"
# --- bench gemm on a CPU: the table row by row, dtypes the CPU only emulates left out and said so ---
# Live: the `#` lines and the column row come first, then each row as it is measured. Killed
# right after its first row (a 64^3 product), a streaming bench has printed that row and not
# the 1536^3 rows that follow (seconds of work); a bench that prints at the end has printed nothing.
live="bench gemm prints its header, then each row as it is measured (stopped after the first)"
"$py" - "$bin" <<'PY' && check "$live" true || check "$live" false
import subprocess, sys
p = subprocess.Popen([sys.argv[1], "bench", "gemm", "--device", "cpu", "--dtypes", "fp32", "--sizes", "64", "1536",
                      "--iters", "20", "--warmup", "2"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
lines = []
for line in p.stdout:
    lines.append(line)
    if not line.startswith("#"):
        break
p.kill(); p.wait()
lines += p.stdout.read().splitlines(keepends=True)  # what was out before the kill: a bench printing at the end had it all
head = [l for l in lines if l.startswith("#")]
rows = [l.split() for l in lines if not l.startswith("#")]
ok = (any(l.split()[1:3] == ["dtype", "m=n=k"] for l in head) and len(rows) == 1 and rows[0][:2] == ["fp32", "64"]
      and lines.index(head[-1]) < lines.index(next(l for l in lines if not l.startswith("#"))))
if not ok: print("     got:", lines)
sys.exit(0 if ok else 1)
PY
# bf16 on a CPU without native bf16 is left out of the default dtypes, with a `# skipped:` line;
# TRAINBOX_CPU_FLAGS stands in for such a CPU, and this machine's own flags decide the plain run.
TRAINBOX_CPU_FLAGS="fpu sse2 avx2 fma avx512f" "$bin" bench gemm --device cpu --sizes 64 --iters 1 >"$tmp/emu.out" 2>&1
rc=$?
check "bench gemm, a CPU without avx512_bf16/amx_bf16: exit 0 ($rc)" test "$rc" = 0
check "... a '# skipped: bf16' line naming the missing flags and how to run it anyway" \
  grep -qE '^# skipped: bf16: this CPU has no native bf16 \(avx512_bf16 or amx_bf16 absent from TRAINBOX_CPU_FLAGS\).*--dtypes fp32 bf16' "$tmp/emu.out"
check "... and no bf16 row" test "$(grep -cE '^ +bf16 ' "$tmp/emu.out")" = 0
check "... the fp32 row is there" grep -qE '^ +fp32 +64 ' "$tmp/emu.out"
TRAINBOX_CPU_FLAGS="fpu avx2" "$bin" bench gemm --device cpu --dtypes bf16 --iters 1 --warmup 0 --json >"$tmp/emu.json" 2>/dev/null
check "... --dtypes bf16 asked for: measured up to 512 only, said in the JSON header (one document)" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
bf = [r["m=n=k"] for r in d["rows"] if r["dtype"] == "bf16"]
sys.exit(0 if bf == [256, 512] and "sizes above 512 left out" in d["header"].get("shortened", "") else 1)' "$tmp/emu.json"
TRAINBOX_CPU_FLAGS="fpu avx2 avx512f avx512_bf16" "$bin" bench gemm --device cpu --sizes 64 --iters 1 >"$tmp/nat.out" 2>&1
check "... a CPU with avx512_bf16: bf16 measured, no skipped line" \
  test "$(grep -cE '^ +bf16 +64 ' "$tmp/nat.out")" = 1 -a "$(grep -c '^# skipped' "$tmp/nat.out")" = 0
"$bin" bench gemm --device cpu --sizes 64 --iters 1 >"$tmp/own.out" 2>&1
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then want=0; else want=1; fi
check "... this machine (native bf16: $((1 - want))): a skipped line iff /proc/cpuinfo lacks the flags" \
  test "$(grep -c '^# skipped: bf16' "$tmp/own.out")" = "$want"
"$bin" bench gemm --dtypes fp8 >/dev/null 2>"$tmp/bad2"
check "unknown gemm dtype: exit 2" test $? = 2
check "unknown gemm dtype: the message names the dtypes gemm runs" grep -q 'is not one of fp32, tf32, bf16, fp16' "$tmp/bad2"
help=$("$bin" bench --help 2>&1)
check "bench --help: --sizes and --dtypes from the plugin table" \
  grep -q 'gemm: square sizes; attention: sequence lengths; memcpy: bytes' <<<"$help"
check "... --dtypes lists what gemm accepts" grep -q 'gemm: fp32 tf32 bf16 fp16' <<<"$help"
"$bin" bench nonsense >/dev/null 2>&1
check "unknown benchmark: exit 2" test $? = 2
exit $fail
