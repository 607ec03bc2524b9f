"""Benchmark: trainbox's LoRA against PEFT + PyTorch eager on the CPU (issue 47), same torch wheel,
same thread count on both sides. The model: a Llama of 4 layers, hidden 512, 8 query / 2 key-value
heads, intermediate 1376, vocabulary 256 (LlamaConfig + from_config, saved with save_pretrained);
LoRA r = 16, alpha 32 on q, k, v, o, gate, up, down; sequences of 256 bytes of text.

  state   model-state bytes per rank of the LoRA run with a bf16 base, and of the full fine-tune
          (fp32 AdamW), against their formulas: full 16 B/param; LoRA 2 B per base parameter
          (frozen, bf16) + 16 B per adapter parameter (fp32 weight, gradient, AdamW's two slots).
          Measured: the trainer's own count of the tensors it holds (the summary's model_state:
          parameters, gradients, optimizer state) plus the frozen base's bytes as --plan counts
          them from the built model. Goal: within 2 % of the formula.
  step    seconds per training step, LoRA with an fp32 base on both sides (this CPU has no native
          bf16 matmul), batch 4: trainbox's metrics.jsonl windows (the first left out) against
          get_peft_model + torch.optim.AdamW over the trainable parameters, eager, after warm-up.
          Ratio = PEFT / trainbox. Goal >= 1.2.
  bytes   bytes sent per step by each rank at 2 ranks (metrics.jsonl's comm), LoRA against the full
          fine-tune. Goal: the adapters' share of the parameters (plus the 8 B of the step's token count).
  plan8b  Llama-3-8B's shapes: the formula's LoRA figure (r 16 on the seven projections, bf16 base) for
          one 24 GB GPU; --plan builds the model on the device to measure its activations, which
          this 2-core CPU machine cannot do for 8 B parameters, so this row is the arithmetic only.

Prints a table and one `#json` line last.
  bench/lora_vs_peft.py [--threads N] [--build DIR] [--quick]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = dict(vocab_size=256, hidden_size=512, intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=2, max_position_embeddings=512)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R, ALPHA, BLOCK, BATCH = 16, 32, 256, 4


def adapters_of(h, heads, kv, hd, ffn, layers, r=R):
    return layers * r * ((h + heads * hd) * 2 + (h + kv * hd) * 2 + (h + ffn) * 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import transformers as T
    from peft import LoraConfig, get_peft_model
    torch.set_num_threads(a.threads)
    trainbox = os.path.join(a.build, "bin", "trainbox")
    tmp = tempfile.mkdtemp(prefix="trainbox-bench-lora-")
    torch.manual_seed(0)
    base = os.path.join(tmp, "base")
    T.AutoModelForCausalLM.from_config(T.LlamaConfig(**SHAPE), attn_implementation="eager",
                                       dtype=torch.float32).save_pretrained(base)
    text = os.path.join(tmp, "t.txt")
    with open(text, "w") as f:
        f.write(open("/usr/share/common-licenses/GPL-3").read() * 2)
    cfg = os.path.join(tmp, "cfg.toml")
    targets = ", ".join(f'"{t}"' for t in TARGETS)
    with open(cfg, "w") as f:
        f.write(f'[model]\nname = "llama"\ninit_from = "{base}"\nblock_size = {BLOCK}\nlora.r = {R}\n'
                f'lora.alpha = {ALPHA}\nlora.target_modules = [{targets}]\n[data]\ndataset = "text"\npath = "{text}"\n'
                f'text_holdout = 0.01\n[train]\nbatch_size = {BATCH}\nthreads = {a.threads}\nlog_every = 5\n'
                f'eval_batch_size = 4\n[optim]\nname = "adamw"\nlr = 0.001\n[checkpoint]\nevery_epochs = 0\n'
                f'[output]\ntensorboard = false\n')
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))

    def train(run_dir, *sets):
        cmd = [trainbox, "train", cfg, "--run-dir", run_dir, "--json", "--quiet"]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if p.returncode:
            sys.exit(f"trainbox train failed: {p.stderr[-800:]}")
        events = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))]
        return json.loads(p.stdout[p.stdout.index("{"):]), [e for e in events if e.get("event") == "train"]

    def plan(*sets):
        cmd = [trainbox, "train", cfg, "--plan", "--json"]
        for s in sets:
            cmd += ["--set", s]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900).stdout)

    rows, out = [], {"bench": "lora_vs_peft", "threads": a.threads, "torch": torch.__version__}
    hd = SHAPE["hidden_size"] // SHAPE["num_attention_heads"]
    A = adapters_of(SHAPE["hidden_size"], SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"], hd,
                    SHAPE["intermediate_size"], SHAPE["num_hidden_layers"])
    steps = 10 if a.quick else 25

    # --- state ---
    s_lora, _ = train(os.path.join(tmp, "state_lora"), "model.base_dtype=bf16", "train.max_steps=2")
    s_full, _ = train(os.path.join(tmp, "state_full"), "model.lora.r=0", "train.max_steps=2")
    frozen = plan("model.base_dtype=bf16")["per_rank"]["frozen_bytes"]
    N = s_full["model_state"]["params"] // 4
    lora_measured = s_lora["model_state_bytes"] + frozen
    lora_formula, full_formula = 2 * N + 16 * A, 16 * N
    out["state"] = {"base_params": N, "adapter_params": A, "lora_bytes": lora_measured, "lora_formula": lora_formula,
                    "full_bytes": s_full["model_state_bytes"], "full_formula": full_formula}
    rows.append(("state: LoRA bf16 base, bytes/rank", lora_measured, lora_formula, lora_measured / lora_formula, "1.00 +- 2%"))
    rows.append(("state: full fine-tune, bytes/rank", s_full["model_state_bytes"], full_formula,
                 s_full["model_state_bytes"] / full_formula, "1.00 +- 2%"))

    # --- step ---
    _, w = train(os.path.join(tmp, "step"), f"train.max_steps={steps}")
    tb = statistics.mean(x["global_batch"] / x["samples_per_s"] for x in w[1:])
    model = get_peft_model(T.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32,
                                                                  attn_implementation="eager"),
                           LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS, task_type="CAUSAL_LM"))
    model.train()
    tokens = torch.tensor(list(open(text, "rb").read()), dtype=torch.long)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def step():
        i = torch.randint(0, tokens.numel() - BLOCK - 1, (BATCH,))
        x = tokens[i[:, None] + torch.arange(BLOCK + 1)[None, :]]
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x[:, :-1], use_cache=False).logits
        torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), x[:, 1:].reshape(-1)).backward()
        opt.step()
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    peft_s = (time.perf_counter() - t0) / steps
    out["step"] = {"trainbox_s": tb, "peft_s": peft_s}
    rows.append(("step: LoRA, s/step (PEFT / trainbox)", tb, peft_s, peft_s / tb, ">= 1.2"))

    # --- bytes at 2 ranks ---
    out["bytes"] = {}
    rows_bytes = []
    for name, extra in (("lora", []), ("full", ["model.lora.r=0"])):
        d = os.path.join(tmp, f"two_{name}")
        cmd = [trainbox, "train", cfg, "--run-dir", d, "--quiet", "--nproc-per-node", "2", "--set", "train.max_steps=10",
               "--set", "train.batch_size=2"] + [x for s in extra for x in ("--set", s)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if p.returncode:
            sys.exit(f"2-rank run failed: {p.stderr[-800:]}")
        ev = [json.loads(x) for x in open(os.path.join(d, "metrics.jsonl"))]
        sent = [e["comm"]["sent_bytes_per_step"][0] for e in ev if e.get("event") == "train" and "comm" in e][-1]
        out["bytes"][name] = sent
        rows_bytes.append(sent)
    rows.append(("bytes sent/step at 2 ranks: LoRA / full", rows_bytes[0], rows_bytes[1], rows_bytes[0] / rows_bytes[1],
                 f"= {A / N:.4f} (adapters / base)"))

    # --- Llama-3-8B, the arithmetic ---
    A8 = adapters_of(4096, 32, 8, 128, 14336, 32)
    N8 = 8_030_261_248
    lora8 = 2 * N8 + 16 * A8
    out["plan8b"] = {"base_params": N8, "adapter_params": A8, "lora_state_bytes": lora8, "full_state_bytes": 16 * N8}
    rows.append(("Llama-3-8B state: LoRA r16 bf16 base (GB)", lora8 / 1e9, 16 * N8 / 1e9, lora8 / (16 * N8),
                 "fits 24 GB with activations < 7 GB"))

    print(f"# lora_vs_peft — {os.cpu_count()} CPUs, threads {a.threads}, torch {torch.__version__}")
    print(f"{'figure':<44} {'trainbox':>14} {'reference':>14} {'ratio':>8}  goal")
    for name, x, y, r, goal in rows:
        print(f"{name:<44} {x:>14.6g} {y:>14.6g} {r:>8.4f}  {goal}")
    print("#json " + json.dumps(out))


if __name__ == "__main__":
    main()
