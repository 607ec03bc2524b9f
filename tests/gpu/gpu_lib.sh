# Shared by the gpu-labelled tests: train_lib.sh's job and helpers, and exit 77 (ctest's
# visible skip) with the reason when torch sees no CUDA GPU.
source "$(dirname "${BASH_SOURCE[0]}")/../integration/train_lib.sh"
if ((gpus == 0)); then
  echo "SKIPPED: no CUDA GPU visible (doctor: cuda_device_count=0)"
  exit 77
fi
# The CPU job of train_lib.sh, moved to the GPU with the data resident there.
gpu_job=("${small[@]}" --device cuda --set data.device_resident=true)
# max_abs_diff A.safetensors B.safetensors TOL: every tensor within TOL·max(1, |a|).
same_weights() {
  "$py" - "$@" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
a, b, tol = load_file(sys.argv[1]), load_file(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
worst = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]) / np.maximum(1.0, np.abs(a[k])))) for k in a)
print(f"  max relative difference {worst:.3e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
PY
}
export_latest() {  # export_latest RUN_DIR OUT
  "$bin" export "$1/checkpoints/$(cat "$1/checkpoints/latest")" "$2" >/dev/null
}
