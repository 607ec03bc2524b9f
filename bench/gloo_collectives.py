# Measures c10d Gloo allreduce, reduce_scatter_tensor (_reduce_scatter_base), all_gather_into_tensor
# (_allgather_base) and allreduce + slice at 2 ranks, 1 and 25 MiB fp32, interleaved, and checks the
# first two give the right numbers (docs/distributed.md, "Sharding (ZeRO)").
#   .venv/bin/python bench/gloo_collectives.py
import os, sys, time, statistics, torch, torch.distributed as dist
import torch.multiprocessing as mp
def run(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res = {}
    for mib in (1, 25):
        n = mib * (1 << 20) // 4
        n -= n % world
        full = torch.randn(n); shard = torch.empty(n // world); gat = torch.empty(n)
        ok = {}
        try:
            x = torch.arange(n, dtype=torch.float32) * (rank + 1)
            dist.reduce_scatter_tensor(shard, x)
            exp = (torch.arange(n, dtype=torch.float32) * sum(r + 1 for r in range(world))).narrow(0, rank * (n // world), n // world)
            ok["rs_correct"] = bool(torch.equal(shard, exp))
        except Exception as e: ok["rs_err"] = str(e).splitlines()[0]
        try:
            dist.all_gather_into_tensor(gat, torch.full((n // world,), float(rank)))
            ok["ag_correct"] = bool(torch.equal(gat, torch.arange(world).repeat_interleave(n // world).float()))
        except Exception as e: ok["ag_err"] = str(e).splitlines()[0]
        calls = {"allreduce": lambda: dist.all_reduce(full),
                 "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(shard, full),
                 "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(gat, shard),
                 "allreduce+narrow": lambda: (dist.all_reduce(full), full.narrow(0, 0, n // world).clone())}
        t = {k: [] for k in calls}
        for it in range(30):  # interleaved
            for k, f in calls.items():
                dist.barrier(); t0 = time.perf_counter(); f(); t[k].append(time.perf_counter() - t0)
        res[mib] = {k: statistics.median(v[2:]) * 1e3 for k, v in t.items()} | ok
    if rank == 0: out.put(res)
    dist.destroy_process_group()
if __name__ == "__main__":
    q = mp.get_context("spawn").Queue()
    ps = [mp.get_context("spawn").Process(target=run, args=(r, 2, int(os.environ.get("PORT", "29731")), q)) for r in range(2)]
    [p.start() for p in ps]; r = q.get(); [p.join() for p in ps]
    for mib, d in r.items():
        print(f"{mib} MiB fp32:", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in d.items()})
