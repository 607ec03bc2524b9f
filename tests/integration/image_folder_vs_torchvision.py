"""`trainbox data ls` must see an image folder as torchvision's ImageFolder does (class_to_idx and
the samples' order), read shards that the Python `webdataset` package wrote, and `trainbox data
pack`'s shards must read back in webdataset with the folder's images, labels and source names
(<key>.json); pack refuses what export refuses (a missing folder, existing output without
--force) and files that cannot be images; data ls names 0-byte files, a mistyped path and a
folder one level too deep.

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
    # each sample's <key>.json names its source file: the bytes under the key are that file's
    traced = [(json.loads(s["json"])["path"], sha(s.get("jpg", s.get("jpeg", s.get("png")))), int(s["cls"]))
              for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False)]
    check("each packed sample's .json names its source file (same bytes, same label)",
          len(traced) == len(expected) and all(
              sha(open(os.path.join(root, rel), "rb").read()) == h and dict(expected)[rel] == label
              for rel, h, label in traced), traced[:2])
    check("the pack order is shuffled", [x[1:] for x in read] != folder)
    again = os.path.join(tmp, "again")
    os.makedirs(again)
    trainbox("data", "pack", root, os.path.join(again, "t-%06d.tar"), "--shard-size", "2K", "--seed", "3")
    shards_again = sorted(glob.glob(os.path.join(again, "t-*.tar")))
    # as many shards (zip alone would pass a second pack that wrote fewer, or none), byte for byte
    same = len(shards) > 0 and len(shards_again) == len(shards) and all(
        open(a, "rb").read() == open(b, "rb").read() for a, b in zip(shards, shards_again))
    check(f"the same seed packs the same bytes ({len(shards_again)} shards, {len(shards)} before)", same)

    # --- pack's outputs follow export's rules: no folder made, nothing replaced without --force ---
    def one_line(p):
        lines = p.stderr.strip().splitlines()
        return len(lines) == 2 and lines[0].startswith("trainbox: error:") and lines[1].startswith("  fix:")

    p = trainbox("data", "pack", root, os.path.join(tmp, "nowhere", "t-%06d.tar"), rc=2)
    check("pack into a missing folder: refused in one line, no folder made",
          one_line(p) and "nowhere" in p.stderr and not os.path.exists(os.path.join(tmp, "nowhere")), p.stderr)
    before = [open(x, "rb").read() for x in shards]
    p = trainbox("data", "pack", root, os.path.join(out, "train-%06d.tar"), "--seed", "4", rc=2)
    check("pack over existing shards without --force: refused, naming the shard",
          one_line(p) and "train-000000.tar already exists" in p.stderr and "--force" in p.stderr, p.stderr)
    check("... and the shards are untouched", [open(x, "rb").read() for x in shards] == before)
    p = trainbox("data", "pack", root, os.path.join(out, "train-%06d.tar"), "--force")
    left = [os.path.basename(x) for x in shards[1:]]
    check(f"pack --force into 1 shard over {len(shards)}: the note names every leftover ({len(left)})",
          "1 shard" in p.stdout and all(n in p.stderr for n in left[:3]) and
          f"{len(left)} shards are left" in p.stderr and (len(left) <= 3 or f"and {len(left) - 3} more" in p.stderr), p.stderr)
    gap = os.path.join(tmp, "gap")
    os.makedirs(gap)
    with open(os.path.join(gap, "t-000001.tar"), "w") as f:
        f.write("old")
    p = trainbox("data", "pack", root, os.path.join(gap, "t-%06d.tar"), "--shard-size", "2K", rc=2)
    check("an existing later shard met half-way: refused, the shard already written removed, the old one kept",
          one_line(p) and "t-000001.tar already exists" in p.stderr and os.listdir(gap) == ["t-000001.tar"]
          and open(os.path.join(gap, "t-000001.tar")).read() == "old", (p.stderr, os.listdir(gap)))
    os.makedirs(os.path.join(tmp, "afolder-000000.tar"))
    p = trainbox("data", "pack", root, os.path.join(tmp, "afolder-%06d.tar"), "--force", rc=2)
    check("pack onto a folder: 'it is a folder', no --force advice", one_line(p) and "it is a folder" in p.stderr
          and "--force" not in p.stderr, p.stderr)

    # --- files that cannot be images: data ls flags 0-byte ones, pack refuses them before writing ---
    badroot = os.path.join(tmp, "badroot")
    for rel, data in (("cat/a.jpg", image_bytes(1, "JPEG")), ("cat/empty.jpg", b""), ("dog/b.png", image_bytes(2, "PNG")),
                      ("dog/text.jpg", b"not an image\n")):
        os.makedirs(os.path.dirname(os.path.join(badroot, rel)), exist_ok=True)
        with open(os.path.join(badroot, rel), "wb") as f:
            f.write(data)
    p = trainbox("data", "ls", badroot)
    check("data ls flags the 0-byte .jpg", "cat/empty.jpg (0 bytes)" in p.stdout, p.stdout)
    j = json.loads(trainbox("data", "ls", badroot, "--json").stdout)
    check("... and --json counts it", j["not_images"]["empty"] == 1 and j["not_images"]["examples"] == ["cat/empty.jpg (0 bytes)"],
          j.get("not_images"))
    os.makedirs(os.path.join(tmp, "badpack"))
    p = trainbox("data", "pack", badroot, os.path.join(tmp, "badpack", "t-%06d.tar"), rc=2)
    check("pack refuses the 0-byte and the non-image file, naming both, writing nothing",
          one_line(p) and "cat/empty.jpg (0 bytes)" in p.stderr and "dog/text.jpg (not JPEG or PNG)" in p.stderr
          and os.listdir(os.path.join(tmp, "badpack")) == [], p.stderr)

    # --- bad input: exit 2 and one line ---
    p = trainbox("data", "ls", os.path.join(tmp, "nope"), rc=2)
    check("data ls of a mistyped folder: it does not exist (no talk of shards)",
          one_line(p) and "nope does not exist" in p.stderr.splitlines()[0] and "shard" not in p.stderr.splitlines()[0],
          p.stderr)
    p = trainbox("data", "ls", os.path.join(badroot, "cat"), rc=2)
    check("data ls of one class's folder (one level too deep) suggests the parent",
          one_line(p) and f"pass its parent {badroot}" in p.stderr, p.stderr)
    os.makedirs(os.path.join(tmp, "empty", "cat"))
    p = trainbox("data", "ls", os.path.join(tmp, "empty"), rc=2)
    check("an empty class folder is named", "'cat'" in p.stderr, p.stderr)
    with open(os.path.join(tmp, "broken.tar"), "wb") as f:
        f.write(open(shards[0], "rb").read()[:700])
    p = trainbox("data", "ls", os.path.join(tmp, "broken.tar"), rc=2)
    check("a truncated shard names the offset", "byte offset 0" in p.stderr, p.stderr)

print(f"{bad} failure(s)")
sys.exit(1 if bad else 0)
