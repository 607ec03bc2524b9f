#!/usr/bin/env bash
# Benchmark: trainbox's image pipeline against torchvision's, on the same files (issue "Your
# own images"; docs/datasets.md). A generated folder of N JPEGs (500x375, quality 90, 10
# classes; N=2000), the training transform at 224 px, batch 64, 5 epochs, one after the other
# on this machine:
#   torchvision  ImageFolder + DataLoader(num_workers=2, persistent_workers=True) with
#                RandomResizedCrop(224) + flip + ToTensor + Normalize (bench/peers/image_peer.py)
#   trainbox     trainbox bench dataloader --dataset imagefolder (decode threads = the cores)
# Prints both tables, then the ratios (throughput goal >= 2.5x; >= 70 % of bare full-size
# decode on the same threads; peak RSS <= 0.5x torchvision's main process + workers; no growth
# from epoch 2 to 5) and a #json line.
#   bench/image_pipeline.sh [BUILD_DIR]        (N=2000 EPOCHS=5 KEEP=DIR to reuse a tree)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
n=${N:-2000}; epochs=${EPOCHS:-5}
tree=${KEEP:-$(mktemp -d)}
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$tree"' EXIT
[[ -d $tree/class_00 ]] || "$py" "$root/bench/peers/image_peer.py" "$tree" --gen "$n"
echo "# $(nproc) cores; $(find "$tree" -name '*.jpg' | wc -l) JPEGs, $(du -sh "$tree" | cut -f1)"
peer=$("$py" "$root/bench/peers/image_peer.py" "$tree" --workers 2 --batch 64 --size 224 --epochs "$epochs")
echo "torchvision: $peer"
"$bin" bench dataloader --dataset imagefolder --path "$tree" --batch 64 --image-size 224 --epochs "$epochs" \
  --device cpu --json >"$tree.tb.json"
"$bin" bench dataloader --dataset imagefolder --path "$tree" --batch 64 --image-size 224 --epochs 1 --device cpu |
  sed 's/^/trainbox: /' | head -20
"$py" - "$peer" "$tree.tb.json" <<'PY'
import json, sys
peer = json.loads(sys.argv[1])
tb = json.load(open(sys.argv[2]))
tb = tb[0] if isinstance(tb, list) else tb
rows = tb["rows"]
epochs = [r for r in rows if r["stage"].startswith("pipeline epoch")]
full = next(r for r in rows if r["stage"].startswith("decode full size"))
ours = max(r["images_per_s"] for r in epochs)
theirs = max(peer["images_per_s"])
threads = epochs[0]["threads"]
limit = full["images_per_s"] * threads
peak = float([f for f in tb["footer"] if "peak RSS" in f][0].split(":")[1].split()[0])
growth = epochs[-1]["rss_mb"] - epochs[1]["rss_mb"] if len(epochs) > 1 else 0
out = {"trainbox_images_per_s": ours, "torchvision_images_per_s": theirs, "speedup": ours / theirs,
       "fraction_of_bare_decode": ours / limit, "bare_decode_images_per_s": limit,
       "trainbox_peak_rss_mb": peak, "torchvision_peak_rss_mb": peer["peak_rss_mb"],
       "rss_ratio": peak / peer["peak_rss_mb"], "trainbox_rss_growth_epoch2_to_last_mb": growth,
       "torchvision_rss_after_epoch_mb": peer["rss_mb_after_epoch"]}
print(f"throughput: trainbox {ours:.0f} images/s vs torchvision {theirs:.0f}: {ours / theirs:.2f}x (goal >= 2.5x)")
print(f"against the limit: {100 * ours / limit:.0f} % of bare full-size decode on {threads} threads ({limit:.0f} images/s; goal >= 70 %)")
print(f"memory: peak RSS {peak:.0f} MB vs torchvision's {peer['peak_rss_mb']:.0f} MB (main + workers): {peak / peer['peak_rss_mb']:.2f}x (goal <= 0.5x); "
      f"growth epoch 2 -> {len(epochs)}: {growth:+.1f} MB")
print("#json " + json.dumps(out))
PY
rm -f "$tree.tb.json"
