#!/usr/bin/env bash
# Benchmark: `pip install .` of the torch-free half (pyproject.toml, docs/python.md) into a
# fresh venv on this machine, three ways, and the bytes pip downloads:
#   cold       a new build folder, ccache off: everything compiles (goal <= 3 min on 2 cores)
#   ccache     a new build folder, ccache on and warm (the cold run filled it)
#   rebuild    the same venv and build folder again (nothing changed: configure + link check + install)
#   download   the wheels pip fetches for the build with an empty cache (goal <= 50 MB)
# The build backend's wheels come from PyPI for the download figure and from bootstrap's
# wheel cache (offline) for the timings. Prints a table and a #json line.
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
cache=${TRAINBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainbox}
wheels=$cache/wheels-build-$(sha256sum <"$root/deps/requirements-build.txt" | cut -c1-12)
[[ -f $wheels/.complete ]] || "$root/scripts/bootstrap"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export CCACHE_DIR=${CCACHE_DIR:-$tmp/ccache}
pip_install() {  # pip_install BUILD_DIR [same-venv]: seconds
  [[ ${2:-} == same-venv ]] || { rm -rf "$tmp/venv"; "$py" -m venv "$tmp/venv"; }
  local t0; t0=$(date +%s.%N)
  "$tmp/venv/bin/pip" install -q --disable-pip-version-check --no-index --find-links "$wheels" \
    --config-settings=build-dir="$1" "$root" >"$tmp/log" 2>&1 || { tail -20 "$tmp/log"; exit 1; }
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}
cold=$(CCACHE_DISABLE=1 pip_install "$tmp/b1")
# fill the cache, then time a fresh folder against it
CCACHE_DIR=$tmp/ccache2 pip_install "$tmp/b2" >/dev/null
warm=$(CCACHE_DIR=$tmp/ccache2 pip_install "$tmp/b3")
rebuild=$(CCACHE_DIR=$tmp/ccache2 pip_install "$tmp/b3" same-venv)
"$py" -m pip download -q --disable-pip-version-check --no-cache-dir --only-binary :all: -d "$tmp/dl" \
  -r "$root/deps/requirements-build.txt" >/dev/null 2>&1 && dl=$(du -cb "$tmp"/dl/*.whl | tail -1 | cut -f1) || dl=-1
echo "# pip_install — pip install . (torch-free half) into a fresh venv, $(nproc) cores, $(cmake --version | head -1)"
printf '%-10s %10s\n' run seconds cold "$cold" ccache "$warm" rebuild "$rebuild"
printf 'downloaded: %s bytes (build backend wheels; CMake and Ninja from the system)\n' "$dl"
echo "#json {\"bench\": \"pip_install\", \"cold_s\": $cold, \"ccache_s\": $warm, \"rebuild_s\": $rebuild, \"download_bytes\": $dl}"
