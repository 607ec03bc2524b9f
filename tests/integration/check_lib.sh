# Sourced by the integration tests that report one line per check:
#   pass NAME            "ok   NAME"
#   flunk NAME WHY       "FAIL NAME: WHY", then the tail of each log in FLUNK_LOGS (default: $tmp/out
#                        and $tmp/err; FLUNK_TAIL lines each, 40), and the test fails (fail=1)
fail=0
pass() { echo "ok   $1"; }
flunk() {
  echo "FAIL $1: $2"
  local f
  for f in ${FLUNK_LOGS:-$tmp/out $tmp/err}; do
    [[ -s $f ]] && tail -n "${FLUNK_TAIL:-40}" "$f" | cut -c1-300 | sed "s#^#  $(basename "$f")| #"
  done
  fail=1
}
