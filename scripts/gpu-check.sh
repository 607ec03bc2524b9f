#!/usr/bin/env bash
# The one prepared script for the GPU test machine (one H200, torch 2.11+cu130 in its
# own venv, nvcc 13, CMake, ninja; none of our Debian packages, no network).
# Builds trainbox against that machine's torch with the carried deps (.carry/, made by
# scripts/prepare-carry here), runs doctor, doctor --smoke, smi and the test suite
# (gpu label included), and writes every output under $OUT. Target: < 8 minutes.
#   device run: carry [".carry"], command "bash scripts/gpu-check.sh"
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
build=${BUILD:-/tmp/trainbox-gpu-build}
py=${PYTHON:-python3}
log() { echo "[$(date +%T)] $*" | tee -a "$out/summary.txt"; }
step() {  # step NAME command…: runs, saves output to $out/NAME.txt, records the exit code
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" >"$out/$name.txt" 2>&1; local rc=$?
  log "$(printf '%-22s rc=%-3s %6.1fs' "$name" "$rc" "$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN {print (b - a) / 1e9}')")"
  return $rc
}

log "gpu-check on $(hostname): $(nproc) CPUs, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)') || { log "no torch in $py"; exit 1; }
log "torch $("$py" -c 'import torch; print(torch.__version__)') at $prefix"
deps=()
[[ -d $root/.carry ]] && deps=(-DTRAINBOX_DEPS_PREFIX="$root/.carry" -DTRAINBOX_GTEST_SOURCE="$root/.carry/src/googletest")

step configure cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DTRAINBOX_PYTHON="$(command -v "$py")" "${deps[@]}" ${GPU_CHECK_CMAKE_ARGS:-} || { tail -40 "$out/configure.txt"; exit 1; }
step build cmake --build "$build" -j "$(nproc)" || { tail -60 "$out/build.txt"; exit 1; }
bin=$build/bin/trainbox
# The GPU machine has no Debian dataset package: use the carried copy.
[[ -d $root/.carry/datasets/fashion-mnist ]] && export TRAINBOX_FASHION_DIR=$root/.carry/datasets/fashion-mnist
fashion=${TRAINBOX_FASHION_DIR:-/usr/share/datasets/fashion-mnist}

step doctor "$bin" doctor --no-color
step doctor-json "$bin" doctor --json
step doctor-smoke "$bin" doctor --smoke --no-color
step smi "$bin" smi
# The container start-up check on a real GPU (banner with GPUs and driver; no findings expected).
step entrypoint env TRAINBOX_IMAGE="gpu-check (no container)" "$bin" entrypoint -- true
step smi-json "$bin" smi --json
step tests-gpu ctest --test-dir "$build" -L gpu --output-on-failure
step tests-all ctest --test-dir "$build" -j 8 --output-on-failure --timeout 300

# --- training on CUDA: the default job, bf16 autocast, CUDA graphs; and the Python peer ---
step train-cuda "$bin" train --device cuda --run-dir /tmp/tb-cuda --set train.epochs=2 --set output.progress=lines --set data.path="$fashion" --json
step train-bf16 "$bin" train --device cuda --run-dir /tmp/tb-bf16 --set train.epochs=2 --set train.amp=bf16 --set output.progress=lines --set data.path="$fashion" --json
step train-graphs "$bin" train --device cuda --run-dir /tmp/tb-graphs --set train.epochs=2 --set train.cuda_graphs=true \
  --set data.device_resident=true --set output.progress=lines --set data.path="$fashion" --json
step train-fp16 "$bin" train --device cuda --run-dir /tmp/tb-fp16 --set train.epochs=1 --set train.amp=fp16 --set output.progress=lines --set data.path="$fashion" --json
step train-cnn-cuda "$bin" train "$root/configs/fashion_cnn.toml" --device cuda --run-dir /tmp/tb-cnn --set train.epochs=2 \
  --set data.path="$fashion" --json
step bench-train env DEVICE=cuda PYTHON="$py" REPEAT=1 THREADS=8 bash "$root/bench/train_vs_pytorch.sh" "$build"

# --- data parallelism on NCCL: a world of 1 exercises the whole path (store, NCCL group, DDP) ---
step ddp-nccl-train "$bin" run --standalone --nproc-per-node 1 -- "$bin" train --device cuda --run-dir /tmp/tb-ddp \
  --set train.epochs=1 --set data.path="$fashion" --set output.progress=lines --json
step ddp-nccl-example "$bin" run --standalone --nproc-per-node 1 -- "$build/bin/ddp_train"

# --- how fast is this box: the quick set, and agreement with torch on the same GPU ---
step bench-all "$bin" bench all --quick
step bench-vs-torch env DEVICE=cuda PYTHON="$py" bash "$root/bench/gemm_memcpy_vs_pytorch.sh" "$build"

# Later issues add their GPU steps here.

log "done; outputs in $out"
cat "$out/doctor.txt" "$out/doctor-smoke.txt" | tail -40
