"""Benchmark: a mixture-of-experts training step, trainbox against transformers + torch.optim.AdamW on the
CPU (issue 48), same torch wheel, same thread count on both sides. The model: a Mixtral of 4 layers, hidden
512, 8 query / 2 key-value heads, 8 experts of width 1024, top-2, vocabulary 256 (MixtralConfig +
from_config, saved with save_pretrained); the load-balancing loss on (coefficient 0.001) on both sides;
batch 4 of 256 bytes of text.

  step    seconds per training step: trainbox's metrics.jsonl windows (the first left out) against
          MixtralForCausalLM (eager attention, output_router_logits=True, its experts as transformers
          5 runs them by default) + torch.optim.AdamW, after warm-up. Ratio = transformers / trainbox.
          Goal >= 2.
  ep      expert parallelism (EP = 2 vs EP = 1): not built yet, reported as such.

Prints a table and one `#json` line last.
  bench/moe_vs_transformers.py [--threads N] [--build DIR] [--quick]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = dict(vocab_size=256, hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=2, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=512,
             router_aux_loss_coef=0.001)
BLOCK, BATCH = 256, 4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import transformers as T
    torch.set_num_threads(a.threads)
    trainbox = os.path.join(a.build, "bin", "trainbox")
    tmp = tempfile.mkdtemp(prefix="trainbox-bench-moe-")
    torch.manual_seed(0)
    base = os.path.join(tmp, "base")
    T.AutoModelForCausalLM.from_config(T.MixtralConfig(**SHAPE), attn_implementation="eager",
                                       dtype=torch.float32).save_pretrained(base)
    text = os.path.join(tmp, "t.txt")
    with open(text, "w") as f:
        f.write(open("/usr/share/common-licenses/GPL-3").read() * 2)
    steps = 8 if a.quick else 20
    cfg = os.path.join(tmp, "cfg.toml")
    with open(cfg, "w") as f:
        f.write(f'[model]\nname = "llama"\ninit_from = "{base}"\nblock_size = {BLOCK}\n[data]\ndataset = "text"\n'
                f'path = "{text}"\ntext_holdout = 0.01\n[train]\nbatch_size = {BATCH}\nthreads = {a.threads}\n'
                f'log_every = 4\nmax_steps = {steps}\neval_batch_size = 4\n[optim]\nname = "adamw"\nlr = 0.001\n'
                f'[checkpoint]\nevery_epochs = 0\n[output]\ntensorboard = false\n')
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    run_dir = os.path.join(tmp, "run")
    p = subprocess.run([trainbox, "train", cfg, "--run-dir", run_dir, "--quiet"], capture_output=True, text=True,
                       env=env, timeout=3600)
    if p.returncode:
        sys.exit(f"trainbox train failed: {p.stderr[-800:]}")
    w = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
    w = [e for e in w if e.get("event") == "train"]
    tb = statistics.mean(x["global_batch"] / x["samples_per_s"] for x in w[1:])

    model = T.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    model.train()
    tokens = torch.tensor(list(open(text, "rb").read()), dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        i = torch.randint(0, tokens.numel() - BLOCK - 1, (BATCH,))
        x = tokens[i[:, None] + torch.arange(BLOCK + 1)[None, :]]
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=x[:, :-1], use_cache=False, output_router_logits=True)
        loss = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, 256), x[:, 1:].reshape(-1))
        (loss + SHAPE["router_aux_loss_coef"] * out.aux_loss).backward()
        opt.step()
    for _ in range(2):
        step()
    t0 = time.perf_counter()
    n = max(4, steps // 2)
    for _ in range(n):
        step()
    hf_s = (time.perf_counter() - t0) / n
    out = {"bench": "moe_vs_transformers", "threads": a.threads, "torch": torch.__version__,
           "transformers": T.__version__, "step": {"trainbox_s": tb, "transformers_s": hf_s, "ratio": hf_s / tb},
           "ep": "not built"}
    print(f"{'figure':44s} {'trainbox':>10s} {'reference':>10s} {'ratio':>7s}  goal")
    print(f"{'step: Mixtral 8x top-2, 4 x 512, s/step':44s} {tb:10.3f} {hf_s:10.3f} {hf_s / tb:7.2f}  >= 2")
    print(f"{'EP = 2 vs EP = 1':44s} {'not built':>10s}")
    print("#json " + json.dumps(out))


if __name__ == "__main__":
    main()
