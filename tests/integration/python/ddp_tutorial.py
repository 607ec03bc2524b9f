"""A training script as the PyTorch DDP tutorials write it: no trainbox import, nothing added.

torchrun (or trainbox run) starts one process per rank; Gloo on CPU; a DistributedSampler
and DataLoader(num_workers=2) over an in-memory dataset; the seeds' Net 784-128-10 + Adam;
rank 0 saves a torch.save snapshot after every epoch.
    python ddp_tutorial.py --epochs 2 --out DIR
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=9600)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(args.samples, 784, generator=g), torch.randint(0, 10, (args.samples,), generator=g))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=2)

    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp_model = DDP(model)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(ddp_model.parameters(), lr=1e-3)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            os.makedirs(args.out, exist_ok=True)
            torch.save(ddp_model.module.state_dict(), os.path.join(args.out, f"snapshot_{epoch}.pt"))
            print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
