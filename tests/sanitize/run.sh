#!/usr/bin/env bash
# Runs ctest in a sanitizer build with the runtime options and suppressions of this folder
# (README.md here says what each suppression is and why; make test-sanitize, make test-tsan).
#   run.sh BUILD address [CTEST ARGS…]   ASan + UBSan: every error fatal, leaks checked
#   run.sh BUILD thread  [CTEST ARGS…]   TSan: a data race or lock-order inversion is fatal
# Every report also goes to BUILD/sanitizer-logs/, so one from a process whose exit status a
# test does not look at (a worker the launcher stops, a child of a child) still fails the
# run: run.sh prints each report file and exits 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD address|thread [ctest args]}" && pwd) kind=${2:?}
shift 2
logs=$build/sanitizer-logs
rm -rf "$logs" && mkdir -p "$logs"
case $kind in
  address)
    export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:log_path=$logs/asan}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$here/lsan.supp:print_suppressions=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$here/ubsan.supp:log_path=$logs/ubsan}
    ;;
  thread)
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$here/tsan.supp:log_path=$logs/tsan}
    ;;
  *) echo "run.sh: sanitizer '$kind' is not address or thread" >&2; exit 2 ;;
esac
status=0
(cd "$build" && ctest --output-on-failure --timeout 900 --test-output-size-passed 1048576 --output-junit junit.xml "$@") || status=$?
# A skip outside the gpu label fails here as in make test (scripts/check-skips).
"$here/../../scripts/check-skips" "$build" "$build/junit.xml" || status=1
shopt -s nullglob
reports=("$logs"/*)
if ((${#reports[@]})); then
  for r in "${reports[@]}"; do echo "=== $r"; cat "$r"; done
  echo "run.sh: ${#reports[@]} sanitizer report(s) above, in $logs" >&2
  status=1
fi
exit $status
