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
"$bin" bench gemm --dtypes fp8 >/dev/null 2>"$tmp/bad2"
check "unknown gemm dtype: exit 2" test $? = 2
"$bin" bench nonsense >/dev/null 2>&1
check "unknown benchmark: exit 2" test $? = 2
exit $fail
