#!/usr/bin/env bash
# Benchmark: trainbox tokenize against Hugging Face tokenizers (Rust) on the same tokenizer.json
# and corpus; bench/tokenize_vs_hf.py does the work and says what each figure measures.
#   bench/tokenize_vs_hf.sh [BUILD_DIR] [--mb 8] [--repeat 3] [--json-only]
set -euo pipefail
build_arg=
if [[ $# -gt 0 && $1 != -* ]]; then build_arg=$1; shift; fi
source "$(dirname "$0")/common.sh" "$build_arg"
[[ -x $bin ]] || { echo "no $bin: build it first (make build)" >&2; exit 2; }
[[ -x $py ]] || { echo "no $py: make build sets up the venv (or set PYTHON)" >&2; exit 2; }
exec "$py" "$root/bench/tokenize_vs_hf.py" --build "$build" "$@"
