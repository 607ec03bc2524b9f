#!/usr/bin/env bash
# tests/claims.py check itself, on a made-up checkout (a doc, a table, a test, a ctest listing):
# the good one passes, and each rule fails on the one thing that breaks it, naming it.
set -uo pipefail
claims="$TRAINBOX_SOURCE_DIR/tests/claims.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
mkdir -p "$tmp/docs" "$tmp/tests/unit"
printf '# A\n' >"$tmp/README.md"
# x_test runs x.py (written by each case), z_test z.sh (reads nothing); Suite.Case is a GoogleTest.
printf 'trainbox_integration(x_test ${CMAKE_CURRENT_SOURCE_DIR}/x.py)\ntrainbox_integration(z_test ${CMAKE_CURRENT_SOURCE_DIR}/z.sh)\n' \
  >"$tmp/tests/CMakeLists.txt"
printf 'echo hello\n' >"$tmp/tests/z.sh"
printf 'TEST(Suite, Case) {\n  const double tol = read_bound("a.tol");\n}\n' >"$tmp/tests/unit/s.cpp"
printf '# T\n<!-- claims: main -->\n' >"$tmp/tests/testing.md.in"
echo '{"tests": [{"name": "x_test"}, {"name": "z_test"}, {"name": "Suite.Case"}]}' >"$tmp/tests.json"
good_doc='Logits agree within 1e-3<!-- claim: a.tol --> relative (measured 2e-4).'
good_table='[machines]
vm = "a VM"
[a.tol]
section = "main"
claim = "logits"
doc = "docs/a.md"
stated = "1e-3"
figure = 1e-3
kind = "max"
bound = 1e-3
measured = 2e-4
machine = "vm"
tests = ["x_test", "Suite.*"]'
good_test='tol = bound("a.tol")'
# run DESCRIPTION WANT_RC WANT_TEXT DOC TABLE TEST: the check on that checkout
run() {
  local what=$1 want_rc=$2 want=$3
  printf '%s\n' "$4" >"$tmp/docs/a.md"
  printf '%s\n' "$5" >"$tmp/tests/claims.toml"
  printf '%s\n' "$6" >"$tmp/tests/x.py"
  out=$(python3 "$claims" --root "$tmp" --table "$tmp/tests/claims.toml" check --tests-json "$tmp/tests.json" 2>&1)
  rc=$?
  if [[ $rc == "$want_rc" ]] && grep -qF -- "$want" <<<"$out"; then
    echo "ok    $what"
  else
    echo "FAIL  $what: exit $rc (want $want_rc), output:"; echo "$out" | sed 's/^/        /'; fail=1
  fi
}
run "a complete table passes" 0 "0 problems" "$good_doc" "$good_table" "$good_test"
run "a marked number without an entry fails" 1 \
  'docs/a.md:1: the number marked `<!-- claim: b.new -->` has no entry' \
  "$good_doc and 5 s<!-- claim: b.new -->" "$good_table" "$good_test"
run "... but one written as code (\`<!-- claim: ID -->\`) is text, not a marker" 0 "0 problems" \
  "$good_doc and \`<!-- claim: b.new -->\`" "$good_table" "$good_test"
run "a doc that no longer states the figure fails" 1 "docs/a.md no longer states '1e-3'" \
  "${good_doc/1e-3/2e-3}" "$good_table" "$good_test"
run "an entry whose doc has no marker fails" 1 'docs/a.md has no `<!-- claim: a.tol -->`' \
  "Logits agree within 1e-3 relative." "$good_table" "$good_test"
run "a bound looser than the figure without a reason fails" 1 "is looser than the stated figure" \
  "$good_doc" "${good_table/bound = 1e-3/bound = 1e-2}" "${good_test}"
run "... with a looser reason it passes" 0 "0 problems" \
  "$good_doc" "${good_table/bound = 1e-3/bound = 1e-2
looser = \"another CPU\"}" "$good_test"
run "a looser reason on a bound that is not looser fails" 1 "its bound is not looser" \
  "$good_doc" "$good_table
looser = \"stale\"" "$good_test"
run "a measured value outside the bound without a reason fails" 1 "measured 5e-3 lies outside its bound" \
  "$good_doc" "${good_table/measured = 2e-4/measured = 5e-3}" "$good_test"
run "a test ctest does not have fails" 1 "names the test 'y_test', which ctest does not have" \
  "$good_doc" "${good_table/\"x_test\"/\"y_test\"}" "$good_test"
run "a bound no test reads fails" 1 "listed test x_test reads no bound of it" "$good_doc" "$good_table" "tol = 1e-3"
run "... and so does a bound one of its listed tests does not read (every one must)" 1 \
  "listed test z_test reads no bound of it" "$good_doc" "${good_table/\"x_test\", /\"x_test\", \"z_test\", }" "$good_test"
run "a marked C++ literal equal to the bound passes" 0 "0 problems" "$good_doc" "$good_table" \
  "constexpr double kTol = 2 * 0.5e-3;  // claim: a.tol"
run "a marked literal that is not the bound fails" 1 "holds a literal marked \`claim: a.tol\` that is not" \
  "$good_doc" "$good_table" "constexpr double kTol = 2e-3;  // claim: a.tol"
exit $fail
