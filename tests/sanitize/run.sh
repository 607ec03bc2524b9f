#!/usr/bin/env bash
# Runs ctest in a sanitizer build with the runtime options and suppressions of this folder
# (README.md here says what each suppression is and why; make test-sanitize, make test-tsan).
#   run.sh BUILD address [CTEST ARGS…]   ASan + UBSan: every error fatal, leaks checked
#   run.sh BUILD thread  [CTEST ARGS…]   TSan: a data race or lock-order inversion is fatal
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run.sh BUILD address|thread [ctest args]} kind=${2:?}
shift 2
case $kind in
  address)
    export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1}
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$here/lsan.supp:print_suppressions=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$here/ubsan.supp}
    ;;
  thread)
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$here/tsan.supp}
    ;;
  *) echo "run.sh: sanitizer '$kind' is not address or thread" >&2; exit 2 ;;
esac
cd "$build"
exec ctest --output-on-failure --timeout 900 "$@"
