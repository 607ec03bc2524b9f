#!/usr/bin/env bash
# scripts/function_lengths.py on a file whose lengths are known (tests/fixtures/function_length/known.cpp):
# lizard alone reads its short_one as 109 lines and loses long_one (a raw string with a delimiter, as in
# src/env/probe.cpp); the measure must say long_one 103, short_one 5, Table 6, and fail long_one at 100.
set -uo pipefail
src=${TRAINBOX_SOURCE_DIR:?}
py=${1:-$src/.venv/bin/python}
fixture=$src/tests/fixtures/function_length/known.cpp
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME WANTED_RC PATTERN... (each grep -E in the output)
  local name=$1 want=$2 rc p; shift 2
  "$py" "$src/scripts/function_lengths.py" "${args[@]}" "$fixture" >"$tmp/out" 2>&1
  rc=$?
  for p in "$@"; do grep -qE -- "$p" "$tmp/out" || { echo "FAIL $name: no line matching '$p'"; rc=x; }; done
  if [[ $rc != "$want" ]]; then echo "FAIL $name: exit $rc (wanted $want), output:"; cat "$tmp/out"; fail=1; else echo "ok   $name"; fi
}
args=(--limit 100)
check "lengths at the limit 100" 1 $'^  103\t.*known.cpp:12\tlong_one$' $'^  5\t.*known.cpp:6\tshort_one$' \
  $'^  6\t.*known.cpp:116\tTable$' 'over 100 lines:' '2 functions, 1 classes measured'
grep -qE $'^  5\t.*short_one' <(sed -n '/over 100 lines/,$p' "$tmp/out") && { echo "FAIL: short_one listed as over"; fail=1; }
args=(--limit 103)
check "nothing over 103" 0 $'^  103\t.*long_one$'
printf '# why\n%s:long_one   # being split\n' "$fixture" >"$tmp/allow"
args=(--limit 100 --allow "$tmp/allow")
check "long_one excepted by name" 0 'excepted by name' $'^  103\t.*long_one$'
args=(--limit 110 --allow "$tmp/allow")
check "a stale exception fails" 1 'no longer over 110: take it off'
exit $fail
