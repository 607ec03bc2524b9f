#!/usr/bin/env bash
# The pip package (pyproject.toml, docs/python.md), offline from bootstrap's wheel cache:
#   1. a fresh venv made from the cached venv's interpreter (no torch, nothing of ours)
#      `pip install`s the checkout: trainbox on PATH runs `doctor --json` and `run -n 2 script.py`,
#      `python -m trainbox` is the CLI, `import trainbox; trainbox.doctor()` works, and a Python
#      worker of the installed launcher gets the start-up hook from site-packages;
#   2. the installed launcher instruments a torch worker (the cached venv's python): heartbeats;
#   3. `pip uninstall trainbox` leaves the venv's files exactly as before the install;
#   4. `pip wheel .` gives a wheel that installs into another fresh venv, and uninstalls clean.
set -uo pipefail
tree=$(dirname "$(dirname "${TRAINBOX_BIN:-}")")  # the checkout's build (make build), read below
unset TRAINBOX_BIN  # ctest's points at the build tree: here the installed program must be found
src=${TRAINBOX_SOURCE_DIR:?}
py=${TRAINBOX_PYTHON:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
check() { local name=$1; shift; if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fail=1; fi; }
cache=${TRAINBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainbox}
wheels=$cache/wheels-build-$(sha256sum <"$src/deps/requirements-build.txt" | cut -c1-12)
[[ -f $wheels/.complete ]] || { echo "skip: no build-backend wheels in $wheels (run scripts/bootstrap)"; exit 77; }
pipq=(--disable-pip-version-check --no-index --find-links "$wheels" -q)
# The build folder outlives the test: only the first run in a checkout compiles everything
# (bench/pip_install.sh: cold), later ones rebuild what changed. It sits in the checkout
# (build-pip/, ignored as build*/ is), under make's CCACHE_BASEDIR, so ccache sees the same
# relative paths in every clone and a fresh clone's first build is cache hits (a folder in the
# per-user cache, outside the checkout, compiled everything again in every clone: 246 s).
build=$src/build-pip
# The compiler and TRAINBOX_WERROR of the checkout's build, not scikit-build-core's pick (sysconfig's
# CXX, g++ here, where CMake picks c++: the same g++ 12) and CMake's default (OFF): the torch-free
# objects then have make build's command lines, so the ones it has just compiled are ccache hits
# in any clone, whatever the cache held (a cold cache compiled them twice). A user's pip install
# differs only in the compiler's name and in not stopping at a warning, which this build has none of.
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$tree/CMakeCache.txt" 2>/dev/null)
werror=$(sed -n 's/^TRAINBOX_WERROR:[A-Z]*=//p' "$tree/CMakeCache.txt" 2>/dev/null)
[[ -n $cxx ]] && export CXX=$cxx
like_tree=(--config-settings=build-dir="$build")
[[ -n $werror ]] && like_tree+=(--config-settings=cmake.define.TRAINBOX_WERROR="$werror")
files() { (cd "$1" && find . -path ./pip-cache -prune -o \( -type f -o -type l \) -print | grep -v '/__pycache__/' | sort); }

# --- 1. pip install . into a fresh, torch-free venv ---
"$py" -m venv "$tmp/venv"
v=$tmp/venv/bin
check "1. the fresh venv has no torch" test "$("$v/python" -c 'import importlib.util as u; print(u.find_spec("torch"))')" = None
files "$tmp/venv" >"$tmp/before.txt"
t0=$(date +%s.%N)
PIP_CACHE_DIR=$tmp/pip-cache "$v/pip" install "${pipq[@]}" "${like_tree[@]}" "$src" >"$tmp/install.log" 2>&1
rc=$?
echo "#    pip install . took $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s"
check "... pip install . (exit $rc)" test "$rc" = 0 || tail -20 "$tmp/install.log"
export PATH=$v:$PATH
check "... trainbox is on PATH from the venv" test "$(command -v trainbox)" = "$v/trainbox"
check "... trainbox doctor --json" "$v/python" -c '
import json, subprocess, sys
r = subprocess.run(["trainbox", "doctor", "--json"], capture_output=True, text=True)
d = json.loads(r.stdout); sys.exit(r.returncode not in (0, 1) or "findings" not in json.dumps(d))'
cat >"$tmp/hello.py" <<'PY'
import os, sys
hook = any(type(f).__name__ == "_TorchHook" for f in sys.meta_path)
print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} hook {hook}")
PY
out=$(cd "$tmp" && trainbox run -n 2 hello.py 2>&1)
check "... trainbox run -n 2 hello.py: both ranks, each with the start-up hook" \
  test "$(grep -cE '^\[rank [01]\] rank [01] of 2 hook True$' <<<"$out")" = 2 || echo "$out"
check "... python -m trainbox is the CLI" bash -c "'$v/python' -m trainbox --help | grep -q 'doctor'"
check "... import trainbox; trainbox.doctor() returns the report" "$v/python" -c '
import sys, trainbox
d = trainbox.doctor(); sys.exit(not isinstance(d, dict) or not d)'
check "... trainbox.heartbeat is a no-op outside trainbox run" "$v/python" -c '
import trainbox; trainbox.heartbeat(3, "data")'

# --- 2. the installed launcher instruments a worker of another interpreter ---
cat >"$tmp/steps.py" <<'PY'
import torch
w = torch.nn.Parameter(torch.zeros(3))
opt = torch.optim.SGD([w], lr=0.1)
for _ in range(7):
    opt.zero_grad(); (w - 1).pow(2).sum().backward(); opt.step()
PY
TRAINBOX_PYTHON=$py trainbox run -n 1 --log-dir "$tmp/logs" -- "$tmp/steps.py" >"$tmp/steps.out" 2>&1
check "2. a torch worker of the installed launcher reports 7 optimizer steps" \
  grep -qE '^7 done [0-9]+ *$' "$tmp/logs/attempt_0/0/heartbeat"

# --- 3. uninstall ---
"$v/pip" uninstall -y -q trainbox >"$tmp/uninstall.log" 2>&1
files "$tmp/venv" >"$tmp/after.txt"
check "3. pip uninstall trainbox leaves the venv as it was" diff "$tmp/before.txt" "$tmp/after.txt"

# --- 4. pip wheel . and a fresh venv ---
PIP_CACHE_DIR=$tmp/pip-cache "$v/pip" wheel "${pipq[@]}" "${like_tree[@]}" -w "$tmp/dist" "$src" \
  >"$tmp/wheel.log" 2>&1
whl=$(ls "$tmp"/dist/trainbox-*.whl 2>/dev/null | head -1)
check "4. pip wheel . ($(basename "${whl:-none}"))" test -f "$whl" || tail -20 "$tmp/wheel.log"
"$py" -m venv "$tmp/venv2"
files "$tmp/venv2" >"$tmp/before2.txt"
"$tmp/venv2/bin/pip" install "${pipq[@]}" "$whl" >"$tmp/install2.log" 2>&1
check "... the wheel installs into a fresh venv and runs" bash -c "'$tmp/venv2/bin/trainbox' doctor --json >/dev/null; test \$? -le 1"
check "... its module works" "$tmp/venv2/bin/python" -c 'import trainbox; trainbox.doctor()'
"$tmp/venv2/bin/pip" uninstall -y -q trainbox >/dev/null 2>&1
files "$tmp/venv2" >"$tmp/after2.txt"
check "... and uninstalls without a trace" diff "$tmp/before2.txt" "$tmp/after2.txt"
exit $fail
