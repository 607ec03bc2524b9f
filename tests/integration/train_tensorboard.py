"""trainbox's TensorBoard files, read by TensorBoard's own reader, hold exactly our tags,
steps and values — the same numbers metrics.jsonl records."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

bin_ = os.environ["TRAINBOX_BIN"]
with tempfile.TemporaryDirectory() as d:
    run = os.path.join(d, "run")
    subprocess.run([bin_, "train", "--run-dir", run, "--quiet", "--set", "data.dataset=synthetic",
                    "--set", "data.synthetic_samples=1000", "--set", "train.epochs=2", "--set", "train.batch_size=50",
                    "--set", "train.log_every=5", "--set", "model.hidden=[32]"], check=True)
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {"train/loss", "train/lr", "train/samples_per_s", "system/peak_memory_bytes", "eval/loss", "eval/accuracy"}
    bad = 0
    if tags != want:
        print(f"FAIL tags: {sorted(tags)} != {sorted(want)}")
        bad += 1
    events = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    expect = {
        "train/loss": [(e["step"], e["loss"]) for e in events if e["event"] == "train"],
        "train/lr": [(e["step"], e["lr"]) for e in events if e["event"] == "train"],
        "train/samples_per_s": [(e["step"], e["samples_per_s"]) for e in events if e["event"] == "train"],
        "eval/loss": [(e["step"], e["loss"]) for e in events if e["event"] == "eval"],
        "eval/accuracy": [(e["step"], e["accuracy"]) for e in events if e["event"] == "eval"],
    }
    for tag, pairs in expect.items():
        got = [(s.step, s.value) for s in acc.Scalars(tag)] if tag in tags else []
        want_pairs = [(s, float(np.float32(v))) for s, v in pairs]  # the event file stores float32
        ok = got == want_pairs and len(got) > 0
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {tag}: {len(got)} points" + ("" if ok else f"\n  got  {got[:4]}\n  want {want_pairs[:4]}"))
    steps = [s for s, _ in expect["train/loss"]]
    if steps != list(range(5, 41, 5)):
        print(f"FAIL logged steps {steps}")
        bad += 1
sys.exit(1 if bad else 0)
