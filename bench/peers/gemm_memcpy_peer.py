"""torch.mm and tensor copies timed from Python, the same way `trainbox bench gemm|memcpy`
times them (warm-up, each iteration timed alone — CUDA events on GPU — median). Prints
JSON lines: {"bench":"gemm","dtype","n","tflops"} and {"bench":"memcpy","direction","bytes","gbps"}."""
import argparse
import json
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="cpu")
ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"])
ap.add_argument("--bytes", type=int, nargs="+", default=[64 << 20])
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--warmup", type=int, default=5)
args = ap.parse_args()
dev = torch.device(args.device)


def timed(fn):
    for _ in range(args.warmup):
        fn()
    out = []
    for _ in range(args.iters):
        if dev.type == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize()
            out.append(s.elapsed_time(e) / 1e3)
        else:
            t0 = time.perf_counter(); fn(); out.append(time.perf_counter() - t0)
    out.sort()
    return out[len(out) // 2] if len(out) % 2 else 0.5 * (out[len(out) // 2 - 1] + out[len(out) // 2])


types = {"fp32": (torch.float32, False), "tf32": (torch.float32, True), "bf16": (torch.bfloat16, False),
         "fp16": (torch.float16, False)}
for name in args.dtypes:
    dt, tf32 = types[name]
    torch.backends.cuda.matmul.allow_tf32 = tf32
    for n in args.sizes:
        a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
        c = torch.empty(n, n, device=dev, dtype=dt)
        t = timed(lambda: torch.mm(a, b, out=c))
        print(json.dumps({"bench": "gemm", "dtype": name, "n": n, "tflops": 2 * n ** 3 / t / 1e12}))
for nb in args.bytes:
    src = torch.randint(0, 255, (nb,), dtype=torch.uint8)
    if dev.type == "cuda":
        d, d2, pinned = torch.empty(nb, dtype=torch.uint8, device=dev), torch.empty(nb, dtype=torch.uint8, device=dev), src.pin_memory()
        for name, fn in [("h2d pinned", lambda: d.copy_(pinned, non_blocking=True)), ("d2d", lambda: d2.copy_(d)),
                         ("h2d pageable", lambda: d.copy_(src))]:
            print(json.dumps({"bench": "memcpy", "direction": name, "bytes": nb, "gbps": nb / timed(fn) / 1e9}))
    else:
        dst = torch.empty_like(src)
        print(json.dumps({"bench": "memcpy", "direction": "host->host", "bytes": nb, "gbps": nb / timed(lambda: dst.copy_(src)) / 1e9}))
