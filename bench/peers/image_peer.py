"""The torchvision peer of `trainbox bench dataloader --dataset imagefolder` (bench/image_pipeline.sh):
ImageFolder + DataLoader(num_workers=W, persistent_workers=True) with RandomResizedCrop(SIZE),
RandomHorizontalFlip, ToTensor and Normalize (ImageNet's mean/std), batch B, shuffled, EPOCHS
epochs. Prints one JSON line: images/s per epoch, and the peak RSS of the main process plus its
workers (sampled every 50 ms from /proc, as the workers are separate processes).
  python image_peer.py ROOT [--workers 2] [--batch 64] [--size 224] [--epochs 5] [--gen N]
--gen N writes the benchmark's tree first: N JPEGs of 500x375, quality 90, in 10 classes."""
import argparse
import json
import os
import threading
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("root")
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--size", type=int, default=224)
ap.add_argument("--epochs", type=int, default=5)
ap.add_argument("--gen", type=int, default=0)
a = ap.parse_args()

if a.gen:
    from PIL import Image
    rng = np.random.default_rng(0)
    # smooth colour fields plus noise: about 63 KB a file at quality 90 (photo-like sizes)
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)
    for i in range(a.gen):
        c = i % 10
        d = os.path.join(a.root, f"class_{c:02d}")
        os.makedirs(d, exist_ok=True)
        f = rng.uniform(0.005, 0.03, 3)
        img = np.stack([127 + 90 * np.sin(xx * f[k] + yy * f[(k + 1) % 3] + c) for k in range(3)], -1)
        img = np.clip(img + rng.normal(0, 10, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)
    raise SystemExit(0)

import torch  # noqa: E402
import torchvision  # noqa: E402
from torchvision import transforms as T  # noqa: E402

torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = torchvision.datasets.ImageFolder(a.root, tf)
dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                 persistent_workers=a.workers > 0)


def tree_rss():
    """RSS of this process and every descendant, in MB."""
    me, total = os.getpid(), 0
    kids = {me}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            st = open(f"/proc/{p}/stat").read()
            ppid = int(st.rsplit(")", 1)[1].split()[1])
            if ppid == me or int(p) == me:
                kids.add(int(p))
        except OSError:
            pass
    for p in kids:
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


peak = [0.0]
stop = threading.Event()


def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], tree_rss())
        time.sleep(0.05)


threading.Thread(target=sample, daemon=True).start()
ips, rss = [], []
for e in range(a.epochs):
    t0 = time.perf_counter()
    n = 0
    for x, y in dl:
        n += x.shape[0]
    ips.append(n / (time.perf_counter() - t0))
    rss.append(tree_rss())
stop.set()
print(json.dumps({"peer": "torchvision", "images": len(ds), "workers": a.workers, "images_per_s": ips,
                  "rss_mb_after_epoch": rss, "peak_rss_mb": peak[0]}))
