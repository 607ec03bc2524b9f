"""Python DDP with PyTorch's own gradient-compression hooks, the peer of `trainbox train` with
dist.grad_compression (bench/compression_link.sh): the GPT of bench/peers/models.py (the twin of
src/models/gpt.cpp) on a text file as bytes (vocab 256), random windows of block_size tokens,
AdamW, Gloo, one thread a rank. --hook none | bf16 (bf16_compress_hook) | powersgd
(powerSGD_hook with PowerSGDState(matrix_approximation_rank=--rank, start_powerSGD_iter=
--powersgd-start, the other settings PyTorch's defaults: error feedback, warm start, min rate 2)).
Run under torchrun; rank 0 prints one JSON line: the median and mean step seconds after
--warmup steps, the last step's loss (averaged over the ranks) and the steps.
  torchrun --nnodes 2 … compress_peer.py --data t.txt --hook powersgd --rank 4 --steps 8"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import make_model  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--data", required=True)
ap.add_argument("--hook", choices=["none", "bf16", "fp16", "powersgd"], default="none")
ap.add_argument("--rank", type=int, default=4)
ap.add_argument("--powersgd-start", type=int, default=2)  # not --start: torchrun takes it for --start-method
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--n-layer", type=int, default=4)
ap.add_argument("--n-head", type=int, default=8)
ap.add_argument("--n-embd", type=int, default=448)
ap.add_argument("--block-size", type=int, default=32)
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
args = ap.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
data = torch.from_numpy(np.frombuffer(open(args.data, "rb").read(), dtype=np.uint8).astype(np.int64))
torch.manual_seed(0)
model = DDP(make_model({"name": "gpt", "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
                        "block_size": args.block_size}, classes=256), bucket_cap_mb=args.bucket_cap_mb)
if args.hook == "bf16":
    model.register_comm_hook(dist.group.WORLD, default_hooks.bf16_compress_hook)
elif args.hook == "fp16":
    model.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
elif args.hook == "powersgd":
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank,
                                        start_powerSGD_iter=args.powersgd_start)
    model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
g = torch.Generator().manual_seed(1 + rank)
T = args.block_size


def step():
    starts = torch.randint(0, data.numel() - T - 1, (args.batch,), generator=g)
    x = torch.stack([data[s:s + T] for s in starts])
    y = torch.stack([data[s + 1:s + T + 1] for s in starts])
    opt.zero_grad()
    loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
    loss.backward()
    opt.step()
    return loss.detach()


times, loss = [], None
for i in range(args.warmup + args.steps):
    dist.barrier()
    t = time.perf_counter()
    loss = step()
    if i >= args.warmup:
        times.append(time.perf_counter() - t)
dist.all_reduce(loss)
if rank == 0:
    print(json.dumps({"impl": f"pytorch-ddp-{args.hook}", "world": world, "steps": args.steps,
                      "median_step_s": statistics.median(times), "mean_step_s": sum(times) / len(times),
                      "loss": loss.item() / world,
                      "params": sum(p.numel() for p in model.parameters())}))
del model, opt  # DDP's reducer goes before the process group: torch 2.11 aborts now and then in teardown otherwise
gc.collect()
dist.destroy_process_group()
