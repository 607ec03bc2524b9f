#!/usr/bin/env bash
# The trainbox image's smoke checks, run as RUN steps of the test stage (make image-test):
# the build box builds images but cannot run containers, so the checks run inside the
# build, on the image's own files: as the image's user (no argument), and as root
# (--as-root: trainbox-sshd started as root). One PASS/FAIL line a check; exits 1 if any
# failed. Last, REFERENCE_BYTES= (for the size goal).
set -uo pipefail
export PATH=/opt/trainbox/bin:/opt/trainbox/venv/bin:$PATH
py=/opt/trainbox/venv/bin/python
tmp=$(mktemp -d)
fails=0
check() {  # check NAME command…
  local name=$1; shift
  if "$@" >>"$tmp/check.log" 2>&1; then echo "PASS $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() {  # wait_for SECONDS command…: until the command succeeds
  local t=$1; shift
  for ((i = 0; i < t * 5; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
listening() { "$py" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1"; }
ssh_to() {  # ssh_to PORT ARGS…: a non-interactive ssh that trusts the test server
  local p=$1; shift
  ssh -p "$p" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 "$@"
}
refused() { ! ssh_to "$@" true >/dev/null 2>&1; }
# sshd_logins USER: start trainbox-sshd on loopback and log in for real: the key gets in,
# another key, a password and root do not.
sshd_logins() {
  local who=$1 sp; sp=$(port)
  ssh-keygen -q -t ed25519 -N '' -f "$tmp/id-$who" && ssh-keygen -q -t ed25519 -N '' -f "$tmp/other-$who"
  SSH_AUTHORIZED_KEYS="from=\"127.0.0.1\" $(cat "$tmp/id-$who.pub")" trainbox-sshd --listen 127.0.0.1 --port "$sp" >"$tmp/sshd-$who.log" 2>&1 &
  local pid=$!
  check "trainbox-sshd (run by $(id -un)) listens" wait_for 15 listening "$sp"
  check "ssh $who@ with the authorized key (with options) runs a command, trainbox on PATH" \
    sh -c "$(declare -f ssh_to); ssh_to $sp -i '$tmp/id-$who' $who@127.0.0.1 'id -un; trainbox --version' | tr '\n' ' ' | grep -q '^$who trainbox'"
  check "ssh $who@ with another key is refused" refused "$sp" -i "$tmp/other-$who" "$who@127.0.0.1"
  check "ssh $who@ with a password is refused (publickey only)" \
    sh -c "$(declare -f ssh_to); ssh_to $sp -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive $who@127.0.0.1 true 2>&1 | grep -q 'Permission denied (publickey)'"
  check "ssh root@ is refused" refused "$sp" -i "$tmp/id-$who" root@127.0.0.1
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  grep -q "Accepted publickey for $who" "$tmp/sshd-$who.log" || sed 's/^/  sshd| /' "$tmp/sshd-$who.log" | tail -15
}
finish() {
  if ((fails)); then echo "image smoke: $fails check(s) failed"; sed 's/^/  log| /' "$tmp/check.log" | tail -60; exit 1; fi
  echo "image smoke ($(id -un)): all checks passed"
  exit 0
}
echo "image smoke: $(id -un) (uid $(id -u)) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(nproc) CPUs"

if [[ ${1:-} == --as-root ]]; then  # trainbox-sshd started as root serves only `trainbox`
  sshd_logins trainbox
  finish
fi

# --- the entrypoint: banner + doctor's notices, never blocks, execs with the exit code ---
trainbox entrypoint -- sh -c 'exit 7' >"$tmp/ep.out" 2>"$tmp/ep.err"
rc=$?
sed 's/^/  | /' "$tmp/ep.err"
check "entrypoint execs the command and passes its exit code (7)" test "$rc" = 7
check "entrypoint banner names trainbox and LibTorch" grep -q "LibTorch 2" "$tmp/ep.err"
check "entrypoint warns: CPU only, with the fix" grep -q "CPU only" "$tmp/ep.err"
trainbox entrypoint -- no-such-command >/dev/null 2>&1
check "entrypoint: a missing command exits 127" test $? = 127
check "shorthand: \`docker run trainbox doctor\` runs trainbox doctor" sh -c 'trainbox entrypoint --quiet -- doctor | grep -q "^LibTorch"'
check "doctor exits 0 on a GPU-less box" trainbox doctor
check "runs as a non-root user" test "$(id -u)" != 0
check "tini (PID 1) runs the entrypoint and passes the exit code" sh -c '/usr/bin/tini -s -- trainbox entrypoint --quiet -- sh -c "exit 5"; test $? = 5'
check "no compilers in the image" sh -c 'for c in gcc g++ cc c++ clang nvcc cmake ld; do ! command -v "$c" || exit 1; done'
trainbox doctor >"$tmp/doctor.txt" 2>&1
check "doctor finds the image's LibTorch and its cuDNN/NCCL" sh -c "grep -qE 'version +2\\.11' '$tmp/doctor.txt' && grep -qE '^  cudnn +yes' '$tmp/doctor.txt' && grep -qE '^  nccl +yes' '$tmp/doctor.txt'"

# --- training: one short epoch on synthetic data, then two ranks under trainbox run ---
small=(--set data.dataset=synthetic --set data.synthetic_samples=2048 --set train.epochs=1 --set train.batch_size=32
       --set model.hidden=[64] --set train.deterministic=true --set train.threads=1 --set train.log_every=1
       --set checkpoint.every_epochs=0 --set output.tensorboard=false --set output.progress=off)
check "trainbox train: one synthetic epoch" trainbox train "${small[@]}" --set train.batch_size=64 --run-dir "$tmp/one" --json
check "trainbox run --standalone --nproc-per-node 2 trainbox train" \
  timeout 300 trainbox run --standalone --nproc-per-node 2 -- trainbox train "${small[@]}" --run-dir "$tmp/two" --json
check "2 ranks x batch 32 follow 1 x batch 64 (per-step loss within 1e-4)" "$py" -c '
import json, sys
def l(p): return [e["loss"] for e in map(json.loads, open(p)) if e["event"] == "train"]
a, b = l(sys.argv[1]), l(sys.argv[2])
sys.exit(0 if len(a) == len(b) == 32 and all(abs(x - y) <= 1e-4 * max(1, abs(x)) for x, y in zip(a, b)) else 1)' \
  "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl"
check "the default job (Fashion-MNIST, in the image) trains one epoch to >= 80 % accuracy" sh -c "
  trainbox train --set train.epochs=1 --set output.progress=off --run-dir '$tmp/default' --json >'$tmp/default.json' &&
  '$py' -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j); sys.exit(0 if j[\"test_accuracy\"] >= 0.80 else 1)' '$tmp/default.json'"

# --- trainbox-sshd: key-only ---
unset SSH_AUTHORIZED_KEYS
SSH_AUTHORIZED_KEYS_FILE=/nonexistent trainbox-sshd --print-config >/dev/null 2>"$tmp/nokey.err"
check "trainbox-sshd without a key refuses to start (exit 2)" test $? = 2
check "  ...and says how to give one" grep -q "SSH_AUTHORIZED_KEYS" "$tmp/nokey.err"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/id"
SSH_AUTHORIZED_KEYS=$(cat "$tmp/id.pub") trainbox-sshd --print-config >"$tmp/sshd-T" 2>&1
sed -n -E 's/^(passwordauthentication|kbdinteractiveauthentication|permitrootlogin|pubkeyauthentication|authenticationmethods|permitemptypasswords) /  | &/p' "$tmp/sshd-T"
check "sshd -T: passwordauthentication no" grep -qx "passwordauthentication no" "$tmp/sshd-T"
check "sshd -T: kbdinteractiveauthentication no" grep -qx "kbdinteractiveauthentication no" "$tmp/sshd-T"
check "sshd -T: permitrootlogin no" grep -qx "permitrootlogin no" "$tmp/sshd-T"
check "sshd -T: authenticationmethods publickey" grep -qx "authenticationmethods publickey" "$tmp/sshd-T"
trainbox-sshd --listen $'0.0.0.0\nPasswordAuthentication yes' --print-config >/dev/null 2>&1
check "trainbox-sshd refuses a --listen that is no address (exit 2)" test $? = 2
sshd_logins "$(id -un)"

# --- the trainbox Python package in the image's venv (pip-installed: docs/python.md) ---
check "import trainbox in the venv's python: doctor() is a dict with findings" \
  "$py" -c 'import trainbox; d = trainbox.doctor(); assert "findings" in d, d'
check "pip knows the trainbox package (pip show trainbox)" "$py" -m pip show -q trainbox
check "python -m trainbox --version" "$py" -m trainbox --version
# a notebook cell, run by the kernel JupyterLab starts (the venv's ipykernel, through nbclient)
nbdir=$(mktemp -d)
"$py" - "$nbdir/trainbox.ipynb" <<'PY'
import sys, nbformat
nb = nbformat.v4.new_notebook()
nb.cells.append(nbformat.v4.new_code_cell('import trainbox\nprint("doctor:", "findings" in trainbox.doctor(), trainbox.__file__)'))
nbformat.write(nb, sys.argv[1])
PY
(cd "$nbdir" && timeout 120 jupyter execute --inplace trainbox.ipynb >"$nbdir/log" 2>&1)
check "Jupyter's kernel runs import trainbox; trainbox.doctor() in a notebook cell" \
  grep -q 'doctor: True /opt/trainbox/venv/' "$nbdir/trainbox.ipynb" || { tail -5 "$nbdir/log"; cat "$nbdir/trainbox.ipynb"; }
rm -rf "$nbdir"

# --- trainbox-jupyter: token required ---
JUPYTER_TOKEN= trainbox-jupyter >/dev/null 2>&1
check "trainbox-jupyter refuses an empty JUPYTER_TOKEN (exit 2)" test $? = 2
trainbox-jupyter --IdentityProvider.token= >/dev/null 2>&1
check "trainbox-jupyter refuses an argument that would drop the token (exit 2)" test $? = 2
# A user config that switches the token off must not take effect.
mkdir -p "$tmp/.jupyter" && echo "c.IdentityProvider.token = ''; c.ServerApp.token = ''" >"$tmp/.jupyter/jupyter_server_config.py"
jp=$(port)
(cd "$tmp" && HOME=$tmp trainbox-jupyter --ip 127.0.0.1 --port "$jp" >"$tmp/jupyter.log" 2>&1) &
jupyter_pid=$!
status() { "$py" -c '
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "token " + sys.argv[2]} if len(sys.argv) > 2 else {})
try: print(urllib.request.urlopen(req, timeout=5).status)
except urllib.error.HTTPError as e: print(e.code)' "$@"; }
token=""
if wait_for 60 grep -q "token=" "$tmp/jupyter.log"; then token=$(sed -n 's/.*token=\([0-9a-f]*\).*/\1/p' "$tmp/jupyter.log" | head -1); fi
if wait_for 60 sh -c "grep -q 'Jupyter Server .* is running' '$tmp/jupyter.log'"; then
  check "Jupyter: a request without the token gets 403" test "$(status "http://127.0.0.1:$jp/api/contents")" = 403
  check "Jupyter: the printed token gets 200" test "$(status "http://127.0.0.1:$jp/api/contents" "$token")" = 200
  check "Jupyter: the token is printed once" test "$(grep -c "$token" "$tmp/jupyter.log")" = 1
else
  check "JupyterLab starts" false
  tail -20 "$tmp/jupyter.log"
fi
pkill -f "jupyter-lab.*--port=$jp" 2>/dev/null || kill "$jupyter_pid" 2>/dev/null
wait "$jupyter_pid" 2>/dev/null

# --- the size goal's reference: the torch wheel as pip installs it (torch, its nvidia-*
# CUDA libraries, triton, ...) plus the base image's CUDA libraries ---
"$py" - <<'EOF'
import importlib.metadata as md, os
from packaging.requirements import Requirement
seen, todo, total = set(), [Requirement("torch")], 0
while todo:  # torch's dependency closure, extras included (its CUDA libraries come as cuda-toolkit[...])
    req = todo.pop()
    key = (req.name.lower().replace("_", "-"), tuple(sorted(req.extras)))
    if key in seen: continue
    seen.add(key)
    try: dist = md.distribution(req.name)
    except md.PackageNotFoundError: continue
    if not req.extras:  # count each distribution's files once
        for f in dist.files or []:
            p = f.locate()
            if os.path.isfile(p) and not os.path.islink(p): total += os.path.getsize(p)
    else:
        todo.append(Requirement(req.name))
    for r in map(Requirement, dist.requires or []):
        if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
            todo.append(r)
cuda = 0
for root, _, files in os.walk("/usr/local/cuda/"):
    cuda += sum(os.path.getsize(os.path.join(root, f)) for f in files if not os.path.islink(os.path.join(root, f)))
dists = {name for name, extras in seen if not extras}
print(f"reference: torch wheel and its {len(dists) - 1} dependencies {total / 2**30:.2f} GiB + base CUDA libraries {cuda / 2**20:.0f} MiB")
print(f"REFERENCE_BYTES={total + cuda}")
EOF

finish
