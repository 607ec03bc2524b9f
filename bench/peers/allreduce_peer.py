"""torch.distributed allreduce (in place, SUM) over the same sizes as `trainbox bench
allreduce`; run under torchrun. Rank 0 prints one JSON line per size with the median time
and busbw (nccl-tests' definition)."""
import argparse
import json
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("-b", type=int, default=1 << 20)
ap.add_argument("-e", type=int, default=16 << 20)
ap.add_argument("-f", type=float, default=2)
ap.add_argument("-n", type=int, default=20)
ap.add_argument("-w", type=int, default=5)
ap.add_argument("--device", default="cpu")
args = ap.parse_args()
dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
rank, n = dist.get_rank(), dist.get_world_size()
dev = torch.device(args.device, rank) if args.device == "cuda" else torch.device("cpu")
size = args.b
while size <= args.e:
    t = torch.ones(size // 4, device=dev)
    for _ in range(args.w):
        dist.all_reduce(t)
    times = []
    for _ in range(args.n):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = sorted(times)[len(times) // 2]
    if rank == 0:
        print(json.dumps({"size": size, "time_us": med * 1e6, "busbw": size / med / 1e9 * 2 * (n - 1) / n}))
    size = int(size * args.f)
dist.destroy_process_group()
