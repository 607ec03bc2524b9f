#!/usr/bin/env bash
# scripts/function_lengths.py on a file whose lengths are known (tests/fixtures/function_length/known.cpp):
# lizard alone reads its short_one as 109 lines and loses long_one (a raw string with a delimiter, as in
# src/env/probe.cpp); the measure must say long_one 103, short_one 5, Table 6, Table::Row 4 (a class by
# its qualified name), fail long_one at 100 and Table at a class limit of 5 (scripts/check-class-length).
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
  $'^  6\t.*known.cpp:116\tTable$' $'^  4\t.*known.cpp:123\tTable::Row$' 'over 100 lines:' \
  '2 functions, 2 classes measured'
grep -qE $'^  5\t.*short_one' <(sed -n '/over 100 lines/,$p' "$tmp/out") && { echo "FAIL: short_one listed as over"; fail=1; }
args=(--limit 103)
check "nothing over 103" 0 $'^  103\t.*long_one$'
printf '# why\n%s:long_one   # being split\n' "$fixture" >"$tmp/allow"
args=(--limit 100 --allow "$tmp/allow")
check "long_one excepted by name" 0 'excepted by name' $'^  103\t.*long_one$'
args=(--limit 110 --allow "$tmp/allow")
check "a stale exception fails" 1 'no longer over 110: take it off'
args=(--class-limit 5)
check "a class over 5 lines" 1 'classes over 5 lines:' 'fix: split the class by concern'
grep -qE $'^  4\t.*Table::Row' <(sed -n '/classes over 5 lines/,$p' "$tmp/out") && { echo "FAIL: Table::Row listed as over"; fail=1; }
args=(--class-limit 6)
check "no class over 6" 0 $'^  6\t.*Table$'
printf '# why\nclass %s:Table   # a declarative table\n' "$fixture" >"$tmp/allow"
args=(--class-limit 5 --allow "$tmp/allow")
check "Table excepted by name" 0 'classes over 5 lines, excepted by name'
args=(--class-limit 6 --allow "$tmp/allow")
check "a stale class exception fails" 1 'excepts class .*:Table, which is no longer over 6: take it off'
args=(--limit 200 --allow "$tmp/allow")
check "a class entry is not checked without --class-limit" 0 '2 functions, 2 classes measured'
exit $fail
