#!/usr/bin/env bash
# `cmake --install` gives users find_package(trainbox): build examples/ddp_train.cpp and custom_model.cpp as a
# separate project against the installed tree, and run it as 2 ranks.
set -uo pipefail
build=${1:?build dir}
src=${TRAINBOX_SOURCE_DIR:?}
py=${TRAINBOX_PYTHON:?}
# A fixed folder in the build tree, not mktemp's: the user's project then compiles with the same
# command lines (paths relative to make's CCACHE_BASEDIR) in every run, and ccache, through the
# CMAKE_CXX_COMPILER_LAUNCHER given below, gives back the two objects (20 s of compiling against
# torch's headers) while the installed headers are unchanged; configure, link and run are real.
tmp=$build/install-test
rm -rf "$tmp"; mkdir -p "$tmp"; trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
test -f "$tmp/prefix/lib/cmake/trainbox/trainboxConfig.cmake" || { echo "FAIL no trainboxConfig.cmake installed"; exit 1; }
torch_prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/examples/standalone" -B "$tmp/user" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix;$torch_prefix" >"$tmp/configure.log" 2>&1 || { tail -30 "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/user" >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; exit 1; }
echo "ok   a separate project built against the installed trainbox"
out=$(timeout 120 "$tmp/prefix/bin/trainbox" run --standalone --nproc-per-node 2 -- "$tmp/user/ddp_train" 2>&1)
echo "$out"
[[ $(grep -c 'weights identical across 2 ranks: yes' <<<"$out") == 2 ]] || { echo "FAIL the installed example"; exit 1; }
echo "ok   installed trainbox run + user's ddp_train: weights identical on both ranks"
# The user's own model and dataset through the installed Trainer, data-parallel.
out=$(timeout 180 "$tmp/prefix/bin/trainbox" run --standalone --nproc-per-node 2 -- "$tmp/user/custom_model" \
  --run-dir "$tmp/custom" --quiet --set train.epochs=1 --set train.threads=1 --set output.progress=off 2>&1)
grep -q '^\[rank 0\] final: steps 32 test loss' <<<"$out" && test -f "$tmp/custom/checkpoints/step_32/COMPLETE" ||
  { echo "$out"; echo "FAIL the installed custom_model example"; exit 1; }
echo "ok   installed trainbox run + user's custom_model (own module + dataset through the Trainer): 2 ranks x batch 64, 32 steps"
