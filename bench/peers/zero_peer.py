"""PyTorch's sharded data parallel on CPU (Gloo), for bench/zero_vs_python.sh and
tests/integration/gpt_parity.py: the GPT of bench/peers/models.py, AdamW, under torchrun (or
spawned with RANK/WORLD_SIZE/MASTER_* set).
  --mode zero   DistributedDataParallel + torch.distributed.optim.ZeroRedundancyOptimizer(AdamW)
  --mode fsdp2  torch.distributed.fsdp.fully_shard on every block and the whole model, AdamW
  --mode ddp    DistributedDataParallel + AdamW (the reference)
Batches: --text FILE (byte windows starting at the offsets of --order, a .pt of int64 token
offsets, in order, each rank taking its contiguous share of each global batch), else random tokens of --seed. --init a
.safetensors state dict to start from. Prints one JSON line from rank 0: the per-step losses
(the mean over the ranks), the median step time after 2 warm-up steps, each rank's peak RSS
(VmHWM)."""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import GPT  # noqa: E402


def vm_hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["zero", "fsdp2", "ddp"], required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8, help="per rank")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.95))
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--text")
    ap.add_argument("--order")
    ap.add_argument("--init")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    model = GPT(a.vocab, block_size=a.block, n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd, dropout=0.0,
                bias=True)
    if a.init:
        from safetensors.torch import load_file
        model.load_state_dict(load_file(a.init))
    model.train()
    adam = dict(lr=a.lr, betas=tuple(a.betas), eps=a.eps, weight_decay=a.weight_decay)
    if a.mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
        net, opt = model, torch.optim.AdamW(model.parameters(), **adam)
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP
        net = DDP(model)
        if a.mode == "zero":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, **adam)
        else:
            opt = torch.optim.AdamW(model.parameters(), **adam)
    if a.text:
        tokens = torch.tensor(list(open(a.text, "rb").read()), dtype=torch.int64)
        order = torch.load(a.order)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)

    def batch(step):
        if not a.text:
            t = torch.randint(a.vocab, (a.batch, a.block + 1), generator=gen)
            return t[:, :-1], t[:, 1:]
        idx = order[step * world * a.batch:(step + 1) * world * a.batch][rank * a.batch:(rank + 1) * a.batch]
        w = tokens[idx[:, None] + torch.arange(a.block + 1)[None, :]]
        return w[:, :-1], w[:, 1:]

    losses, times = [], []
    for s in range(a.steps):
        x, y = batch(s)
        t0 = time.perf_counter()
        loss = F.cross_entropy(net(x).view(-1, a.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        lt = loss.detach().clone()
        dist.all_reduce(lt)
        losses.append(lt.item() / world)
    peaks = torch.zeros(world, dtype=torch.float64)
    peaks[rank] = vm_hwm()
    dist.all_reduce(peaks)
    out = {"mode": a.mode, "world": world, "losses": losses,
           "step_ms": 1000 * statistics.median(times[2:] if len(times) > 4 else times),
           "rank_peak_rss_bytes": [int(p) for p in peaks.tolist()]}
    if rank == 0:
        print(json.dumps(out), flush=True)
    # Drop DDP's reducer and the optimizer (which hold the process group) and agree that
    # every rank is done before the group goes: torch 2.11 aborts now and then in teardown
    # otherwise ("terminate called without an active exception", SIGABRT on both ranks).
    del net, opt
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
