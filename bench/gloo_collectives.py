# Measures c10d Gloo's ways to reduce-scatter a gradient bucket, and its all-gather, at 2 and 3
# ranks, fp32, interleaved (every call once per round, rounds repeated), and checks each
# reduce-scatter gives the right numbers (docs/distributed.md, "Sharding (ZeRO)"):
#   allreduce               the whole bucket (plain DDP; what stage 2 used to slice)
#   reduce_scatter_tensor   Gloo's own _reduce_scatter_base
#   allreduce+narrow        allreduce, then take this rank's slice
#   alltoall+sum            alltoall_base of the N slices, then add the N received slices
#   p2p+sum                 send slice j to rank j, receive this rank's slice from every peer,
#                           add them to our own (what trainbox does: (N-1)/N·B sent, no B-sized buffer)
#   all_gather_into_tensor  _allgather_base (after the optimizer step)
#   p2p all-gather          our slice sent to every peer, theirs received into the output (what trainbox does)
#   .venv/bin/python bench/gloo_collectives.py      WORLDS=2,3 MIB=1,2.4,25 ROUNDS=20 PORT=29731
import os, statistics, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rs_alltoall(out, full, world):
    recv = torch.empty_like(full)
    dist.all_to_all_single(recv, full)
    torch.sum(recv.view(world, -1), 0, out=out)


def rs_p2p(out, full, world, rank):
    s = out.numel()
    works, bufs = [], []
    for k in range(1, world):  # peers in a rotating order: no two ranks wait on the same one
        dst, src = (rank + k) % world, (rank - k) % world
        works.append(dist.isend(full.narrow(0, dst * s, s), dst))
        bufs.append(out if world == 2 else torch.empty(s))
        works.append(dist.irecv(bufs[-1], src))
    for w in works:
        w.wait()
    if world == 2:
        out.add_(full.narrow(0, rank * s, s))
    else:
        out.copy_(full.narrow(0, rank * s, s))
        for b in bufs:
            out.add_(b)


def ag_p2p(out, shard, world, rank):
    s = shard.numel()
    out.narrow(0, rank * s, s).copy_(shard)
    works = [dist.irecv(out.narrow(0, ((rank - k) % world) * s, s), (rank - k) % world) for k in range(1, world)]
    works += [dist.isend(shard, (rank + k) % world) for k in range(1, world)]
    for w in works:
        w.wait()


def run(rank, world, port, mibs, rounds, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res = {}
    for mib in mibs:
        n = int(mib * (1 << 20)) // 4
        n -= n % world
        s = n // world
        full = torch.randn(n)
        shard = torch.empty(s)
        gat = torch.empty(n)
        ok = {}
        x = torch.arange(n, dtype=torch.float32) * (rank + 1)
        exp = (torch.arange(n, dtype=torch.float32) * sum(r + 1 for r in range(world))).narrow(0, rank * s, s)
        g = torch.empty(n)
        ag_p2p(g, torch.full((s,), float(rank)), world, rank)
        ok["ag_ok"] = bool(torch.equal(g, torch.arange(world).repeat_interleave(s).float()))
        for name, f in {"rs": lambda o: dist.reduce_scatter_tensor(o, x.clone()),
                        "a2a": lambda o: rs_alltoall(o, x.clone(), world),
                        "p2p": lambda o: rs_p2p(o, x.clone(), world, rank)}.items():
            try:
                o = torch.zeros(s)
                f(o)
                ok[name + "_ok"] = bool(torch.equal(o, exp))
            except Exception as e:
                ok[name + "_err"] = str(e).splitlines()[0]
        calls = {"allreduce": lambda: dist.all_reduce(full),
                 "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(shard, full),
                 "allreduce+narrow": lambda: (dist.all_reduce(full), shard.copy_(full.narrow(0, rank * s, s))),
                 "alltoall+sum": lambda: rs_alltoall(shard, full, world),
                 "p2p+sum": lambda: rs_p2p(shard, full, world, rank),
                 "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(gat, shard),
                 "p2p all-gather": lambda: ag_p2p(gat, shard, world, rank)}
        t = {k: [] for k in calls}
        for it in range(rounds + 2):  # interleaved; the first two rounds warm up
            for k, f in calls.items():
                dist.barrier()
                t0 = time.perf_counter()
                f()
                if it >= 2:
                    t[k].append(time.perf_counter() - t0)
        # every rank's median; the slowest rank's is the collective's time
        med = torch.tensor([statistics.median(v) * 1e3 for v in t.values()])
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        res[mib] = dict(zip(t, med.tolist())) | ok
    if rank == 0:
        out.put(res)
    dist.destroy_process_group()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    worlds = [int(w) for w in os.environ.get("WORLDS", "2,3").split(",")]
    mibs = [float(m) for m in os.environ.get("MIB", "1,2.4,25").split(",")]
    rounds = int(os.environ.get("ROUNDS", "20"))
    print(f"# torch {torch.__version__} Gloo, loopback, fp32, 1 thread per rank, median of {rounds} interleaved rounds "
          "(slowest rank), ms")
    for i, world in enumerate(worlds):
        q = ctx.Queue()
        ps = [ctx.Process(target=run, args=(r, world, int(os.environ.get("PORT", "29731")) + i, mibs, rounds, q))
              for r in range(world)]
        [p.start() for p in ps]
        r = q.get()
        [p.join() for p in ps]
        for mib, d in r.items():
            print(f"world {world} {mib:g} MiB:", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in d.items()})
