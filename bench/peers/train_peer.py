"""The same training loop as `trainbox train`, in Python PyTorch eager: what a user writes.
Data is already in memory (normalised float tensors); the optimizer is torch.optim's
default implementation. Prints one JSON line.
  python train_peer.py --model mlp --batch 64 --steps 938 --threads 2 [--device cpu] [--compile]
  python train_peer.py --model gpt --batch 16 --steps 200 --data /usr/share/games/fortunes [--amp bf16]
gpt: configs/text_gpt.toml's model (4 layers, 4 heads, 128 wide, block 128) on byte windows of
the text (a file, or every regular file of a directory in name order), AdamW as configured there.
--compile wraps the model in torch.compile (default inductor backend); the warm-up steps
include the compilation, the timed steps do not."""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from idx import load_idx  # noqa: E402
from models import GPT, make_model  # noqa: E402


ap = argparse.ArgumentParser()
ap.add_argument("--model", default="mlp")
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=938)
ap.add_argument("--warmup", type=int, default=20)
ap.add_argument("--threads", type=int, default=os.cpu_count())
ap.add_argument("--device", default="cpu")
ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
ap.add_argument("--compile", action="store_true", help="torch.compile the model (the peer a tuned user writes)")
ap.add_argument("--amp", default="off", choices=["off", "bf16"], help="autocast to bf16")
ap.add_argument("--block", type=int, default=128, help="gpt: context length")
args = ap.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(0)
dev = torch.device(args.device)
if args.model == "gpt":
    paths = [args.data] if os.path.isfile(args.data) else sorted(
        os.path.join(args.data, f) for f in os.listdir(args.data) if os.path.isfile(os.path.join(args.data, f)))
    text = b"".join(open(p, "rb").read() for p in paths)
    tokens = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(dev)
    T = args.block
    nwin = (tokens.numel() - 1) // T
    X = torch.arange(nwin, device=dev)  # window ids; the batch gathers tokens
    model = GPT(256, block_size=T, n_layer=4, n_head=4, n_embd=128).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)

    def batch_of(idx):
        w = tokens[(idx[:, None] * T + torch.arange(T + 1, device=dev)[None, :])].long()
        return w[:, :-1], w[:, 1:]
else:
    x8 = load_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))
    y8 = load_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))
    X = torch.from_numpy(x8.astype(np.float32) / 255.0).unsqueeze(1)
    X = ((X - X.mean()) / X.std()).to(dev)
    Y = torch.from_numpy(y8.astype(np.int64)).to(dev)
    cfg = {"mlp": {"name": "mlp", "hidden": [128]}, "cnn": {"name": "cnn", "channels": [32, 64], "fc": 128}}[args.model]
    model = make_model(cfg).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batch_of(idx):
        return X[idx], Y[idx]
fwd = torch.compile(model) if args.compile else model
perm = torch.randperm(X.shape[0], device=dev)
nb = X.shape[0] // args.batch


def step(i):
    idx = perm[(i % nb) * args.batch:(i % nb + 1) * args.batch]
    x, y = batch_of(idx)
    opt.zero_grad()
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp == "bf16"):
        out = fwd(x)
    loss = F.cross_entropy(out.float().view(-1, out.size(-1)), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss


for i in range(args.warmup):
    step(i)
if dev.type == "cuda":
    torch.cuda.synchronize()
t0 = time.perf_counter()
for i in range(args.steps):
    loss = step(args.warmup + i)
loss.item()
if dev.type == "cuda":
    torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(json.dumps({"impl": "pytorch-compile" if args.compile else "pytorch", "model": args.model, "batch": args.batch, "steps": args.steps,
                  "threads": args.threads, "device": args.device, "samples_per_s": args.steps * args.batch / dt,
                  "tokens_per_s": args.steps * args.batch * args.block / dt if args.model == "gpt" else None, "amp": args.amp,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
