"""The built-in GPT trains like PyTorch (llm.c's check): one initialisation (made by
bench/peers' PyTorch GPT, loaded into trainbox through model.init_from), the same batches,
20 AdamW steps in trainbox and in PyTorch eager, fp32 on the CPU — per-step losses within
LOSS_TOL relative and final weights within WEIGHT_TOL (of max(1, |largest weight|) per
tensor). Then the same with trainbox as 2 DDP ranks of half the batch each (dropout 0),
against the same PyTorch run; and trainbox's dist.zero_stage = 2 at 2 ranks against PyTorch's
DDP + ZeroRedundancyOptimizer(AdamW) at 2 ranks (bench/peers/zero_peer.py), per-step losses.

Tolerances (docs/testing.md): measured on an AMD EPYC VM, losses differ by at most 1.6e-7
relative (1 process 9.7e-8, 2 ranks 1.6e-7: fp32 sums in another order) and weights by at
most 6.6e-6 (a bias whose Adam denominator is near eps); the bounds leave a 6x and 4.5x margin
for other CPUs' kernels. They are tight enough to see the optimizer's arithmetic: AdamW's eps
at 2e-8 instead of 1e-8 moves the final weights by 1.8e-4 (PyTorch against itself), at 1e-7
the losses by 3.6e-6."""
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "bench", "peers"))
from models import GPT  # noqa: E402
sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)

bin_ = os.environ["TRAINBOX_BIN"]
torch.set_num_threads(1)
V, T, B, STEPS, SEED = 256, 16, 8, 20, 0
arch = dict(n_layer=2, n_head=2, n_embd=32, block_size=T, dropout=0.0, bias=True)
opt = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
HOLDOUT = 0.1
LOSS_TOL, WEIGHT_TOL = bound("gpt.parity_losses"), bound("gpt.parity_weights")
ZERO_TOL = bound("zero.vs_python_losses")
fail = 0


def check(name, ok, detail=""):
    global fail
    print(("ok   " if ok else "FAIL ") + name + (f" ({detail})" if detail else ""))
    fail |= not ok


with tempfile.TemporaryDirectory() as d:
    # --- the data: any UTF-8 text; trainbox's byte-level windows, rebuilt here ---
    text = " ".join(f"the {w} quick brown fox {i % 7} jumps over the lazy dog." for i, w in enumerate(
        ["red", "green", "blue", "old", "young"] * 60)).encode()
    corpus = os.path.join(d, "corpus.txt")
    open(corpus, "wb").write(text)
    tokens = torch.tensor(list(text), dtype=torch.int64)
    n = tokens.numel()
    n_train = n - math.floor(n * HOLDOUT + 0.5)  # text.cpp: n_val = llround(n * holdout)
    windows = (n_train - 1) // T
    order = torch.randperm(windows, generator=torch.Generator().manual_seed(SEED * 1000003 + 0 + 17))  # sampler.cpp
    assert windows >= B * STEPS, windows

    def batch(step):
        idx = order[step * B:(step + 1) * B]
        offs = idx[:, None] * T + torch.arange(T + 1)[None, :]
        w = tokens[:n_train][offs]
        return w[:, :-1], w[:, 1:]

    # --- one initialisation, from the PyTorch side ---
    torch.manual_seed(1234)
    ref = GPT(V, **arch)
    init = os.path.join(d, "init.safetensors")
    save_file({k: v.detach().clone().contiguous() for k, v in ref.state_dict().items()}, init)

    # --- PyTorch eager: 20 AdamW steps ---
    adam = torch.optim.AdamW(ref.parameters(), lr=opt["lr"], betas=opt["betas"], eps=opt["eps"],
                             weight_decay=opt["weight_decay"])
    ref.train()
    py_losses = []
    for s in range(STEPS):
        x, y = batch(s)
        loss = F.cross_entropy(ref(x).view(-1, V), y.reshape(-1))
        adam.zero_grad()
        loss.backward()
        adam.step()
        py_losses.append(loss.item())
    py_weights = {k: v.detach() for k, v in ref.state_dict().items()}

    def trainbox(run, extra):
        sets = [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in arch.items()]
        sets += ["model.name=gpt", f"model.init_from={init}", "data.dataset=text", f"data.path={corpus}",
                 f"data.text_holdout={HOLDOUT}", "optim.name=adamw", f"optim.lr={opt['lr']}",
                 f"optim.betas=[{opt['betas'][0]}, {opt['betas'][1]}]", f"optim.eps={opt['eps']}",
                 f"optim.weight_decay={opt['weight_decay']}", f"train.max_steps={STEPS}", "train.epochs=100",
                 "train.log_every=1", "train.threads=1", "train.device=cpu", f"train.seed={SEED}",
                 "output.progress=off", "output.tensorboard=false", "checkpoint.every_epochs=0",
                 "checkpoint.export_safetensors=true", "train.eval_batch_size=64", f"train.batch_size={B}"]
        args = [bin_, "train", "--run-dir", run, "--quiet"]
        for s in sets:
            args += ["--set", s]
        args += extra  # after the shared sets: its --set wins
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            print(p.stdout, p.stderr)
            return None, None
        losses = {}
        for line in open(os.path.join(run, "metrics.jsonl")):
            e = json.loads(line)
            if e["event"] == "train":
                losses[e["step"]] = e["loss"]
        return [losses.get(s + 1) for s in range(STEPS)], load_file(os.path.join(run, "model.safetensors"))

    def compare(label, losses, weights):
        if losses is None:
            check(f"{label}: trainbox ran", False)
            return
        rel = max(abs(a - b) / max(1e-12, abs(b)) for a, b in zip(losses, py_losses) if a is not None)
        check(f"{label}: {STEPS} per-step losses within {LOSS_TOL:g} relative of PyTorch", None not in losses and rel <= LOSS_TOL,
              f"max rel diff {rel:.2e}; first {losses[0]:.6f} vs {py_losses[0]:.6f}, last {losses[-1]:.6f} vs {py_losses[-1]:.6f}")
        check(f"{label}: the loss went down", losses[-1] < losses[0] - 0.1)
        missing = sorted(set(py_weights) - set(weights))
        worst = max(((weights[k] - v).abs().max().item() / max(1.0, v.abs().max().item()), k)
                    for k, v in py_weights.items() if k in weights)
        check(f"{label}: final weights within {WEIGHT_TOL:g} of PyTorch's", not missing and worst[0] <= WEIGHT_TOL,
              f"worst {worst[0]:.2e} in {worst[1]}" + (f"; missing {missing}" if missing else ""))

    compare("1 process", *trainbox(os.path.join(d, "one"), []))
    # 2 ranks x B/2: batch b of the two ranks together is batch b of one process (sampler.h).
    two = ["--nproc-per-node", "2", "--set", f"train.batch_size={B // 2}"]
    compare("2 DDP ranks", *trainbox(os.path.join(d, "two"), two))

    # --- trainbox ZeRO stage 2 against PyTorch's DDP + ZeroRedundancyOptimizer, 2 ranks each ---
    # The same init, batches and AdamW; both average the same two half-batch gradients
    # (trainbox: reduce-scatter + all-gather of flat buckets; PyTorch: allreduce, then each
    # parameter's owner steps and broadcasts it).
    starts = os.path.join(d, "starts.pt")
    torch.save(order * T, starts)
    peer = os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "bench", "peers", "zero_peer.py")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    p = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", peer, "--mode", "zero", "--steps", str(STEPS),
                        "--batch", str(B // 2), "--vocab", str(V), "--block", str(T), "--text", corpus, "--order", starts,
                        "--init", init, "--lr", str(opt["lr"]), "--betas", *map(str, opt["betas"]), "--eps", str(opt["eps"]),
                        "--weight-decay", str(opt["weight_decay"])] +
                       [f"--{k.replace('_', '-')}={v}" for k, v in arch.items() if k in ("n_layer", "n_head", "n_embd")],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    zero_losses, _ = trainbox(os.path.join(d, "zero2"), two + ["--set", "dist.zero_stage=2"])
    if p.returncode != 0 or zero_losses is None:
        check("trainbox stage 2 and PyTorch ZeroRedundancyOptimizer + DDP ran", False,
              p.stderr[:1500] + "\n...\n" + p.stderr[-800:])  # the workers' own words come first
    else:
        zl = json.loads(p.stdout.strip().splitlines()[-1])["losses"]
        rel = max(abs(a - b) / max(1e-12, abs(b)) for a, b in zip(zero_losses, zl))
        check(f"2 ranks, dist.zero_stage = 2: {STEPS} per-step losses within {ZERO_TOL:g} relative of PyTorch's "
              "ZeroRedundancyOptimizer + DDP", None not in zero_losses and len(zl) == STEPS and rel <= ZERO_TOL,
              f"max rel diff {rel:.2e}; last {zero_losses[-1]:.6f} vs {zl[-1]:.6f}")
sys.exit(1 if fail else 0)
