#!/usr/bin/env bash
# Benchmark: listing an image folder — `trainbox data ls ROOT --json` against torchvision's
# find_classes + make_dataset (what ImageFolder(ROOT) does before it opens any image), on the same
# generated tree of empty .jpg files (neither opens them), warm page cache, RUNS runs each after a
# warm-up. Correctness (the same order) is tests/integration/image_folder_vs_torchvision.py.
#   bench/listing.sh [BUILD_DIR]      FILES (default 100000), CLASSES (default 100), RUNS (default 5)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
files=${FILES:-100000}
classes=${CLASSES:-100}
runs=${RUNS:-5}
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 2; }
"$py" -c 'import torchvision' 2>/dev/null || { echo "needs torchvision in $py (deps/requirements-tools.txt)" >&2; exit 2; }

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
# --- the tree: CLASSES folders, each with 10 subfolders, FILES empty .jpg files in all ---
"$py" - "$tree" "$files" "$classes" <<'PY'
import os, sys
root, files, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(files):
    d = os.path.join(root, f"class_{i % classes:04d}", f"sub{i // classes % 10}")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, f"img_{i:08d}.jpg"), "w").close()
PY
torchvision_ls() {
  "$py" -c 'import sys
from torchvision.datasets.folder import find_classes, make_dataset, IMG_EXTENSIONS
_, idx = find_classes(sys.argv[1])
print(len(make_dataset(sys.argv[1], idx, extensions=IMG_EXTENSIONS)))' "$tree"
}
n_ours=$("$bin" data ls "$tree" --json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["images"])')
n_theirs=$(torchvision_ls)
[[ $n_ours == "$n_theirs" ]] || { echo "different counts: trainbox $n_ours, torchvision $n_theirs" >&2; exit 1; }

read -r ours ours_min ours_max <<<"$(wall_ms_stats "$runs" "$bin" data ls "$tree" --json)"
read -r theirs theirs_min theirs_max <<<"$(wall_ms_stats "$runs" torchvision_ls)"
# The Python figure includes starting the interpreter and importing torchvision (torch with it):
# what a training script pays too. The import alone, to tell the two apart:
read -r import_ms _ _ <<<"$(wall_ms_stats "$runs" "$py" -c 'import torchvision.datasets.folder')"
ratio=$(awk -v a="$theirs" -v b="$ours" 'BEGIN {printf "%.1f", a / b}')
listing_ratio=$(awk -v a="$theirs" -v i="$import_ms" -v b="$ours" 'BEGIN {printf "%.1f", (a - i) / b}')
tv=$("$py" -c 'import torchvision; print(torchvision.__version__)')
echo "# image folder listing — $(uname -n), $(nproc) CPUs, torchvision $tv, $n_ours files in $classes classes x 10 subfolders, $runs runs each (median, warm cache)"
printf '%-44s %10s %10s %10s\n' "command" "median_ms" "min_ms" "max_ms"
printf '%-44s %10s %10s %10s\n' "trainbox data ls --json" "$ours" "$ours_min" "$ours_max"
printf '%-44s %10s %10s %10s\n' "python find_classes + make_dataset" "$theirs" "$theirs_min" "$theirs_max"
printf '%-44s %10s\n' "python import torchvision.datasets.folder" "$import_ms"
echo "speedup: ${ratio}x end to end, ${listing_ratio}x without Python's start-up and import (goal: trainbox < 2000 ms)"
echo "{\"bench\":\"listing\",\"files\":$n_ours,\"classes\":$classes,\"runs\":$runs,\"trainbox_ms\":$ours,\"torchvision_ms\":$theirs,\"torchvision_import_ms\":$import_ms,\"speedup\":$ratio,\"listing_speedup\":$listing_ratio}"
