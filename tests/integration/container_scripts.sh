#!/usr/bin/env bash
# The image's access modes refuse unsafe or bad input before starting anything (these
# checks need neither JupyterLab nor sshd installed; make image-test runs the real ones).
set -uo pipefail
src=${TRAINBOX_SOURCE_DIR:?}/docker
fail=0
home=$(mktemp -d); trap 'rm -rf "$home"' EXIT   # the scripts' HOME: nothing lands in the real one
run() {  # run NAME WANTED_RC PATTERN -- command…
  local name=$1 want=$2 pattern=$3; shift 4
  local out; out=$("$@" 2>&1); local rc=$?
  if [[ $rc == "$want" ]] && grep -qE -- "$pattern" <<<"$out"; then echo "ok   $name"; else echo "FAIL $name (exit $rc)"; echo "$out"; fail=1; fi
}
run "jupyter: an empty token is refused" 2 'JUPYTER_TOKEN is set but empty' -- env JUPYTER_TOKEN= "$src/trainbox-jupyter"
run "jupyter: a bad port is named" 2 "--port 'http' is not a port number" -- "$src/trainbox-jupyter" --port http
run "jupyter: an argument that would drop the token is refused" 2 'would change how JupyterLab authenticates' -- \
  "$src/trainbox-jupyter" --ServerApp.token=
run "jupyter: so is one that would move it off --ip" 2 'would change how JupyterLab authenticates or listens' -- \
  "$src/trainbox-jupyter" --port 9999 --ServerApp.ip=0.0.0.0
run "jupyter: a late --ip= cannot move it either" 2 'would change how JupyterLab authenticates or listens' -- \
  "$src/trainbox-jupyter" --ServerApp.root_dir=/tmp --ip=0.0.0.0
run "sshd: a --listen that smuggles a config line is refused" 2 "is not an address" -- \
  env HOME="$home" "$src/trainbox-sshd" --listen $'0.0.0.0\nPasswordAuthentication yes'
run "sshd: no key, no start" 2 'no public key given: set SSH_AUTHORIZED_KEYS' -- \
  env -u SSH_AUTHORIZED_KEYS SSH_AUTHORIZED_KEYS_FILE=/nonexistent HOME="$home" "$src/trainbox-sshd"
run "sshd: a key file without a key is no key" 2 'no public key given' -- \
  env -u SSH_AUTHORIZED_KEYS SSH_AUTHORIZED_KEYS_FILE=/etc/hostname HOME="$home" "$src/trainbox-sshd"
run "sshd: a bad port is named" 2 "port '70000' is not a port number" -- env HOME="$home" "$src/trainbox-sshd" --port 70000
run "sshd: an unknown option is named" 2 "unknown option '--password'" -- env HOME="$home" "$src/trainbox-sshd" --password
# The Dockerfile's runtime stage must not carry compilers: its apt line is the contract.
runtime=$(awk '/^FROM .* AS runtime/,/^FROM .* AS test/' "$src/Dockerfile")
run "runtime stage: found, installs packages" 0 'apt-get install' -- echo "$runtime"
run "runtime stage: no compiler or build tool" 1 '^$' -- grep -E '(g\+\+|gcc|clang|build-essential|cmake|ninja)' <<<"$runtime"
exit $fail
