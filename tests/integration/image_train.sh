#!/usr/bin/env bash
# `trainbox train` on your own images (docs/datasets.md): data.dataset = "imagefolder" on a tree
# the test writes with PIL (noisy photo-like JPEGs, one grayscale JPEG, one CMYK JPEG, one
# palette PNG), and "webdataset" on the shards `trainbox data pack` writes from it.
#   1. 2 DDP ranks × batch 8 follow 1 process × batch 16, per-step loss within 1e-6 (cnn: no
#      BatchNorm, whose per-rank batch statistics differ by design, as in PyTorch's DDP);
#   2. data.workers = 1, 2 and 4 give the same weights bit for bit (each sample's crop and flip
#      come from (seed, epoch, index) alone);
#   3. stopped mid-epoch and resumed == uninterrupted, exactly;
#   4. resnet18 (torchvision's shape) at 64 px with model.sync_batchnorm: 2 DDP ranks × batch 8
#      follow 1 process × batch 16, per-step loss within 1e-3 (BatchNorm over the global batch);
#      without it they part by more than 1e-2 (0.40 measured);
#   5. `trainbox data pack` writes tar shards of the tree, and data.dataset = "webdataset" trains
#      on them; with data.shuffle_buffer (WebDataset's order) 2 ranks follow 1 process and a
#      resumed run the uninterrupted one;
#   6. bad input: a truncated JPEG, a zero-byte file, a text file named .jpg: exit 2 and one line
#      naming the file and reason (on_bad_image = "error"); "skip": the run goes on, and the
#      summary and metrics.jsonl count and name them; `bench dataloader` names the file too; an
#      empty class folder, a root without images, a shard sample without its label, a missing
#      data.val_path (the fix names that key): exit 2, one line; a data.val_fraction split's
#      start-up line counts the images that train, not the listing;
#   7. a failed run writes nothing: one corrupt JPEG (on_bad_image = "error") in the first batch,
#      or in a later one before the first train line, exits 2 and leaves no run dir; resuming an
#      existing run dir onto it leaves that run dir byte for byte as it was.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
if ! "$py" -c 'import PIL' 2>/dev/null; then echo "skip: $py has no PIL"; exit 77; fi

"$py" - "$tmp/imgs" <<'PY'
import os, sys, random
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(0)
for c in range(4):
    d = os.path.join(root, f"class_{c}")
    os.makedirs(d)
    for i in range(15):
        w, h = 72 + 8 * (i % 3), 56 + 8 * (i % 2)
        base = np.zeros((h, w, 3), np.float32)
        base[..., c % 3] = 60 + 40 * c  # a class colour under noise: learnable
        img = np.clip(base + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(d, f"{i:03d}.jpg"), quality=90)
# the 16th image of classes 0-3: grayscale JPEG, CMYK JPEG, palette PNG, RGBA PNG (64 in all:
# a batch of 16 splits evenly over 2 ranks, so the DDP losses can be compared step for step)
Image.fromarray(rng.integers(0, 255, (60, 70), dtype=np.uint8), "L").save(os.path.join(root, "class_0", "gray.jpg"), quality=90)
Image.fromarray(rng.integers(0, 255, (60, 70, 3), dtype=np.uint8)).convert("CMYK").save(os.path.join(root, "class_1", "cmyk.jpg"), quality=90)
Image.fromarray(rng.integers(0, 255, (60, 70, 3), dtype=np.uint8)).convert("P").save(os.path.join(root, "class_2", "palette.png"))
Image.fromarray(rng.integers(0, 255, (60, 70, 4), dtype=np.uint8), "RGBA").save(os.path.join(root, "class_3", "rgba.png"))
PY
img=(--set data.dataset=imagefolder --set "data.path=$tmp/imgs" --set data.image_size=32 --set model.name=cnn
     --set model.channels=[8,16] --set model.fc=32 --set train.deterministic=true --set train.threads=1
     --set train.log_every=1 --set output.progress=off --set checkpoint.every_epochs=0 --set train.device=cpu
     --set train.epochs=2 --set data.workers=2)
weights() { "$bin" export "$1/checkpoints/$(cat "$1/checkpoints/latest")" "$2" >/dev/null; }

# --- 1. DDP ---
"$bin" train "${img[@]}" --set train.batch_size=16 --run-dir "$tmp/one" --quiet >"$tmp/one.out" 2>&1 ||
  { cat "$tmp/one.out"; exit 1; }
timeout 180 "$bin" train "${img[@]}" --set train.batch_size=8 --nproc-per-node 2 --run-dir "$tmp/two" --quiet \
  >"$tmp/two.out" 2>&1
check "1. 2 DDP ranks on the image folder (exit $?)" grep -qx step_8 "$tmp/two/checkpoints/latest"
check "... 2 ranks × batch 8 follow 1 × batch 16 (per-step loss within 1e-6)" \
  same_losses "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl" "$("$(dirname "$0")/../claims.py" bound images.ddp_cnn_losses)"

# --- 2. any number of decode threads, the same batches ---
weights "$tmp/one" "$tmp/w2.safetensors"
for w in 1 4; do
  "$bin" train "${img[@]}" --set train.batch_size=16 --set data.workers=$w --run-dir "$tmp/w$w" --quiet >/dev/null 2>&1
  weights "$tmp/w$w" "$tmp/w$w.safetensors"
  check "2. data.workers = $w gives data.workers = 2's weights, bit for bit" cmp -s "$tmp/w$w.safetensors" "$tmp/w2.safetensors"
done

# --- 3. mid-epoch resume ---
"$bin" train "${img[@]}" --set train.batch_size=16 --set train.max_steps=3 --run-dir "$tmp/r" --quiet >/dev/null 2>&1
"$bin" train --run-dir "$tmp/r" --resume auto --set train.max_steps=0 --quiet >"$tmp/r.out" 2>&1
losses "$tmp/one/metrics.jsonl" >"$tmp/one.loss"; losses "$tmp/r/metrics.jsonl" >"$tmp/r.loss"
check "3. stopped at step 3 (mid-epoch 0) and resumed: the uninterrupted loss sequence, exactly" \
  cmp -s "$tmp/one.loss" "$tmp/r.loss"

# --- 4. resnet18 at 64 px ---
# lr 1e-4: BatchNorm over channels of near-zero variance multiplies float rounding (1e-7) by
# up to 1/sqrt(eps) per layer, and at lr 1e-3 two float orders of the same sums part by 1e-4
# within 3 steps (measured, also between SyncBatchNorm and ATen's BatchNorm in one process).
rn=("${img[@]}" --set model.name=resnet18 --set data.image_size=64 --set train.epochs=1 --set train.deterministic=false
    --set optim.lr=1e-4)
"$bin" train "${rn[@]}" --set model.sync_batchnorm=true --set train.batch_size=16 --run-dir "$tmp/rn1" --quiet \
  >"$tmp/rn1.out" 2>&1
check "4. resnet18 at 64 px, 1 process (exit $?)" grep -qx step_4 "$tmp/rn1/checkpoints/latest"
timeout 180 "$bin" train "${rn[@]}" --set model.sync_batchnorm=true --set train.batch_size=8 --nproc-per-node 2 \
  --run-dir "$tmp/rn2" --quiet >"$tmp/rn2.out" 2>&1
check "... resnet18 at 64 px, 2 DDP ranks (exit $?)" grep -qx step_4 "$tmp/rn2/checkpoints/latest"
check "... with model.sync_batchnorm, 2 ranks × batch 8 follow 1 × batch 16 (per-step loss within 1e-3)" \
  same_losses "$tmp/rn1/metrics.jsonl" "$tmp/rn2/metrics.jsonl" "$("$(dirname "$0")/../claims.py" bound images.sync_batchnorm_losses)"
timeout 180 "$bin" train "${rn[@]}" --set train.batch_size=8 --nproc-per-node 2 --run-dir "$tmp/rn3" --quiet \
  >"$tmp/rn3.out" 2>&1
parted() { grep -qx step_4 "$tmp/rn3/checkpoints/latest" && ! same_losses "$@"; }  # a run that finished, and differs
check "... without it (per-rank BatchNorm, as PyTorch's DDP) they part by more than 1e-2: the comparison can fail" \
  parted "$tmp/rn1/metrics.jsonl" "$tmp/rn3/metrics.jsonl" 1e-2
"$py" - "$tmp/rn1/metrics.jsonl" "$tmp/rn2/metrics.jsonl" <<'PY' && check "... both logged finite losses for every step" true || check "... both logged finite losses for every step" false
import json, math, sys
for p in sys.argv[1:]:
    ls = [e["loss"] for e in map(json.loads, open(p)) if e["event"] == "train"]
    assert len(ls) == 4 and all(math.isfinite(x) for x in ls), (p, ls)
PY

# --- 5. tar shards ---
mkdir "$tmp/shards"  # pack makes no folder (as export)
"$bin" data pack "$tmp/imgs" "$tmp/shards/train-%06d.tar" --shard-size 64K >"$tmp/pack.out" 2>&1
check "5. trainbox data pack wrote shards (exit $?)" test -s "$tmp/shards/train-000000.tar"
n=$(ls "$tmp/shards" | wc -l)
"$bin" train "${img[@]}" --set data.dataset=webdataset --set "data.path=$tmp/shards/train-{000000..$(printf %06d $((n - 1)))}.tar" \
  --set train.batch_size=16 --run-dir "$tmp/wds" --quiet >"$tmp/wds.out" 2>&1
check "... trainbox train on $n shards (exit $?)" grep -qx step_8 "$tmp/wds/checkpoints/latest"
wds=("${img[@]}" --set data.dataset=webdataset --set "data.path=$tmp/shards/train-{000000..$(printf %06d $((n - 1)))}.tar"
     --set data.shuffle_buffer=16)
"$bin" train "${wds[@]}" --set train.batch_size=16 --run-dir "$tmp/sb1" --quiet >"$tmp/sb1.out" 2>&1
check "... data.shuffle_buffer = 16: shards, then the buffer (exit $?)" grep -qx step_8 "$tmp/sb1/checkpoints/latest"
timeout 180 "$bin" train "${wds[@]}" --set train.batch_size=8 --nproc-per-node 2 --run-dir "$tmp/sb2" --quiet \
  >"$tmp/sb2.out" 2>&1
check "... with the buffer, 2 ranks × batch 8 follow 1 × batch 16 (per-step loss within 1e-6)" \
  same_losses "$tmp/sb1/metrics.jsonl" "$tmp/sb2/metrics.jsonl" "$("$(dirname "$0")/../claims.py" bound images.shuffle_buffer_losses)"
"$bin" train "${wds[@]}" --set train.batch_size=16 --set train.max_steps=3 --run-dir "$tmp/sbr" --quiet >/dev/null 2>&1
"$bin" train --run-dir "$tmp/sbr" --resume auto --set train.max_steps=0 --quiet >/dev/null 2>&1
losses "$tmp/sb1/metrics.jsonl" >"$tmp/sb1.loss"; losses "$tmp/sbr/metrics.jsonl" >"$tmp/sbr.loss"
check "... with the buffer, stopped at step 3 and resumed: the uninterrupted losses, exactly" cmp -s "$tmp/sb1.loss" "$tmp/sbr.loss"
expect "... data.shuffle_buffer on an image folder: exit 2, one line" 2 'data.shuffle_buffer = 16 applies to tar shards' -- \
  "$bin" train "${img[@]}" --set data.shuffle_buffer=16 --run-dir "$tmp/sb-bad"

# --- 6. bad input ---
cp -r "$tmp/imgs" "$tmp/bad"
head -c 2000 "$tmp/imgs/class_0/000.jpg" >"$tmp/bad/class_0/truncated.jpg"
: >"$tmp/bad/class_1/empty.jpg"
echo "not an image" >"$tmp/bad/class_2/text.jpg"
bad=("${img[@]}" --set "data.path=$tmp/bad" --set train.batch_size=16 --set train.epochs=1)
expect "6. a truncated JPEG stops the run: exit 2, naming it" 2 'bad image .*(truncated|empty|text)\.jpg' -- \
  "$bin" train "${bad[@]}" --run-dir "$tmp/bad-run"
check "... in one line, with a fix" test "$(grep -c 'trainbox' "$tmp/err")" -le 2
expect "... bench dataloader names the bad file as train does" 2 'bad image .*/class_0/truncated\.jpg: truncated JPEG' -- \
  "$bin" bench dataloader --dataset imagefolder --path "$tmp/bad" --image-size 32 --quick --device cpu
expect "... data.on_bad_image = skip: the run goes on" 0 '' -- \
  "$bin" train "${bad[@]}" --set data.on_bad_image=skip --run-dir "$tmp/skip-run" --json
check "... the summary counts the 3 skipped files and names them" "$py" -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])][-1]
names = " ".join(s.get("skipped_examples", []))
sys.exit(not (s.get("skipped_samples") == 3 and all(n in names for n in ("truncated.jpg", "empty.jpg", "text.jpg"))))' \
  "$tmp/skip-run/metrics.jsonl"
# data.val_path (the shipped config's) missing: the fix names data.val_path, not data.path
expect "... a missing data.val_path: exit 2, the fix names data.val_path" 2 'fix: set data\.val_path to' -- \
  "$bin" train "${img[@]}" --set "data.val_path=$tmp/no-val" --run-dir "$tmp/bad-val"
# a held-out split: the start-up line (stderr) counts what trains (64 images, 6 held out: 58)
"$bin" train "${img[@]}" --set data.val_fraction=0.1 --set train.max_steps=1 --set train.batch_size=16 \
  --run-dir "$tmp/split" --json >"$tmp/split.json" 2>"$tmp/split.err"
check "... data.val_fraction = 0.1: 'train 58 of the 64 images', 'val 6 held out', on the start-up line as in the summary" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))["dataset"]
print("#   ", d)
sys.exit(not ("train 58 of the 64 images in 4 classes" in d and "val 6 held out" in d and d in open(sys.argv[2]).read()))' \
  "$tmp/split.json" "$tmp/split.err"
mkdir "$tmp/bad/class_9"
expect "... an empty class folder: exit 2, naming it" 2 'class_9' -- "$bin" train "${bad[@]}" --run-dir "$tmp/bad-run2"
mkdir -p "$tmp/noimg/a"; echo x >"$tmp/noimg/a/readme.txt"
expect "... a root without images: exit 2" 2 'no images|without a .jpg|no image' -- \
  "$bin" train "${img[@]}" --set "data.path=$tmp/noimg" --run-dir "$tmp/bad-run3"
"$py" - "$tmp/imgs/class_0/000.jpg" "$tmp/nolabel.tar" <<'PY'
import io, sys, tarfile
jpg = open(sys.argv[1], "rb").read()
with tarfile.open(sys.argv[2], "w") as t:
    for name, data in (("s0.jpg", jpg), ("s0.cls", b"0"), ("s1.jpg", jpg)):  # s1 has no label
        info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
PY
expect "... a shard sample without its label: exit 2, naming the shard and the key" 2 'nolabel\.tar.*s1|s1.*nolabel\.tar' -- \
  "$bin" train "${img[@]}" --set data.dataset=webdataset --set "data.path=$tmp/nolabel.tar" --run-dir "$tmp/bad-run4"
# --- 7. a failed run writes nothing ---
mkdir -p "$tmp/one-good/a" "$tmp/one-good/b"
cp "$tmp/imgs/class_0/000.jpg" "$tmp/imgs/class_0/001.jpg" "$tmp/imgs/class_0/002.jpg" "$tmp/one-good/a/"
cp "$tmp/imgs/class_1/000.jpg" "$tmp/imgs/class_1/001.jpg" "$tmp/imgs/class_1/002.jpg" "$tmp/one-good/b/"
cp -r "$tmp/one-good" "$tmp/one-bad"
head -c 2000 "$tmp/imgs/class_1/003.jpg" >"$tmp/one-bad/b/corrupt.jpg"
ob=("${img[@]}" --set train.epochs=1 --set data.on_bad_image=error)
expect "7. one corrupt JPEG in the first batch: exit 2, naming it" 2 'bad image .*corrupt\.jpg' -- \
  "$bin" train "${ob[@]}" --set "data.path=$tmp/one-bad" --set train.batch_size=7 --run-dir "$tmp/ob-first"
check "... found before the run dir was opened (no start-up line)" test "$(grep -c 'trainbox train: cnn on' "$tmp/err")" = 0
check "... and no run dir (no config.toml, no metrics.jsonl, no events file)" test ! -e "$tmp/ob-first"
expect "... in a later batch, before the first train line (batch 1, train.log_every = 100): exit 2" 2 \
  'bad image .*corrupt\.jpg' -- "$bin" train "${ob[@]}" --set "data.path=$tmp/one-bad" --set train.batch_size=1 \
  --set train.log_every=100 --run-dir "$tmp/ob-later"
check "... found after the run dir was opened (the start-up line is there)" grep -q 'trainbox train: cnn on' "$tmp/err"
check "... and no run dir either" test ! -e "$tmp/ob-later"
expect "... the same tree without it trains (exit 0)" 0 '' -- \
  "$bin" train "${ob[@]}" --set "data.path=$tmp/one-good" --set train.batch_size=6 --run-dir "$tmp/ob-ok"
listing() { (cd "$1" && find . -type f ! -name .lock | sort | xargs sha256sum); }
listing "$tmp/ob-ok" >"$tmp/ob-ok.before"
expect "... resumed onto the tree with the corrupt JPEG: exit 2" 2 'bad image .*corrupt\.jpg' -- \
  "$bin" train --run-dir "$tmp/ob-ok" --resume auto --set "data.path=$tmp/one-bad" --set train.epochs=2 \
  --set train.batch_size=7
listing "$tmp/ob-ok" >"$tmp/ob-ok.after"
check "... and that run dir is byte for byte as it was ($(wc -l <"$tmp/ob-ok.before") files)" \
  cmp -s "$tmp/ob-ok.before" "$tmp/ob-ok.after"
exit $fail
