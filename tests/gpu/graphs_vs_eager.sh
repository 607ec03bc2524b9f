#!/usr/bin/env bash
# GPU: a CUDA-graph run trains exactly the eager run's steps — same weights after 50
# optimizer steps, for SGD with Nesterov momentum and for AdamW, within 1e-5 relative.
# (A captured step that froze host state, e.g. SGD's "first step" flag, fails this by
# orders of magnitude.) Skips (77) without a GPU.
set -uo pipefail
source "$(dirname "$0")/gpu_lib.sh"
opt_sgd=(--set optim.name=sgd --set optim.lr=0.05 --set optim.momentum=0.9 --set optim.nesterov=true)
opt_adamw=(--set optim.name=adamw --set optim.lr=0.003 --set optim.weight_decay=0.01)
for o in sgd adamw; do
  declare -n opts="opt_$o"
  for g in false true; do
    "$bin" train "${gpu_job[@]}" "${opts[@]}" --set train.max_steps=50 --set train.cuda_graphs=$g \
      --set train.epochs=2 --run-dir "$tmp/$o-$g" --quiet >"$tmp/$o-$g.out" 2>&1 ||
      { cat "$tmp/$o-$g.out"; check "$o graphs=$g trains" false; continue; }
    export_latest "$tmp/$o-$g" "$tmp/$o-$g.safetensors"
  done
  check "$o: CUDA-graph run == eager run after 50 steps (within 1e-5)" \
    same_weights "$tmp/$o-false.safetensors" "$tmp/$o-true.safetensors" "$("$(dirname "$0")/../claims.py" bound gpu.graphs_vs_eager)"
done
exit $fail
