#!/usr/bin/env bash
# Every `trainbox bench` subcommand runs at tiny sizes on CPU, --json holds the rows, a
# 2-rank allreduce runs under trainbox run, an injected wrong result is caught (exit 1),
# and bad flags exit 2.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
j() { "$py" -c 'import json,sys; d=json.load(sys.stdin); d = d if isinstance(d, list) else [d]; print(sum(len(x["rows"]) for x in d))'; }
for cmd in "gemm --sizes 64 128 --iters 3" "memcpy --sizes 4096 --iters 3" "allreduce -e 4096 -n 3 -w 1" \
           "train --quick" "dataloader --quick"; do
  rows=$("$bin" bench $cmd --device cpu --json 2>"$tmp/err" | j)
  check "bench $cmd: rows in JSON ($rows)" test "${rows:-0}" -gt 0
done
out=$(timeout 120 "$bin" run --standalone --nproc-per-node 2 --no-prefix -- "$bin" bench allreduce -b 1024 -e 65536 -f 4 -n 3 -w 1 2>&1)
check "2-rank allreduce table (busbw column, no wrong values)" grep -q '# Out of bounds values : 0 OK' <<<"$out"
check "... its header names the backend and ranks" grep -q '# backend: gloo, 2 ranks' <<<"$out"
TRAINBOX_BENCH_FAULT=allreduce "$bin" bench allreduce -e 1024 -n 2 -w 0 >"$tmp/fault" 2>&1
rc=$?
check "injected wrong allreduce result: exit 1 (got $rc)" test "$rc" = 1
check "... and the #wrong column says so" grep -q 'FAILED' "$tmp/fault"
"$bin" bench allreduce -b 100 -e 10 >/dev/null 2>"$tmp/bad"
check "bad sizes: exit 2" test $? = 2
"$bin" bench gemm --dtypes fp8 >/dev/null 2>"$tmp/bad2"
check "unknown gemm dtype: exit 2" test $? = 2
"$bin" bench nonsense >/dev/null 2>&1
check "unknown benchmark: exit 2" test $? = 2
exit $fail
