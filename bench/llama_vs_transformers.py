"""Benchmark: trainbox's `llama` family against Hugging Face transformers on the CPU, same torch
wheel, same thread count (OMP_NUM_THREADS and torch.set_num_threads = --threads on both sides).

  train     one training step (forward, cross-entropy, backward, AdamW) of a Llama of 4 layers,
            hidden 512, 8 query / 2 key-value heads (GQA), intermediate 1376, vocabulary 256, fp32,
            sequences of 256 bytes of text, batch 8 (--quick: 2). The model is LlamaConfig +
            AutoModelForCausalLM.from_config(attn_implementation="eager") saved with
            save_pretrained; trainbox trains it with model.init_from = that folder, transformers
            loads the same folder. trainbox's step time is global_batch / samples_per_s of
            metrics.jsonl's train lines, the first window (warm-up) left out; the peers' is the
            wall time of their timed steps over their count, after warm-up steps. Peers: eager
            (what a user writes) and torch.compile(model) (warm-up includes the compilation; a
            compile that fails, or takes over 900 s (--quick: 150 s), is a skipped row with its
            reason). Ratio = peer / trainbox.
  generate  greedy decoding with the KV cache, 128 new tokens after the prompt "1 2 3 4 5" (its 9
            bytes: the model's vocabulary is bytes), no end-of-sequence stop on either side:
            `trainbox sample RUN --temperature 0` (its own "N tokens in S s: R tokens/s" line) of
            the training run's checkpoint against model.generate(do_sample=False) of the same
            weights exported with `trainbox export --format hf` (the untrained folder when that
            export fails), timed around generate() after a warm-up call. Median of the repeats.
            Ratio = trainbox tokens/s / transformers tokens/s; the JSON says whether the tokens agree.
  load      time to first step from a ~500 MB bf16 folder (hidden 1024, 16 layers, 16 / 4 heads,
            intermediate 2816, vocabulary 32000: about 246 M parameters): seconds from the process's
            start (the kernel's start time) to the end of its first optimizer step — trainbox's
            summary first_step_s of `trainbox train --set train.max_steps=1` (batch 1 x 16 tokens,
            SGD; process start, reading the folder, building the model and the data, the step)
            against the same clock in a Python process that imports torch and transformers, runs
            AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32) and one forward/backward/
            SGD step of the same batch shape. What comes after the step (trainbox's end-of-run
            evaluation and checkpoint) is not counted on either side. Median of the repeats (files
            in the page cache for both). Ratio = transformers / trainbox.

Goals: train >= 1.2x transformers eager and >= 1.0x torch.compile; generate >= 1.5x; load >= 2x.
Prints a table (one row per figure, ratios as 1.23x), then one `#json` line last (--json-only: only
the JSON object, on one line; notes go to stderr).
  bench/llama_vs_transformers.py [--quick] [--threads N] [--json-only] [--build DIR]
(bench/llama_vs_transformers.sh runs it with the checkout's .venv python.)
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "1 2 3 4 5"
ATTN = "eager"  # transformers' attention implementation on every transformers side
TRAIN_SHAPE = dict(vocab_size=256, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                   num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256)
LOAD_SHAPE = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                  num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
GOALS = {"train_eager": 1.2, "train_compile": 1.0, "generate": 1.5, "load": 2.0}


# --------------------------------------------------------------------------------------------
# Peers: the transformers side, each in its own process (`_peer KIND ...`), one JSON line out.
# --------------------------------------------------------------------------------------------
def text_tokens(path, torch):
    return torch.frombuffer(bytearray(open(path, "rb").read()), dtype=torch.uint8).long()


def peer_main(argv):
    ap = argparse.ArgumentParser(prog="llama_vs_transformers.py _peer")
    ap.add_argument("kind", choices=["train", "generate", "load"])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    t_import = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.float32, attn_implementation=ATTN)
    t_load = time.perf_counter()

    def batch():
        i = torch.randint(0, tokens.numel() - a.block - 1, (a.batch,))
        w = tokens[i[:, None] + torch.arange(a.block + 1)[None, :]]
        return w[:, :-1], w[:, 1:]

    out = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    if a.kind in ("train", "load"):
        tokens = text_tokens(a.data, torch)
        model.train()
        model.config.use_cache = False
        opt = (torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0) if a.kind == "train"
               else torch.optim.SGD(model.parameters(), lr=1e-3))
        fwd = torch.compile(model) if a.compile else model

        def step():
            x, y = batch()
            opt.zero_grad(set_to_none=True)
            logits = fwd(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss.item()

        if a.kind == "load":
            loss = step()
            t_end = time.perf_counter()
            out.update(import_s=t_import - t_start, load_s=t_load - t_import, step_s=t_end - t_load, loss=loss,
                       first_step_s=process_age_s())
        else:
            t0 = time.perf_counter()
            for _ in range(a.warmup):
                step()
            t1 = time.perf_counter()
            for _ in range(a.steps):
                loss = step()
            dt = time.perf_counter() - t1
            out.update(step_s=dt / a.steps, warmup_s=t1 - t0, steps=a.steps, warmup=a.warmup, loss=loss,
                       compile=a.compile)
    else:  # generate
        model.eval()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        ids = torch.tensor([list(PROMPT.encode())])
        kw = dict(attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=0)
        rates = []
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=8, **kw)  # warm-up
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                seq = model.generate(ids, max_new_tokens=a.tokens, **kw)
                dt = time.perf_counter() - t0
                new = seq.shape[1] - ids.shape[1]
                rates.append(new / dt)
        out.update(tokens_per_s=rates, new_tokens=new, continuation=seq[0, ids.shape[1]:].tolist())
    print(json.dumps(out), flush=True)


# --------------------------------------------------------------------------------------------
# The bench.
# --------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args):
        self.a = args
        self.trainbox = os.path.join(args.build, "bin", "trainbox")
        self.tmp = args.tmp
        self.env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        self.errors = []

    def note(self, msg):
        print(msg, file=sys.stderr if self.a.json_only else sys.stdout, flush=True)

    def run(self, cmd, timeout=None):
        """(wall seconds, CompletedProcess with bytes stdout/stderr)."""
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, env=self.env, timeout=timeout)
        return time.perf_counter() - t0, p

    def fail(self, what, cmd, p, record=True):
        """Says what failed (command, exit code, stderr's tail); record: an error of the bench (exit 1)."""
        tail = p.stderr.decode(errors="replace").strip().splitlines()[-15:]
        if record:
            self.errors.append({"figure": what, "command": " ".join(cmd), "exit": p.returncode, "stderr_tail": tail})
        self.note(f"# {what}: exit {p.returncode} from:\n#   {' '.join(cmd)}\n" + "\n".join("#   " + l for l in tail))
        return tail[-1] if tail else f"exit {p.returncode}"

    def peer(self, kind, *extra, timeout=None, optional=False):
        """(wall seconds of the process, its JSON or None, the reason when None)."""
        cmd = [sys.executable, os.path.abspath(__file__), "_peer", kind, "--threads", str(self.a.threads), *extra]
        try:
            wall, p = self.run(cmd, timeout=timeout)
        except subprocess.TimeoutExpired:
            return timeout, None, f"no result within {timeout} s"
        if p.returncode != 0:
            return wall, None, self.fail(f"transformers {kind}{' --compile' if '--compile' in extra else ''}", cmd, p,
                                         record=not optional)
        return wall, json.loads(p.stdout.decode().strip().splitlines()[-1]), None

    def tb_train(self, run_dir, *sets, timeout=None):
        cmd = [self.trainbox, "train", "--run-dir", run_dir, "--json", "--quiet",
               "--set", "model.name=llama", "--set", "data.dataset=text", "--set", f"train.threads={self.a.threads}",
               "--set", "train.device=cpu", "--set", "output.tensorboard=false", "--set", "checkpoint.every_epochs=0"]
        for s in sets:
            cmd += ["--set", s]
        wall, p = self.run(cmd, timeout=timeout)
        if p.returncode != 0:
            self.fail("trainbox train", cmd, p)
            return wall, None
        out = p.stdout.decode()
        return wall, json.loads(out[out.index("{"):])

    # ---- the models ----
    def hf_folder(self, path, shape, bf16=False):
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig
        from transformers.utils import logging
        logging.disable_progress_bar()
        torch.manual_seed(0)
        cfg = LlamaConfig(**shape, bos_token_id=None, eos_token_id=None, pad_token_id=0)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=ATTN, dtype=torch.float32)
        if bf16:
            model = model.to(torch.bfloat16)
        model.save_pretrained(path)
        n = sum(p.numel() for p in model.parameters())
        del model
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        return n, size

    # ---- 1. the training step ----
    def train(self, text, hf_dir):
        a = self.a
        batch, log_every, windows = (2, 2, 5) if a.quick else (8, 5, 5)  # trainbox: `windows` windows of log_every steps
        warmup, steps = (2, 8) if a.quick else (5, 20)                    # peers
        self.note(f"# train: batch {batch} x {a.block} tokens; trainbox {windows * log_every} steps logged every "
                  f"{log_every} (first window left out), transformers {warmup} warm-up + {steps} timed steps")
        res = {"batch": batch, "block": a.block, "attn_implementation": ATTN}
        run_dir = os.path.join(self.tmp, "train-run")
        _, s = self.tb_train(run_dir, f"model.init_from={hf_dir}", f"data.path={text}", f"model.block_size={a.block}",
                             f"train.batch_size={batch}", f"train.max_steps={windows * log_every}", "optim.name=adamw",
                             f"train.log_every={log_every}", "data.text_holdout=0.01")
        if s is not None:
            lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
            w = [x for x in lines if x.get("event") == "train"][1:]
            times = [x["global_batch"] / x["samples_per_s"] for x in w]
            res["trainbox_step_s"] = statistics.mean(times)
            res["trainbox_window_step_s"] = times
            res["trainbox_loss"] = w[-1]["loss"]
        self.run_dir = run_dir if s is not None else None
        common = ["--dir", hf_dir, "--data", text, "--batch", str(batch), "--block", str(a.block),
                  "--warmup", str(warmup), "--steps", str(steps)]
        _, e, _ = self.peer("train", *common)
        if e:
            res["eager_step_s"], res["eager_loss"] = e["step_s"], e["loss"]
        _, c, why = self.peer("train", *common, "--compile", timeout=a.compile_timeout, optional=True)
        if c:
            res["compile_step_s"], res["compile_warmup_s"] = c["step_s"], c["warmup_s"]
        else:
            res["compile_skipped"] = why
            self.note(f"# torch.compile: {why}; row skipped")
        return res

    # ---- 2. greedy generation with the KV cache ----
    def generate(self, hf_dir):
        a = self.a
        res = {"prompt": PROMPT, "new_tokens": a.tokens, "repeat": a.repeat}
        if self.run_dir is None:  # no training figure (or it failed): a one-step run for a checkpoint
            run_dir = os.path.join(self.tmp, "sample-run")
            _, s = self.tb_train(run_dir, f"model.init_from={hf_dir}", f"data.path={self.text}",
                                 f"model.block_size={a.block}", "train.batch_size=1", "train.max_steps=1",
                                 "data.text_holdout=0.01")
            if s is None:
                return res
            self.run_dir = run_dir
        # The trained weights for both sides when trainbox can export them as a transformers folder.
        exported = os.path.join(self.tmp, "trained-hf")
        cmd = [self.trainbox, "export", self.run_dir, exported, "--format", "hf"]
        _, p = self.run(cmd)
        if p.returncode == 0:
            res["same_weights"] = True
        else:
            self.fail("trainbox export --format hf (generate falls back to the untrained folder)", cmd, p)
            exported, res["same_weights"] = hf_dir, False
        rates, out = [], b""
        cmd = [self.trainbox, "sample", self.run_dir, "--prompt", PROMPT, "--tokens", str(a.tokens), "--temperature", "0"]
        for _ in range(a.repeat):
            _, p = self.run(cmd)
            m = re.search(r"(\d+) tokens in [\d.]+ s: ([\d.]+) tokens/s", p.stderr.decode(errors="replace"))
            if p.returncode != 0 or not m:
                self.fail("trainbox sample", cmd, p)
                break
            res["trainbox_tokens"] = int(m.group(1))
            res["trainbox_line"] = p.stderr.decode(errors="replace").strip().splitlines()[-1]
            rates.append(float(m.group(2)))
            out = p.stdout
        if rates:
            res["trainbox_tokens_per_s"] = statistics.median(rates)
            res["trainbox_runs"] = rates
        _, h, _ = self.peer("generate", "--dir", exported, "--data", "/dev/null", "--tokens", str(a.tokens),
                         "--repeat", str(a.repeat))
        if h:
            res["transformers_tokens_per_s"] = statistics.median(h["tokens_per_s"])
            res["transformers_runs"] = h["tokens_per_s"]
            res["transformers_tokens"] = h["new_tokens"]
            if rates and res["same_weights"]:
                ours = out[len(PROMPT.encode()):] if out.startswith(PROMPT.encode()) else out
                theirs = bytes(t for t in h["continuation"] if t < 256)
                n = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
                res["tokens_agree"] = n  # leading tokens equal (fp32 rounding may part greedy paths late)
        return res

    # ---- 3. time to first step from a ~500 MB bf16 folder ----
    def load(self, text_small):
        a = self.a
        res = {"batch": 1, "block": 16, "repeat": a.repeat}
        with tempfile.TemporaryDirectory(prefix="llama-load-", dir=self.tmp) as d:
            hf = os.path.join(d, "hf")
            t0 = time.perf_counter()
            n, size = self.hf_folder(hf, LOAD_SHAPE, bf16=True)
            res.update(params=n, folder_bytes=size)
            self.note(f"# load: {n / 1e6:.1f} M parameters, {size / 1e6:.0f} MB bf16 folder (built in "
                      f"{time.perf_counter() - t0:.0f} s); {a.repeat} run(s) a side, interleaved")
            for f in os.listdir(hf):  # both sides read it from the page cache
                with open(os.path.join(hf, f), "rb") as fh:
                    while fh.read(1 << 24):
                        pass
            ours, theirs, inner = [], [], []
            for r in range(a.repeat):
                run_dir = os.path.join(d, f"run-{r}")
                wall, s = self.tb_train(run_dir, f"model.init_from={hf}", f"data.path={text_small}", "model.block_size=16",
                                        "train.batch_size=1", "train.eval_batch_size=64", "train.max_steps=1",
                                        "optim.name=sgd", "train.log_every=1", "data.text_holdout=0.05")
                shutil.rmtree(run_dir, ignore_errors=True)
                if s is not None:
                    ours.append(s.get("first_step_s") or wall)
                    res.setdefault("trainbox_summary_wall_s", []).append(s.get("wall_s"))
                    res.setdefault("trainbox_summary_train_s", []).append(s.get("train_s"))
                wall, h, _ = self.peer("load", "--dir", hf, "--data", text_small, "--batch", "1", "--block", "16")
                if h is not None:
                    theirs.append(h.get("first_step_s") or wall)
                    inner.append(h)
                if s is None or h is None:
                    break  # a failure says its reason once
            if ours:
                res["trainbox_wall_s"] = statistics.median(ours)
                res["trainbox_runs"] = ours
            if theirs:
                res["transformers_wall_s"] = statistics.median(theirs)
                res["transformers_runs"] = theirs
                res["transformers_parts_s"] = {k: statistics.median(x[k] for x in inner)
                                               for k in ("import_s", "load_s", "step_s")}
        return res


def process_age_s():
    """Seconds since this process started, as trainbox's summary counts its first_step_s: the kernel's
    start time (/proc/self/stat field 22, clock ticks since boot) against /proc/uptime."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")


def ratio(num, den):
    return num / den if num and den else None


def main():
    if sys.argv[1:2] == ["_peer"]:
        return peer_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true",
                    help="a smaller run (batch 2, fewer steps, one repeat): a check that everything works")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for both sides (default 2)")
    ap.add_argument("--json-only", action="store_true", help="print only the JSON object (notes go to stderr)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder (default: the checkout's build/)")
    ap.add_argument("--figures", default="train,generate,load", help="which figures, comma-separated")
    a = ap.parse_args()
    a.block, a.tokens = 256, 128
    a.repeat = 1 if a.quick else 3
    a.compile_timeout = 150 if a.quick else 900  # torch.compile's warm-up on a small CPU can take minutes
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before torch is imported, here and in every child
    figures = [f for f in a.figures.split(",") if f]
    trainbox = os.path.join(a.build, "bin", "trainbox")
    if not os.access(trainbox, os.X_OK):
        sys.exit(f"no {trainbox}: build it first (make build)")

    import torch
    import transformers
    torch.set_num_threads(a.threads)
    head = (f"# llama_vs_transformers — {platform.node()}, {os.cpu_count()} CPUs, threads {a.threads}, "
            f"torch {torch.__version__}, transformers {transformers.__version__}{', --quick' if a.quick else ''}")
    with tempfile.TemporaryDirectory(prefix="llama-vs-hf-") as tmp:
        a.tmp = tmp
        b = Bench(a)
        b.note(head)
        # Text: English, a few hundred KB (the GPL repeated), and a small slice for the load figure.
        src = "/usr/share/common-licenses/GPL-3"
        body = open(src, "rb").read() if os.path.exists(src) else b"the cat sat on the mat and ran far from home. " * 800
        text, text_small = os.path.join(tmp, "text.txt"), os.path.join(tmp, "small.txt")
        with open(text, "wb") as f:
            f.write(body * max(1, 350_000 // len(body)))
        with open(text_small, "wb") as f:
            f.write(body[:8192])
        b.text = text
        hf_dir = os.path.join(tmp, "llama-hf")
        n, size = b.hf_folder(hf_dir, TRAIN_SHAPE)
        b.note(f"# model: Llama {TRAIN_SHAPE['num_hidden_layers']} layers x {TRAIN_SHAPE['hidden_size']}, "
               f"{TRAIN_SHAPE['num_attention_heads']}/{TRAIN_SHAPE['num_key_value_heads']} heads, "
               f"intermediate {TRAIN_SHAPE['intermediate_size']}, vocab {TRAIN_SHAPE['vocab_size']}: "
               f"{n / 1e6:.2f} M parameters, fp32, attn_implementation={ATTN}")
        out = {"bench": "llama_vs_transformers", "threads": a.threads, "quick": a.quick, "torch": torch.__version__,
               "transformers": transformers.__version__, "model_params": n}
        b.run_dir = None
        if "train" in figures:
            out["train"] = b.train(text, hf_dir)
        if "generate" in figures:
            out["generate"] = b.generate(hf_dir)
        if "load" in figures:
            out["load"] = b.load(text_small)

    # ---- the table ----
    t, g, l = out.get("train", {}), out.get("generate", {}), out.get("load", {})
    rows = [  # name, trainbox, peer, unit, ratio (better = higher), goal key
        ("train-eager", t.get("trainbox_step_s"), t.get("eager_step_s"), "s/step",
         ratio(t.get("eager_step_s"), t.get("trainbox_step_s")), "train_eager"),
        ("train-compile", t.get("trainbox_step_s"), t.get("compile_step_s"), "s/step",
         ratio(t.get("compile_step_s"), t.get("trainbox_step_s")), "train_compile"),
        ("generate", g.get("trainbox_tokens_per_s"), g.get("transformers_tokens_per_s"), "tokens/s",
         ratio(g.get("trainbox_tokens_per_s"), g.get("transformers_tokens_per_s")), "generate"),
        ("load", l.get("trainbox_wall_s"), l.get("transformers_wall_s"), "s",
         ratio(l.get("transformers_wall_s"), l.get("trainbox_wall_s")), "load"),
    ]
    ratios = {}
    if not a.json_only:
        print(f"{'figure':<14} {'trainbox':>10} {'transformers':>13} {'unit':<9} {'ratio':>8} {'goal':>7}  met")
    for name, ours, theirs, unit, r, goal in rows:
        if name.split("-")[0] not in figures:
            continue
        ratios[goal] = r
        if a.json_only:
            continue
        fmt = lambda v: f"{v:.3f}" if isinstance(v, float) and v < 10 else (f"{v:.1f}" if v else "-")
        if name == "train-compile" and "compile_skipped" in t:
            print(f"{name:<14} {fmt(ours):>10} {'-':>13} {unit:<9} {'-':>8} {GOALS[goal]:6.1f}x  skipped: "
                  f"{t['compile_skipped'][:80]}")
            continue
        met = "-" if r is None else ("yes" if r >= GOALS[goal] else "no")
        print(f"{name:<14} {fmt(ours):>10} {fmt(theirs):>13} {unit:<9} "
              f"{(f'{r:7.2f}x' if r else '-'):>8} {GOALS[goal]:6.1f}x  {met}")
    out["ratios"] = ratios
    out["goals"] = GOALS
    out["errors"] = b.errors
    if not a.json_only:
        print("# ratios: train = transformers step time / trainbox's; generate = trainbox tokens/s / transformers'; "
              "load = transformers' seconds from process start to the end of its first step / trainbox's")
        print("#json " + json.dumps(out))
    else:
        print(json.dumps(out))
    return 1 if b.errors else 0  # a failed side (named above, and in "errors") fails the bench


if __name__ == "__main__":
    sys.exit(main())
