#!/usr/bin/env bash
# scripts/check-skips against JUnit files made here: a whole-test skip and a `SKIP part` line
# outside the gpu label fail; the same in the gpu label, or a part listed with its reason in the
# allowed file, pass; a test that skipped nothing passes.
set -uo pipefail
cs=${TRAINBOX_SOURCE_DIR:?}/scripts/check-skips
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
cat >"$tmp/labels.json" <<'J'
{"tests": [{"name": "a", "properties": [{"name": "LABELS", "value": ["integration"]}]},
           {"name": "g", "properties": [{"name": "LABELS", "value": ["gpu"]}]}]}
J
junit() {  # junit NAME STATUS OUTPUT
  local skipped=""
  [[ $2 == skipped ]] && skipped='<skipped message="skipped"/>'
  printf '<testsuite><testcase name="%s" status="%s">%s<system-out>%s</system-out></testcase></testsuite>\n' \
    "$1" "$2" "$skipped" "$3" >"$tmp/j.xml"
}
printf '[[skip]]\ntest = "a"\npart = "5"\nreason = "no D state on this kernel"\n' >"$tmp/allowed.toml"
: >"$tmp/none.toml"
run() {  # run NAME WANTED_RC ALLOWED PATTERN (grep -E in the output; empty: no output)
  "$cs" "$tmp" "$tmp/j.xml" --labels "$tmp/labels.json" --allowed "$tmp/$3" >"$tmp/out" 2>&1
  local rc=$?
  # an empty PATTERN: nothing may be printed at all
  if [[ $rc != "$2" ]] || { [[ -n $4 ]] && ! grep -qE -- "$4" "$tmp/out"; } || { [[ -z $4 ]] && [[ -s $tmp/out ]]; }; then
    echo "FAIL $1: exit $rc (wanted $2), output:"; cat "$tmp/out"; fail=1
  else
    echo "ok   $1"
  fi
}
junit a run $'ok   one\nok   two'
run "nothing skipped passes, silently" 0 none.toml ''
junit a skipped $'SKIPPED: no namespaces here'
run "a whole-test skip outside gpu fails" 1 none.toml 'skipped a \[integration\]: SKIPPED: no namespaces here'
junit g skipped $'SKIPPED: no CUDA GPU visible'
run "a whole-test skip in gpu passes" 0 none.toml 'skipped g \[gpu\]'
junit a run $'ok   one\nSKIP part 5: a vfork parent is in state S here, not D\nok   two'
run "a partial skip outside gpu fails" 1 none.toml 'skip\(s\) outside the gpu label: a part 5'
run "a partial skip listed with its reason passes" 0 allowed.toml 'allowed: no D state on this kernel'
junit a run $'SKIP part 6: something else'
run "an unlisted part of a listed test fails" 1 allowed.toml 'a part 6'
junit g run $'SKIP part nccl: no GPU'
run "a partial skip in gpu passes" 0 none.toml 'skipped part nccl of g \[gpu\]'
printf '[[skip]]\ntest = "a"\npart = "5"\n' >"$tmp/noreason.toml"
junit a run 'ok'
run "an allowed entry without a reason is refused" 1 noreason.toml 'needs test, part and reason'
exit $fail
