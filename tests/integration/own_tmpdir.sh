#!/usr/bin/env bash
# How ctest runs every integration and gpu test (tests/CMakeLists.txt, trainbox_labelled_test):
# with a TMPDIR of its own, which is removed afterwards, and the test failed if a launcher's
# kept folder (trainbox-run-*: the error files and stacks of a failure) is still in it. A
# `trainbox run` without --log-dir keeps that folder in $TMPDIR after a failure; a test that
# causes failures on purpose passes --log-dir inside its own temporary folder, or sets TMPDIR to
# it (train_lib.sh and launcher_lib.sh do), or removes what was kept. So `make test` leaves no
# /tmp/trainbox-run-* behind, and a test that would is named. Exit codes pass through (77: skip).
#   own_tmpdir.sh NAME COMMAND…
set -u
name=$1
shift
own=$(mktemp -d "${TMPDIR:-/tmp}/tbtest-$name-XXXXXX") || exit 1
TMPDIR=$own "$@"
rc=$?
left=$(find "$own" -name 'trainbox-run-*' -prune 2>/dev/null | sed "s|^$own/||" | head -n 5 | tr '\n' ' ')
rm -rf --one-file-system "$own" 2>/dev/null
if [[ -n $left ]]; then
  echo "FAIL $name left a launcher's kept folder in its TMPDIR: $left— pass --log-dir inside the test's own" \
    "temporary folder, or remove what the launcher kept (tests/integration/own_tmpdir.sh)"
  ((rc == 0 || rc == 77)) && rc=1
fi
exit $rc
