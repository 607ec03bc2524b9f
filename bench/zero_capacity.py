"""Benchmark: what sharding buys in memory (issue 35), 4 ranks on CPU over Gloo, fp32 AdamW.

  state     model-state bytes per rank of a GPT of 12 layers x 768 (about 85 M parameters) at
            dist.zero_stage 0, 1, 2 and 3, from the trainer's own accounting (the summary's
            model_state_bytes), against the formula 16 / 4+4+8/N / 4+12/N / 16/N bytes per parameter;
  capacity  the largest GPT width (n_layer LAYERS, 8 heads, widths in steps of 64) whose run of 2
            steps keeps every rank's peak RSS (VmHWM, the summary's memory.rank_peak_rss_bytes:
            start-up, the steps, evaluation and the final checkpoint included) within BUDGET:
            plain DDP against stage 3 with model.activation_checkpointing = "blocks", and the ratio
            of their parameter counts.
Each run is `trainbox train --nproc-per-node 4` (1 thread a rank) on a generated text file,
batch 1 x context 64 a rank. Prints rows as they are measured and one `#json` line.
  bench/zero_capacity.py [BUILD]     BUDGET=2GiB LAYERS=16 PARTS="state capacity" WORLD=4
"""
import json
import os
import random
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build")
trainbox = os.path.join(build, "bin", "trainbox")
world = int(os.environ.get("WORLD", "4"))
layers = int(os.environ.get("LAYERS", "16"))
parts = os.environ.get("PARTS", "state capacity").split()
units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
budget_text = os.environ.get("BUDGET", "2GiB")
budget = int(float(budget_text[:-3]) * units[budget_text[-3:]]) if budget_text[-3:] in units else int(budget_text)
tmp = tempfile.mkdtemp(prefix="zero-capacity-")
text = os.path.join(tmp, "t.txt")
random.seed(1)
words = "the cat sat on a mat and ran far from home to the sea".split()
with open(text, "w") as f:
    f.write(" ".join(random.choice(words) for _ in range(40000)))


def run(width, n_layer, stage, checkpointing, may_fail=False):
    """One 2-step job: its summary (rank 0's JSON); None when it failed and may_fail (a rank the
    kernel killed for memory: over the budget)."""
    run_dir = os.path.join(tmp, f"run-{width}-{n_layer}-{stage}-{checkpointing}")
    cmd = [trainbox, "train", "--nproc-per-node", str(world), "--json", "--quiet", "--run-dir", run_dir,
           "--set", "model.name=gpt", "--set", "data.dataset=text", "--set", f"data.path={text}",
           "--set", "data.text_holdout=0.01", "--set", f"model.n_layer={n_layer}", "--set", "model.n_head=8",
           "--set", f"model.n_embd={width}", "--set", "model.block_size=64", "--set", "train.batch_size=1",
           "--set", "train.eval_batch_size=1", "--set", "train.max_steps=2", "--set", "optim.name=adamw",
           "--set", "train.threads=1", "--set", "train.device=cpu", "--set", "output.tensorboard=false",
           "--set", f"dist.zero_stage={stage}", "--set", f"model.activation_checkpointing={checkpointing}"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    subprocess.run(["rm", "-rf", run_dir])
    if p.returncode != 0:
        if may_fail:
            return None
        sys.exit(f"zero_capacity: width {width}, stage {stage} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout[p.stdout.index("{"):])


def gpt_params(width, n_layer, vocab=256, block=64):
    # nanoGPT with biases and tied weights: per block 12 w^2 + 13 w; embeddings, ln_f.
    return n_layer * (12 * width * width + 13 * width) + vocab * width + block * width + 2 * width


def formula(stage, n):
    return {0: 16.0, 1: 4 + 4 + 8 / n, 2: 4 + 12 / n, 3: 16 / n}[stage]


out = {"bench": "zero_capacity", "world": world, "backend": "gloo"}
if "state" in parts:
    width, n_layer = 768, 12
    psi = gpt_params(width, n_layer)
    print(f"# model state per rank: GPT {n_layer} x {width} ({psi / 1e6:.1f} M parameters), {world} ranks, fp32 AdamW")
    rows = {}
    for stage in (0, 1, 2, 3):
        s = run(width, n_layer, stage, "none")
        if stage == 0:
            psi = s["model_state"]["params"] // 4  # the model's own count
        per = s["model_state_bytes"] / psi
        off = per / formula(stage, world) - 1
        rows[stage] = {"bytes": s["model_state_bytes"], "bytes_per_param": per, "formula": formula(stage, world),
                       "off": off, "peak_rss": max(s["memory"]["rank_peak_rss_bytes"])}
        print(f"stage {stage}: {s['model_state_bytes']:>12,} B per rank = {per:6.3f} B/param (formula "
              f"{formula(stage, world):.3f}: {100 * off:+.2f} %); peak RSS {rows[stage]['peak_rss'] / 2**20:,.0f} MiB",
              flush=True)
    out["state"] = {"params": psi, "stages": rows}

if "capacity" in parts:
    print(f"# capacity: the widest GPT ({layers} layers, 8 heads, widths of 64) whose every rank stays within "
          f"{budget / 2**30:.2f} GiB peak RSS, {world} ranks")
    found = {}
    base = 400 << 20  # the process without tensors (code, libraries), about
    for label, stage, ckpt in (("plain DDP", 0, "none"), ("stage 3 + activation checkpointing", 3, "blocks")):
        peaks = {}

        def fits(w):
            s = run(w, layers, stage, ckpt, may_fail=True)
            peaks[w] = max(s["memory"]["rank_peak_rss_bytes"]) if s else None
            print(f"  {label}: width {w:5d} ({gpt_params(w, layers) / 1e6:7.1f} M params): peak RSS "
                  + (f"{peaks[w] / 2**20:7.0f} MiB {'fits' if peaks[w] <= budget else 'over'}" if s else
                     "- (a rank was killed: over)"), flush=True)
            return s is not None and peaks[w] <= budget
        # The model state alone (the formula) bounds the search from above: widths whose state
        # would take 1.25x the budget are over without being run (4 ranks of them would not fit
        # this machine's memory either).
        lo, hi = 64, 64
        while base + formula(stage, world) * gpt_params(hi + 64, layers) <= 1.25 * budget:
            hi += 64
        hi += 64
        while hi - lo > 64:
            mid = (lo + hi) // 2 // 64 * 64
            if fits(mid):
                lo = mid
            else:
                hi = mid
        found[stage] = {"width": lo, "params": gpt_params(lo, layers), "peak_rss": peaks.get(lo)}
        print(f"{label}: width {lo}, {gpt_params(lo, layers) / 1e6:.1f} M parameters", flush=True)
    ratio = found[3]["params"] / found[0]["params"]
    print(f"stage 3 + activation checkpointing trains {ratio:.2f}x the parameters of plain DDP within "
          f"{budget / 2**30:.2f} GiB a rank")
    out["capacity"] = {"budget_bytes": budget, "layers": layers, "plain": found[0], "stage3_ckpt": found[3],
                       "ratio": ratio}
subprocess.run(["rm", "-rf", tmp])
print("#json " + json.dumps(out))
