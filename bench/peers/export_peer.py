"""Peer of bench/export_vs_pytorch.sh: ONNX Runtime (CPU) and PyTorch eager on trainbox's exports
of one checkpoint — latency at batch 1, throughput at batch 64 — beside trainbox's own forward
(measured by the script, passed in). Prints a table, then one JSON line per row."""
import json
import os
import statistics
import sys
import time

import onnxruntime as ort
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import make_model  # noqa: E402

d, threads, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
trainbox_s = {("gpt", 1): float(sys.argv[4]), ("gpt", 64): float(sys.argv[5]),
              ("resnet", 1): float(sys.argv[6]), ("resnet", 64): float(sys.argv[7])}
torch.set_num_threads(threads)


def median_s(fn, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


opts = ort.SessionOptions()
opts.intra_op_num_threads = threads
print(f"{'model':8} {'batch':>5} {'metric':>12} {'onnxruntime':>12} {'trainbox':>10} {'pytorch':>10} {'ort/trainbox':>13} {'ort/pytorch':>12}")
rows = []
for m in ("gpt", "resnet"):
    cfg = {"name": "gpt", "n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128} if m == "gpt" else {"name": "resnet"}
    net = make_model(cfg, (1, 28, 28), 256 if m == "gpt" else 10)
    net.load_state_dict(torch.load(f"{d}/{m}.pt", weights_only=True), strict=True)
    net.eval()
    sess = ort.InferenceSession(f"{d}/{m}.onnx", opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for b in (1, 64):
        torch.manual_seed(0)
        x = torch.randint(256, (b, 128)) if m == "gpt" else torch.randn(b, 1, 28, 28)
        xn = x.numpy()
        t_ort = median_s(lambda: sess.run(["logits"], {name: xn}))
        with torch.inference_mode():
            t_pt = median_s(lambda: net(x))
        t_tb = trainbox_s[(m, b)]
        if b == 1:
            vals, metric = (1e3 * t_ort, 1e3 * t_tb, 1e3 * t_pt), "latency_ms"
            ratio_tb, ratio_pt = t_tb / t_ort, t_pt / t_ort  # > 1: ONNX Runtime is faster
        else:
            vals, metric = (b / t_ort, b / t_tb, b / t_pt), "samples_s"
            ratio_tb, ratio_pt = t_tb / t_ort, t_pt / t_ort
        print(f"{m:8} {b:5} {metric:>12} {vals[0]:12.2f} {vals[1]:10.2f} {vals[2]:10.2f} {ratio_tb:13.2f} {ratio_pt:12.2f}")
        rows.append({"model": m, "batch": b, "metric": metric, "onnxruntime": vals[0], "trainbox": vals[1], "pytorch": vals[2],
                     "speedup_vs_trainbox": ratio_tb, "speedup_vs_pytorch": ratio_pt})
print("# ort/x columns: how many times faster ONNX Runtime is than x (time ratio)")
for r in rows:
    print(json.dumps(r))
