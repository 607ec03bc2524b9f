"""Checks an elastic job's run dir against an uninterrupted run (tests/integration/elastic.sh,
netns_elastic.sh).

    elastic_check.py losses REF_RUN_DIR RUN_DIR TOL
        every optimizer step's loss (the last logged, after a resume re-did it) equals the
        reference's within TOL relative (of max(1, |loss|)), and the run has every step.
    elastic_check.py samples RUN_DIR SAMPLES_PER_EPOCH
        debug.sample_log's records: for every (epoch, step) the latest attempt that trained it
        stands (a restart re-trains the steps after its checkpoint); over its ranks, every
        epoch holds each of SAMPLES_PER_EPOCH distinct samples exactly once.
Prints one line of figures; exits 1 with the first difference.
"""
import collections
import glob
import json
import os
import re
import sys


def losses(run_dir):
    seen = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e["event"] == "train":
                seen[e["step"]] = e["loss"]
    return seen


def check_losses(ref_dir, run_dir, tol):
    a, b = losses(ref_dir), losses(run_dir)
    if sorted(a) != sorted(b):
        sys.exit(f"steps differ: reference {len(a)} steps, elastic run {len(b)} "
                 f"(missing {sorted(set(a) - set(b))[:5]}, extra {sorted(set(b) - set(a))[:5]})")
    worst_step, worst = max(((s, abs(a[s] - b[s]) / max(1.0, abs(a[s]))) for s in a), key=lambda x: x[1])
    print(f"#    {len(a)} steps, largest loss difference {worst:.2e} at step {worst_step} (tolerance {tol:g})")
    if worst > tol:
        sys.exit(f"step {worst_step}: loss {b[worst_step]!r}, the uninterrupted run's {a[worst_step]!r}")


def check_samples(run_dir, per_epoch):
    # (epoch, step) -> the attempt that trained it last -> its micro-batches' samples
    by_step = collections.defaultdict(lambda: collections.defaultdict(list))
    worlds = set()
    files = glob.glob(os.path.join(run_dir, "samples", "attempt_*_rank_*.jsonl"))
    if not files:
        sys.exit(f"no sample logs in {run_dir}/samples")
    for path in files:
        attempt = int(re.search(r"attempt_(\d+)_rank_", path).group(1))
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                by_step[(r["epoch"], r["step"])][attempt].extend(r["samples"])
                worlds.add(r["world"])
    epochs = collections.defaultdict(list)
    for (epoch, _), attempts in by_step.items():
        epochs[epoch].extend(attempts[max(attempts)])
    for epoch in sorted(epochs):
        seen = collections.Counter(epochs[epoch])
        twice = [s for s, n in seen.items() if n > 1]
        if twice or len(seen) != per_epoch:
            sys.exit(f"epoch {epoch}: {len(seen)} distinct samples of {per_epoch}, "
                     f"{len(twice)} seen more than once (e.g. {twice[:5]})")
    print(f"#    {len(epochs)} epochs x {per_epoch} samples, each exactly once; world sizes {sorted(worlds)}")


if __name__ == "__main__":
    if sys.argv[1] == "losses":
        check_losses(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif sys.argv[1] == "samples":
        check_samples(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
