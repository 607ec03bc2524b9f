"""Python DDP with Gloo on CPU, the same job as `trainbox train --nproc-per-node N`: the
classic Net on Fashion-MNIST (in memory), Adam, DistributedSampler layout, per-rank batch.
Run under torchrun; rank 0 prints one JSON line with the job's samples/s.
  torchrun --standalone --nproc-per-node 2 ddp_peer.py --batch 64 --steps 300"""
import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import make_model  # noqa: E402
from idx import load_idx  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--warmup", type=int, default=20)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
ap.add_argument("--ab-blocks", type=int, default=0,
                help="paired measurement under trainbox run: this many blocks of --steps steps, "
                     "instrumentation taken back and put again in ABBA order")
args = ap.parse_args()

torch.set_num_threads(args.threads)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
import numpy as np  # noqa: E402
x8 = load_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"))
y8 = load_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"))
X = torch.from_numpy(x8.astype(np.float32) / 255.0).unsqueeze(1)
X = (X - X.mean()) / X.std()
Y = torch.from_numpy(y8.astype(np.int64))
torch.manual_seed(0)
model = DDP(make_model({"name": "mlp", "hidden": [128]}))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
shard = torch.randperm(X.shape[0], generator=g)[rank::world]
nb = shard.shape[0] // args.batch


def step(i):
    idx = shard[(i % nb) * args.batch:(i % nb + 1) * args.batch]
    opt.zero_grad()
    loss = F.cross_entropy(model(X[idx]), Y[idx])
    loss.backward()
    opt.step()


for i in range(args.warmup):
    step(i)
dist.barrier()
if args.ab_blocks:
    # bench/python_instrument.sh's paired measurement: the same process, the same model, blocks
    # with and without trainbox's instrumentation (ABBA, so drift cancels); per block the median
    # step (a step that lost its core to the other rank says nothing about the instrumentation)
    import statistics
    ins = sys.modules.get("trainbox._instrument")
    if ins is None or not ins._installed:
        sys.exit("--ab-blocks needs trainbox run with its instrumentation on")
    blocks = {"on": [], "off": []}
    i = args.warmup
    for b in range(args.ab_blocks):
        on = b % 4 in (0, 3)
        ins.install(torch) if on else ins.uninstall()
        dist.barrier()
        times = []
        for _ in range(args.steps):
            t = time.perf_counter_ns()
            step(i)
            times.append(time.perf_counter_ns() - t)
            i += 1
        dist.barrier()
        blocks["on" if on else "off"].append(statistics.median(times) / 1e3)
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp-gloo-ab", "world": world, "steps_per_block": args.steps,
                          "median_step_us": blocks}))
    del model, opt  # DDP's reducer goes before the process group: torch 2.11 aborts now and then in teardown otherwise
    gc.collect()
    dist.destroy_process_group()
    sys.exit(0)
t0 = time.perf_counter()
for i in range(args.steps):
    step(args.warmup + i)
dist.barrier()
dt = time.perf_counter() - t0
if rank == 0:
    print(json.dumps({"impl": "pytorch-ddp-gloo", "world": world, "batch_per_rank": args.batch, "steps": args.steps,
                      "samples_per_s": args.steps * args.batch * world / dt}))
del model, opt  # DDP's reducer goes before the process group: torch 2.11 aborts now and then in teardown otherwise
gc.collect()
dist.destroy_process_group()
