"""`trainbox data ls` must see an image folder as torchvision's ImageFolder does (class_to_idx and
the samples' order), read shards that the Python `webdataset` package wrote, and `trainbox data
pack`'s shards must read back in webdataset with the folder's images and labels.

Usage: image_folder_vs_torchvision.py   (TRAINBOX_BIN: the torch-free trainbox program)
Exit 77 (skip) when torchvision, webdataset or PIL is missing (deps/requirements-tools.txt).
"""
import glob
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile

try:
    import torchvision.datasets
    import webdataset as wds
    from PIL import Image
except ImportError as e:
    print(f"skip: {e} (pip install -r deps/requirements-tools.txt)")
    sys.exit(77)

BIN = os.environ["TRAINBOX_BIN"]
bad = 0


def check(name, ok, detail=""):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + str(detail) if detail and not ok else ''}")


def trainbox(*args, rc=0):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    check(f"trainbox {' '.join(args[:2])} exits {rc}", p.returncode == rc, p.stderr.strip())
    return p


def image_bytes(i, fmt):
    buf = io.BytesIO()
    Image.new("RGB", (4 + i % 3, 3), (i * 37 % 256, i * 11 % 256, 200)).save(buf, format=fmt)
    return buf.getvalue()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def hidden(rel):
    return any(part.startswith(".") for part in rel.split("/"))


with tempfile.TemporaryDirectory() as tmp:
    root = os.path.join(tmp, "root")
    # --- a tree with awkward names: code-point order, nesting, hidden and non-image files ---
    files = ["10/a.jpg", "9/b.jpg", "B/UPPER.JPG", "B/x.png", "a/z.jpeg", "a/sub/deeper/1.jpg", "a/sub/2.jpg",
             "a/sub t/3.jpg", "a/sub-u/4.jpg", "été/ç.jpg", "Ünïcode/ü.jpg", "with space/file name.jpg",
             "a/.hidden.jpg", "a/notes.txt", "a/.DS_Store"]
    for i, rel in enumerate(files):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(image_bytes(i, "PNG" if rel.endswith("png") else "JPEG") if "." in rel[-5:] else b"")
    ds = torchvision.datasets.ImageFolder(root)
    theirs = [(os.path.relpath(p, root), label) for p, label in ds.samples]

    # --- trainbox data ls --json --files vs ImageFolder ---
    ours = json.loads(trainbox("data", "ls", root, "--json", "--files").stdout)
    check("class_to_idx equals ImageFolder's", ours["class_to_idx"] == ds.class_to_idx,
          f"{ours['class_to_idx']} vs {ds.class_to_idx}")
    check("classes in torchvision's order", ours["classes"] == ds.classes, f"{ours['classes']} vs {ds.classes}")
    # the one deliberate difference: names starting with '.' (torchvision takes a/.hidden.jpg)
    check("ImageFolder takes the hidden .jpg (the difference docs/datasets.md names)",
          ("a/.hidden.jpg", ds.class_to_idx["a"]) in theirs)
    expected = [(rel, label) for rel, label in theirs if not hidden(rel)]
    got = [tuple(x) for x in ours["files"]]
    check("samples in ImageFolder's order", got == expected, f"\n  ours   {got}\n  theirs {expected}")
    check("skipped: 2 hidden, 1 other", ours["skipped"]["hidden"] == 2 and ours["skipped"]["other"] == 1,
          ours["skipped"])

    # --- shards written by Python webdataset, read by trainbox ---
    wdir = os.path.join(tmp, "wds")
    os.makedirs(wdir)
    want = []
    with wds.ShardWriter(os.path.join(wdir, "wds-%06d.tar"), maxcount=4, verbose=0) as sink:
        for i, (rel, label) in enumerate(expected):
            with open(os.path.join(root, rel), "rb") as f:
                data = f.read()
            ext = "png" if rel.lower().endswith("png") else "jpg"
            key = f"dir/sample{i:04d}"
            sink.write({"__key__": key, ext: data, "cls": label, "json": {"path": rel}})
            want.append({"key": key, "ext": ext, "label": label, "bytes": len(data), "sha256": sha(data)})
    n_shards = len(glob.glob(os.path.join(wdir, "wds-*.tar")))
    pattern = os.path.join(wdir, "wds-{000000..%06d}.tar" % (n_shards - 1))
    got = json.loads(trainbox("data", "ls", pattern, "--json", "--files").stdout)
    check(f"{n_shards} webdataset shards: same keys, labels, image bytes",
          [{k: f[k] for k in ("key", "ext", "label", "bytes", "sha256")} for f in got["files"]] == want,
          f"\n  ours   {got['files'][:2]}\n  theirs {want[:2]}")

    # --- trainbox data pack, read by Python webdataset ---
    out = os.path.join(tmp, "packed")
    os.makedirs(out)
    summary = trainbox("data", "pack", root, os.path.join(out, "train-%06d.tar"), "--shard-size", "2K",
                       "--seed", "3").stdout
    shards = sorted(glob.glob(os.path.join(out, "train-*.tar")))
    check("pack wrote several shards and said so", len(shards) > 1 and f"{len(shards)} shards" in summary, summary)
    urls = os.path.join(out, "train-{000000..%06d}.tar" % (len(shards) - 1))
    read = [(s["__key__"], sha(s.get("jpg", s.get("jpeg", s.get("png")))), int(s["cls"]))
            for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False)]
    folder = []
    for rel, label in expected:
        with open(os.path.join(root, rel), "rb") as f:
            folder.append((sha(f.read()), label))
    check("webdataset reads every packed image with its label", sorted(x[1:] for x in read) == sorted(folder),
          f"{len(read)} read, {len(folder)} in the folder")
    check("the pack order is shuffled", [x[1:] for x in read] != folder)
    again = os.path.join(tmp, "again")
    os.makedirs(again)
    trainbox("data", "pack", root, os.path.join(again, "t-%06d.tar"), "--shard-size", "2K", "--seed", "3")
    same = all(open(a, "rb").read() == open(b, "rb").read()
               for a, b in zip(shards, sorted(glob.glob(os.path.join(again, "t-*.tar")))))
    check("the same seed packs the same bytes", same)

    # --- bad input: exit 2 and one line ---
    os.makedirs(os.path.join(tmp, "empty", "cat"))
    p = trainbox("data", "ls", os.path.join(tmp, "empty"), rc=2)
    check("an empty class folder is named", "'cat'" in p.stderr, p.stderr)
    with open(os.path.join(tmp, "broken.tar"), "wb") as f:
        f.write(open(shards[0], "rb").read()[:700])
    p = trainbox("data", "ls", os.path.join(tmp, "broken.tar"), rc=2)
    check("a truncated shard names the offset", "byte offset 0" in p.stderr, p.stderr)

print(f"{bad} failure(s)")
sys.exit(1 if bad else 0)
