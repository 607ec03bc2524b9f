# The set-up every network-namespace test shares (sourced after train_lib.sh, which makes $tmp).
#   netns_hosts PREFIX N [MARKER]
# creates N hosts named PREFIX<pid>1…N (PREFIX<pid> cut to 8 characters: $p) with
# scripts/netns-hosts ($hosts), and an EXIT trap that SIGKILLs every process whose command
# line holds MARKER, takes the hosts down and removes $tmp. Where namespaces cannot be made
# here (not root) it skips with the reason (exit 77).
netns_hosts() {
  root=${TRAINBOX_SOURCE_DIR:?}
  hosts=$root/scripts/netns-hosts
  p=$1$$
  p=${p:0:8}
  netns_marker=${3:-}
  trap netns_cleanup EXIT
  local why
  why=$("$hosts" check) || { echo "SKIPPED: $why"; exit 77; }
  "$hosts" up "$p" "$2" || { echo "FAIL: could not create the namespace hosts"; exit 1; }
}

netns_cleanup() {
  # Only the script itself: a forked bash child signalled before it resets its traps runs the
  # EXIT trap too, and must not take the hosts down under the running test.
  [[ $BASHPID == "$$" ]] || return 0
  [[ -n $netns_marker ]] && pkill -KILL -f "$netns_marker" 2>/dev/null
  "$hosts" down "$p" >/dev/null 2>&1
  rm -rf "$tmp"
}
