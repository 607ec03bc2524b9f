"""trainbox's gradient compression against PyTorch's own DDP communication hooks
(bf16_compress_hook, fp16_compress_hook, powerSGD_hook), on the same buckets: 2 Gloo ranks
of torch.nn.parallel.DistributedDataParallel with the hook, then 2 ranks of
compression_check (trainbox's C++ DDP), the same gradients (a module whose loss is
sum_k (p_k * G_k).sum(), G_k drawn from torch.Generator seeded 1000·step + 100·rank + k in
both), one bucket in both DDPs. Each step's averaged gradients and the PowerSGD state after
the last step (error feedback, warm-start Q) must agree:
  bf16/fp16: bit-identical (2 ranks: dividing by 2 before or after the cast is exact);
  powersgd: within RTOL = 1e-5 of the largest value (the same ops in the same order, so
    measured 0 here; the bound allows another BLAS's matmul blocking).
The random Q is not fed: trainbox draws PowerSGDState's seeds as numpy's RandomState(0)
does (MT19937, masked rejection), and the rank-4 configuration without warm start draws a
new Q at every step, so the seed sequence is compared too. PowerSGD starts at step 2
(start_powerSGD_iter = 2), and 4 compressed steps follow: the error feedback and Q carried
over steps are what steps 3-5 compare. compression_check's own checks (resume, NaN,
accumulation, CommStats) print "ok"/"FAIL" lines; then the bad-input cases (a rank that
differs across ranks, a rank larger than every matrix): exit 2 naming them.
  compression_vs_torch.py COMPRESSION_CHECK   (or as a rank: --rank R PORT DIR)
"""
import gc
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from dashlib import free_port  # noqa: E402  (a free loopback port, shared by the Python tests)

SHAPES = [(32, 24), (24,), (8, 4, 3, 3), (4, 4), (32, 24), (40, 16), (40,)]
STEPS = 6
RTOL = 1e-5
CONFIGS = {
    "bf16": None,
    "fp16": None,
    "powersgd_r2": dict(matrix_approximation_rank=2, start_powerSGD_iter=2, warm_start=True),
    "powersgd_r4_cold": dict(matrix_approximation_rank=4, start_powerSGD_iter=2, warm_start=False),
}


class Gradients(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for k, s in enumerate(SHAPES):
            self.register_parameter(f"p{k}", torch.nn.Parameter(torch.zeros(s)))

    def forward(self, step, rank):
        loss = torch.zeros(())
        for k, (p, s) in enumerate(zip(self.parameters(), SHAPES)):
            g = torch.Generator().manual_seed(1000 * step + 100 * rank + k)
            loss = loss + (p * torch.randn(s, generator=g)).sum()
        return loss


def rank_main(rank, port, out):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as ps

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for name, cfg in CONFIGS.items():
        model = Gradients()
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        order = []
        if cfg is None:
            hook = default_hooks.bf16_compress_hook if name == "bf16" else default_hooks.fp16_compress_hook
            state = None
        else:
            state = ps.PowerSGDState(process_group=None, **cfg)
            hook = ps.powerSGD_hook

        def recording(st, bucket, hook=hook):
            order.append([tuple(t.shape) for t in bucket.gradients()])
            return hook(st, bucket)

        ddp.register_comm_hook(state, recording)
        for s in range(STEPS):
            ddp(s, rank).backward()
            g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            g.numpy().astype(np.float32).tofile(f"{out}/{name}.rank{rank}.step{s}.bin")
            for p in model.parameters():
                p.grad = None
        if state is not None:
            if 0 in state.error_dict:
                state.error_dict[0].numpy().tofile(f"{out}/{name}.rank{rank}.error.0.bin")
            if 0 in state.q_memory_dict:
                state.q_memory_dict[0].numpy().tofile(f"{out}/{name}.rank{rank}.q.0.bin")
        with open(f"{out}/{name}.rank{rank}.order", "w") as f:
            f.write(repr(order[-1]))
        del ddp, model  # DDP's reducer goes before the process group: torch 2.11 aborts now and then in teardown otherwise
        gc.collect()
    dist.destroy_process_group()


def run_world(cmd_of_rank, env_of_rank):
    procs = [subprocess.Popen(cmd_of_rank(r), env=env_of_rank(r), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    return [p.returncode for p in procs], outs


def main():
    check = sys.argv[1]
    fail = 0
    with tempfile.TemporaryDirectory() as tdir:
        py, cc = os.path.join(tdir, "torch"), os.path.join(tdir, "trainbox")
        os.makedirs(py)
        os.makedirs(cc)
        port = free_port()
        rcs, outs = run_world(lambda r: [sys.executable, __file__, "--rank", str(r), str(port), py],
                              lambda r: dict(os.environ, OMP_NUM_THREADS="1"))
        if rcs != [0, 0]:
            print(f"FAIL PyTorch ranks exited {rcs}\n{outs[0]}\n{outs[1]}")
            return 1

        def cenv(r, p):
            return dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2",
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(p), OMP_NUM_THREADS="1")

        port = free_port()
        rcs, outs = run_world(lambda r: [check, "dump", cc], lambda r: cenv(r, port))
        print(outs[0].strip())
        if rcs != [0, 0]:
            print(f"FAIL compression_check ranks exited {rcs}\n{outs[1]}")
            fail = 1

        expected_order = repr(list(reversed(SHAPES)))
        for name, cfg in CONFIGS.items():
            order = open(f"{py}/{name}.rank0.order").read()
            if order != expected_order:
                print(f"FAIL {name}: PyTorch's bucket holds {order}, trainbox's {expected_order}")
                fail = 1
                continue
            worst = 0.0
            for r in range(2):
                for s in range(STEPS):
                    a = np.fromfile(f"{py}/{name}.rank{r}.step{s}.bin", dtype=np.float32)
                    b = np.fromfile(f"{cc}/{name}.rank{r}.step{s}.bin", dtype=np.float32)
                    if a.shape != b.shape:
                        print(f"FAIL {name} rank {r} step {s}: {a.shape} vs {b.shape} values")
                        fail = 1
                        continue
                    worst = max(worst, float(np.max(np.abs(a - b))) / max(1e-30, float(np.max(np.abs(a)))))
            tol = 0.0 if cfg is None else RTOL
            ok = worst <= tol
            fail |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name}: gradients of {STEPS} steps x 2 ranks vs PyTorch's hook: max "
                  f"difference {worst:.3g} of the largest (bound {tol:g})")
            if cfg is None:
                continue
            for key in ("error.0", "q.0"):
                for r in range(2):
                    pa, pb = f"{py}/{name}.rank{r}.{key}.bin", f"{cc}/{name}.rank{r}.{key}.bin"
                    if os.path.exists(pa) != os.path.exists(pb):
                        print(f"FAIL {name} rank {r}: {key} held by {'PyTorch' if os.path.exists(pa) else 'trainbox'} "
                              "only")
                        fail = 1
                        continue
                    if not os.path.exists(pa):
                        continue
                    a, b = np.fromfile(pa, dtype=np.float32), np.fromfile(pb, dtype=np.float32)
                    d = float(np.max(np.abs(a - b))) / max(1e-30, float(np.max(np.abs(a)))) if a.shape == b.shape \
                        else float("inf")
                    ok = d <= RTOL
                    fail |= not ok
                    print(f"{'ok  ' if ok else 'FAIL'} {name} rank {r}: {key} after step {STEPS - 1} vs "
                          f"PowerSGDState's: max difference {d:.3g} of the largest ({a.size} values)")

        for mode, want in (("mismatch", "rank(s) 1 have powersgd (rank 2"), ("badrank", "dist.powersgd.rank = 64")):
            port = free_port()
            rcs, outs = run_world(lambda r: [check, mode], lambda r: cenv(r, port))
            ok = rcs == [2, 2] and want in outs[0] and len(outs[0].strip().splitlines()) == 1
            fail |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {mode}: both ranks exit 2 with one line naming it: "
                  f"{outs[0].strip()[:160]} (exit {rcs})")
    return fail


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(main())
