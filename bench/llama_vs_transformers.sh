#!/usr/bin/env bash
# Benchmark: trainbox's llama family against Hugging Face transformers on the CPU (training
# step vs eager and torch.compile, greedy generation with the KV cache, time to first step
# from a ~500 MB bf16 folder). bench/llama_vs_transformers.py does the work and says what
# each figure measures; this runs it with the checkout's python (PYTHON, default .venv) and
# the build's trainbox.
#   bench/llama_vs_transformers.sh [BUILD_DIR] [--quick] [--threads N] [--json-only]
set -euo pipefail
build_arg=
if [[ $# -gt 0 && $1 != -* ]]; then build_arg=$1; shift; fi
source "$(dirname "$0")/common.sh" "$build_arg"
[[ -x $bin ]] || { echo "no $bin: build it first (make build)" >&2; exit 2; }
[[ -x $py ]] || { echo "no $py: make build sets up the venv (or set PYTHON)" >&2; exit 2; }
exec "$py" "$root/bench/llama_vs_transformers.py" --build "$build" "$@"
