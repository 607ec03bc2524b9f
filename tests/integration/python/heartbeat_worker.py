"""A torch-free worker for the dashboard tests: a step every 0.2 s, beating its heartbeat file
(util/heartbeat.h's record, written as docs/distributed.md shows) and printing a line per step.
Rank 0 also appends trainbox train-style "train" lines to <--run-dir>/metrics.jsonl (loss, lr, and
the job's samples: a global batch of 8 samples a step and rank), so the page has curves and samples/s,
and a mixture of experts' "moe" routing figures (the /metrics trainbox_moe_* families).
  heartbeat_worker.py --seconds 30 --run-dir DIR [--quiet-rank R]
"""
import argparse
import json
import math
import mmap
import os
import time

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=30)
ap.add_argument("--run-dir", default="")
ap.add_argument("--marker", default="", help="ignored: a word a test's cleanup finds the process by")
ap.add_argument("--quiet-rank", type=int, default=-1, help="this rank prints nothing (its log stays empty)")
a = ap.parse_args()
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
hb = None
if os.environ.get("TRAINBOX_HEARTBEAT_FILE"):
    fd = os.open(os.environ["TRAINBOX_HEARTBEAT_FILE"], os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 64)
    hb = mmap.mmap(fd, 64)
metrics = None
if rank == 0 and a.run_dir:
    os.makedirs(a.run_dir, exist_ok=True)
    metrics = open(os.path.join(a.run_dir, "metrics.jsonl"), "a")


def beat(step, phase):
    if hb is not None:
        hb[:64] = f"{step} {phase} {time.time_ns() // 10**6}".ljust(63).encode() + b"\n"


end = time.time() + a.seconds
step = 0
while time.time() < end:
    beat(step, "forward_backward")
    time.sleep(0.2)
    step += 1
    beat(step, "data")
    if rank != a.quiet_rank:
        print(f"rank {rank} step {step} api_token=hunter2", flush=True)
    if metrics and step % 5 == 0:
        metrics.write(json.dumps({"event": "train", "step": step, "loss": 2.0 * math.exp(-step / 50), "lr": 0.01,
                                  "samples": step * 8 * world, "samples_per_s": 40.0 * world,
                                  "global_batch": 8 * world, "world_size": world,
                                  # a mixture of experts' routing, as trainbox train writes it (docs/moe.md)
                                  "moe": {"tokens": [[60, 20, 0, 0], [20, 20, 20, 20]], "imbalance": [3.0, 1.0],
                                          "imbalance_max": 3.0}}) + "\n")
        metrics.flush()
beat(step, "done")
