# Shared by launcher.sh and launcher_rdzv.sh: bounded polling helpers (every wait has a limit).
# Needs $py (a python3 for free_port).
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# gone PATTERN SECONDS: polls until no process has PATTERN in its command line.
gone() {
  local t=0
  while pgrep -f "$1" >/dev/null; do
    ((t++ >= $2 * 10)) && return 1
    sleep 0.1
  done
}
# wait_files DIR SUFFIX COUNT SECONDS: polls until COUNT files *.SUFFIX exist in DIR.
wait_files() {
  local t=0
  while (($(find "$1" -maxdepth 1 -name "*.$2" 2>/dev/null | wc -l) < $3)); do
    ((t++ >= $4 * 10)) && return 1
    sleep 0.1
  done
}
# bounded_wait PID SECONDS: waits for a background job; SIGKILLs it after SECONDS. Sets rc.
bounded_wait() {
  timeout "$2" tail -s 0.05 --pid="$1" -f /dev/null 2>/dev/null || kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null  # 2>/dev/null: no "Killed" job notice
  rc=$?
}
has() { grep -qE -- "$2" "$1"; }
# expect_exit NAME RC WANT LOG PATTERN WHAT: passes NAME when the exit code RC is WANT and LOG
# matches PATTERN; else fails it saying which (WHAT: what the pattern stands for).
expect_exit() {
  if [[ $2 != "$3" ]]; then
    flunk "$1" "exited $2, wanted $3"
  elif ! has "$4" "$5"; then
    flunk "$1" "the log does not say $6"
  else
    pass "$1"
  fi
}
# launcher_test TAG_PREFIX: the set-up of a launcher test. $tmp (also TMPDIR: the launcher's
# temporary folders land there, where the checks can see them), $tag (put in every worker's
# argv, so pgrep finds exactly this test's processes), and an EXIT trap that SIGKILLs them and
# removes $tmp.
launcher_test() {
  tmp=$(mktemp -d)
  export TMPDIR=$tmp
  tag="$1$$r$RANDOM"
  trap launcher_cleanup EXIT
}
launcher_cleanup() {
  # Only the script itself: a forked bash child signalled before it resets its traps runs the
  # EXIT trap too (bash), and must not delete $tmp under the running test.
  [[ $BASHPID == "$$" ]] || return 0
  pkill -KILL -f "$tag" 2>/dev/null
  rm -rf "$tmp"
}
