"""Mixtures of experts against transformers itself (issue 48), in llm.c's "debug state" style.

Tiny random MixtralForCausalLM and Qwen3MoeForCausalLM folders, built by transformers' config classes
and saved with save_pretrained (per-expert tensors on disk), go through tests/integration/llama_probe.cpp.
transformers (eager, fp32, output_router_logits=True) computes the same ids:
  1. logits within the llama family's bound;
  2. the load-balancing loss (coefficient applied) equal, and the loss with it;
  3. every parameter's gradient (router and experts included), per tensor;
  4. the losses of 10 AdamW steps, each with its load-balancing term;
  5. greedy generation with and without trainbox's KV cache = generate(do_sample=False).
Then `trainbox train` on text from the Mixtral folder: metrics.jsonl's tokens per expert sum to the
tokens routed (tokens x top-k per layer); export --format hf loads strictly as MixtralForCausalLM and
gives trainbox's logits. A router rigged so two of four experts never receive a token: one rank and two
ranks (data parallel, those experts' parameters without gradients) take the same steps, the counts show
the empty experts, and the collapse warning names the layer. Bad input: one line, exit 2, nothing written."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)

probe, logits_bin = sys.argv[1], sys.argv[2]
trainbox = os.environ["TRAINBOX_BIN"]
bad = 0


def check(ok, what, detail=""):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok and detail:
        print(f"     {detail}", flush=True)


try:
    import transformers as T
except ImportError as e:
    print(f"skip: transformers is not installed ({e}); install deps/requirements-tools.txt into the venv")
    sys.exit(77)

V = 256
BASE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
            router_aux_loss_coef=0.02, output_router_logits=True)
FAMILIES = {
    "mixtral": (T.MixtralConfig, dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=16)),
    "qwen3_moe": (T.Qwen3MoeConfig, dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                                         norm_topk_prob=False, head_dim=32)),
    "qwen3_moe_norm": (T.Qwen3MoeConfig, dict(num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32,
                                              norm_topk_prob=True)),
}
COEF = BASE["router_aux_loss_coef"]


def build(d, family, router=None):
    """A random folder; the routers' weights scaled up so that the top-k choices are decided by clear
    margins (HF's init of normal(0, 0.02) leaves near-ties that fp32 rounding could flip)."""
    cls, extra = FAMILIES[family]
    torch.manual_seed(sum(map(ord, family)))
    m = T.AutoModelForCausalLM.from_config(cls(**BASE, **extra), attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        for name, t in m.named_parameters():
            if "norm" in name:
                t.add_(0.1 * torch.randn_like(t))
            if name.endswith("gate.weight"):
                t.mul_(20)
                if router:
                    router(t)
    path = os.path.join(d, family + ("_rigged" if router else ""))
    m.save_pretrained(path)
    return T.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager"), path


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def shifted(logits, x):
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))


def hf_loss(m, x):
    out = m(x, output_router_logits=True)
    return shifted(out.logits, x) + COEF * out.aux_loss, out.aux_loss


def run_probe(d, folder, inputs, what):
    save_file(inputs, os.path.join(d, f"in_{what}.safetensors"))
    out = os.path.join(d, f"out_{what}.safetensors")
    p = subprocess.run([probe, folder, os.path.join(d, f"in_{what}.safetensors"), out], capture_output=True, text=True)
    if p.returncode != 0:
        check(False, f"{what}: llama_probe exit {p.returncode}: {p.stderr.strip()}")
        return None
    return load_file(out)


def family_parity(d, family):
    m, path = build(d, family)
    torch.manual_seed(1)
    x = torch.randint(V, (2, 40))
    prompt = torch.randint(V, (5,))
    ours = run_probe(d, path, {"x": x, "prompt": prompt, "new_tokens": torch.tensor([32])}, family)
    if ours is None:
        return
    m.eval()
    with torch.no_grad():
        logits = m(x).logits
    m.train()
    m.zero_grad()
    loss, aux = hf_loss(m, x)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    e = rel(ours["logits"], logits)
    check(e <= bound("llama.hf_logits"), f"{family}: logits, max |diff| / max |logit| {e:.1e}")
    ea = abs(ours["aux_loss"].item() - COEF * aux.item()) / (COEF * aux.item())
    check(ea <= bound("moe.hf_aux_loss"),
          f"{family}: load-balancing loss {ours['aux_loss'].item() / COEF:.6f} vs transformers' {aux.item():.6f} "
          f"(relative {ea:.1e})")
    el = abs(ours["loss"].item() - loss.item()) / abs(loss.item())
    check(el <= bound("llama.hf_logits"), f"{family}: loss with the balancing term, relative {el:.1e}")
    # transformers 5 fuses the experts in memory (experts.gate_up_proj [E, 2I, H], experts.down_proj):
    # trainbox keeps them per expert as on disk; compare through the fused layout
    ours_g = {k[5:]: v for k, v in ours.items() if k.startswith("grad.")}
    mixtral = family.startswith("mixtral")
    fused = {}
    for n, g in grads.items():
        if mixtral:  # transformers 5 names Mixtral's block "mlp" in memory, "block_sparse_moe" on disk
            n_disk = n.replace(".mlp.", ".block_sparse_moe.")
        else:
            n_disk = n
        if ".experts." in n:
            layer = n_disk.rsplit(".experts.", 1)[0]
            E = g.size(0)
            names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
            try:
                if n.endswith("gate_up_proj"):
                    fused[n] = torch.stack([torch.cat([ours_g[f"{layer}.experts.{k}.{names[0]}.weight"],
                                                       ours_g[f"{layer}.experts.{k}.{names[1]}.weight"]]) for k in range(E)])
                else:
                    fused[n] = torch.stack([ours_g[f"{layer}.experts.{k}.{names[2]}.weight"] for k in range(E)])
            except KeyError as missing:
                check(False, f"{family}: trainbox has no gradient {missing} (an expert's, under the disk layout)")
                return
        else:
            fused[n] = ours_g.get(n_disk)
    missing = [n for n, g in fused.items() if g is None]
    check(not missing, f"{family}: every transformers parameter has trainbox's gradient", f"missing: {missing[:4]}")
    if missing:
        return
    floor = 1e-4 * max(g.abs().max().item() for g in grads.values())
    eg = max(((fused[n] - g).abs().max() / max(g.abs().max().item(), floor)).item() for n, g in grads.items())
    router_g = [n for n in grads if n.endswith("gate.weight")]
    check(eg <= bound("llama.hf_grads") and all(grads[n].abs().max() > 0 for n in router_g),
          f"{family}: every gradient (routers and experts too) within {eg:.1e} of max |grad| per tensor")
    state = {k: v.clone() for k, v in m.state_dict().items()}
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        l, _ = hf_loss(m, x)
        losses.append(l.item())
        l.backward()
        opt.step()
    losses = torch.tensor(losses)
    e10 = ((ours["adam_losses"] - losses).abs() / losses.abs()).max().item()
    check(e10 <= bound("llama.hf_adamw_losses"),
          f"{family}: 10 AdamW steps with the balancing term, worst relative difference {e10:.1e} "
          f"({losses[0]:.4f} -> {losses[-1]:.4f})")
    m.load_state_dict(state)
    m.eval()
    m.config.output_router_logits = False  # transformers' generate cannot compute the loss on a cache step
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    with torch.no_grad():
        gen = m.generate(prompt[None], max_new_tokens=32, do_sample=False)[0]
    check(torch.equal(ours["gen_cache"], gen) and torch.equal(ours["gen_nocache"], gen),
          f"{family}: greedy 32 tokens = generate(do_sample=False), with and without the KV cache")


def run(args, env=None, timeout=240):
    return subprocess.run([trainbox, *args], capture_output=True, text=True, timeout=timeout, env=env)


def train_lines(run_dir):
    return [e for e in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl"))) if e["event"] == "train"]


TEXT = ("mixtures of experts route each token to a few of many feed-forward networks. " * 120)


def train_args(path, text, run_dir, *extra):
    return ["train", "--set", "model.name=llama", "--set", f"model.init_from={path}", "--set", "data.dataset=text",
            "--set", f"data.path={text}", "--set", "model.block_size=16", "--set", "train.batch_size=4",
            "--set", "train.max_steps=4", "--set", "train.epochs=1", "--set", "train.log_every=2",
            "--set", "optim.name=adamw", "--set", "optim.lr=1e-3", "--set", "train.threads=1",
            "--set", "data.val_fraction=0", "--run-dir", run_dir, *extra]


def train_and_export(d):
    _, path = build(d, "mixtral")
    text = os.path.join(d, "text.txt")
    open(text, "w").write(TEXT)
    run_dir = os.path.join(d, "run_mixtral")
    p = run(train_args(path, text, run_dir))
    check(p.returncode == 0, f"trainbox train from a Mixtral folder: exit {p.returncode}", p.stderr[-600:])
    if p.returncode != 0:
        return
    check("a mixture of 4 experts in every layer, 2 per token" in p.stderr,
          "the start-up says the experts and the routing", p.stderr[:800])
    lines = train_lines(run_dir)
    routed = [l["moe"]["tokens"] for l in lines if "moe" in l]
    # 2 steps a window x batch 4 x 16 positions, each token to 2 experts, in each of 2 layers
    check(len(routed) == 2 and all(len(w) == 2 and all(sum(layer) == 2 * 4 * 16 * 2 for layer in w) for w in routed),
          "metrics.jsonl: each layer's tokens per expert sum to the tokens routed (2 steps x 4 x 16 x top-2)",
          f"{routed}")
    imb = [l["moe"]["imbalance_max"] for l in lines if "moe" in l]
    check(all(v >= 1.0 for v in imb), f"metrics.jsonl: the load imbalance max/mean per window {imb}")
    part = os.path.join(d, "run_part")
    p = run(train_args(path, text, part)[:-2] + ["--run-dir", part, "--set", "train.max_steps=2"])
    if p.returncode == 0:
        p = run(["train", "--run-dir", part, "--resume", "auto", "--set", "train.max_steps=4"])
    got = [l["loss"] for l in train_lines(part)] if p.returncode == 0 else []
    check(got == [l["loss"] for l in lines] and len(got) == 2,
          "stop at 2 + resume = the uninterrupted run's losses, exactly", f"{got} vs {[l['loss'] for l in lines]}; "
          f"{p.stderr[-300:]}")
    p = run(train_args(path, text, os.path.join(d, "plan"))[:-2] + ["--plan"])
    check(p.returncode == 0 and "activations" in p.stdout and "blocks" not in p.stdout,
          "--plan measures the MoE's step and offers no activation checkpointing", p.stdout[-400:] + p.stderr[-300:])
    out = os.path.join(d, "exported")
    p = run(["export", run_dir, out, "--format", "hf"])
    check(p.returncode == 0, f"trainbox export --format hf of the Mixtral run: exit {p.returncode}", p.stderr[-400:])
    if p.returncode != 0:
        return
    m, info = T.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                                     output_loading_info=True)
    clean = not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    check(type(m).__name__ == "MixtralForCausalLM" and clean, f"from_pretrained(exported): {type(m).__name__}",
          f"{info}")
    torch.manual_seed(3)
    x = torch.randint(V, (2, 16))
    save_file({"x": x}, os.path.join(d, "x.safetensors"))
    p = subprocess.run([logits_bin, os.path.join(run_dir, "checkpoints", "latest"), os.path.join(d, "x.safetensors"),
                        os.path.join(d, "y.safetensors")], capture_output=True, text=True)
    check(p.returncode == 0, f"trainbox logits of the trained checkpoint: exit {p.returncode}", p.stderr[-300:])
    if p.returncode == 0:
        with torch.no_grad():
            ref = m.eval()(x).logits
        e = rel(load_file(os.path.join(d, "y.safetensors"))["logits"], ref)
        check(e <= bound("llama.hf_logits"), f"transformers on the exported Mixtral gives trainbox's logits: {e:.1e}")
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg.get("num_local_experts") == 4 and cfg.get("num_experts_per_tok") == 2 and
          cfg.get("router_aux_loss_coef") == COEF, "config.json written back with the experts and the routing",
          f"{cfg}")


def rig(t):
    """Top-1 of 4 with rows u, -u, 0, 0: one of experts 0 and 1 always wins; 2 and 3 never receive a token."""
    u = t[0].clone()
    t.zero_()
    t[0] = u
    t[1] = -u


def uneven_routing(d):
    cls, extra = FAMILIES["mixtral"]
    FAMILIES["mixtral_top1"] = (cls, dict(extra, num_experts_per_tok=1))
    _, path = build(d, "mixtral_top1", router=rig)
    text = os.path.join(d, "text.txt")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    one, two = os.path.join(d, "rig_one"), os.path.join(d, "rig_two")
    common = ["--set", "model.moe.aux_loss=false", "--set", "model.moe.collapse_share=0.4"]
    p1 = run(train_args(path, text, one, *common), env=env)
    check(p1.returncode == 0, f"rigged router, 1 rank x batch 4: exit {p1.returncode}", p1.stderr[-600:])
    p2 = run(train_args(path, text, two, *common, "--nproc-per-node", "2", "--set", "train.batch_size=2"), env=env)
    check(p2.returncode == 0, f"rigged router, 2 ranks x batch 2 (experts 2 and 3 get no gradient): exit "
          f"{p2.returncode}", p2.stderr[-600:])
    if p1.returncode or p2.returncode:
        return
    a, b = train_lines(one), train_lines(two)
    worst = max((abs(x["loss"] - y["loss"]) for x, y in zip(a, b)), default=float("inf"))
    check(len(a) == len(b) == 2 and worst <= bound("moe.ranks_losses"), f"1 rank and 2 ranks: the same losses (largest difference "
          f"{worst:.1e})", f"{[x['loss'] for x in a]} vs {[y['loss'] for y in b]}")
    ta, tb = [x["moe"]["tokens"] for x in a], [y["moe"]["tokens"] for y in b]
    check(ta == tb and all(layer[2] == layer[3] == 0 and layer[0] + layer[1] == 2 * 4 * 16 for w in ta for layer in w),
          "tokens per expert: the same at 1 and 2 ranks (summed over the ranks), experts 2 and 3 none", f"{ta} vs {tb}")
    check("layer 0's router sent" in p1.stderr and "collapsing" in p1.stderr,
          "the collapse warning names the layer (model.moe.collapse_share = 0.4)", p1.stderr[-600:])


def bad_input(d):
    text = os.path.join(d, "text.txt")
    scratch = ["train", "--set", "model.name=llama", "--set", "model.n_layer=1", "--set", "model.n_embd=32",
               "--set", "model.n_head=2", "--set", "data.dataset=text", "--set", f"data.path={text}",
               "--set", "model.block_size=16", "--set", "train.max_steps=1"]

    def refused(what, args, needle):
        rd = os.path.join(d, "bad_" + what.replace(" ", "_")[:24])
        p = run([*args, "--run-dir", rd])
        err = p.stderr.strip()
        said = [line for line in err.splitlines() if "error:" in line]
        check(p.returncode == 2 and needle in err and len(said) == 1 and
              not os.path.exists(os.path.join(rd, "checkpoints")),
              f"{what}: exit {p.returncode}, '{said[0] if said else ''}'", err[-400:])

    refused("top_k above the experts", [*scratch, "--set", "model.moe.experts=4", "--set", "model.moe.top_k=5"],
            "model.moe.top_k = 5 is larger than model.moe.experts = 4")
    refused("MoE with ZeRO 3", [*scratch, "--set", "model.moe.experts=4", "--set", "dist.zero_stage=3"],
            "dist.zero_stage = 3 with a mixture of experts")
    refused("MoE with checkpointing", [*scratch, "--set", "model.moe.experts=4",
                                       "--set", "model.activation_checkpointing=blocks"], "activation_checkpointing")
    refused("experts on a gpt", [*scratch, "--set", "model.name=gpt", "--set", "model.moe.experts=4"],
            "not model.name = \"gpt\"")
    _, path = build(d, "qwen3_moe")
    jitter = os.path.join(d, "jitter")
    shutil.copytree(os.path.join(d, "mixtral"), jitter)
    cfg = json.load(open(os.path.join(jitter, "config.json")))
    cfg["router_jitter_noise"] = 0.1
    json.dump(cfg, open(os.path.join(jitter, "config.json"), "w"))
    refused("router jitter", train_args(jitter, text, os.path.join(d, "x"))[:-2], "router_jitter_noise 0.1")
    fewer = os.path.join(d, "fewer")
    shutil.copytree(path, fewer)
    cfg = json.load(open(os.path.join(fewer, "config.json")))
    cfg["num_local_experts"] = 3
    cfg.pop("num_experts", None)
    json.dump(cfg, open(os.path.join(fewer, "config.json"), "w"))
    refused("3 experts in config.json, 4 in the weights", train_args(fewer, text, os.path.join(d, "x"))[:-2],
            "mlp.experts.3")


def main():
    d = tempfile.mkdtemp(prefix="trainbox-moe-")
    try:
        for family in ("mixtral", "qwen3_moe", "qwen3_moe_norm"):
            family_parity(d, family)
        train_and_export(d)
        uneven_routing(d)
        bad_input(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"{'FAILED' if bad else 'passed'}: {bad} check(s) failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
