"""LoRA against PEFT itself (issue 47): the same adapters give the same numbers, and the files go both ways.

A tiny random Llama (GQA) is built by transformers and saved with save_pretrained (no download).
  1. PEFT adapters with non-zero B (plain LoRA on q/v; rsLoRA on all seven projections) are saved by
     PEFT and read by trainbox (tests/integration/llama_probe.cpp --lora): the logits, the adapters'
     gradients after one backward (the frozen base gets none) and the losses of 10 AdamW steps over
     the adapters alone equal PEFT + torch's within 1e-5.
  2. `trainbox train` with model.lora.* fine-tunes the folder; `trainbox export --adapter` writes a folder
     that PeftModel.from_pretrained loads and that gives trainbox's logits (tests/integration/logits.cpp);
     `export --merge --format hf` equals PEFT's merge_and_unload; the base's weights did not move.
  3. The same global batch on 1 rank and on 2 ranks gives the same losses, and at 2 ranks the bytes
     sent per step are the adapters' all-reduce alone (the frozen base has no bucket); ZeRO stage 2 trains.
  4. Stop and resume: the losses of an uninterrupted run, exactly.
  5. model.lora.init_from continues from a PEFT adapter (its r and alpha), model.base_dtype = "bf16"
     keeps the frozen weights in bf16 (and gives PEFT's logits over a bf16 base, within bf16's error).
  6. Bad input: each exits 2 with one line naming the value, and writes nothing.
  llama_probe and logits binaries as argv[1], argv[2]; TRAINBOX_BIN the CLI."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from text_lib import BIN, CORPUS, Checks  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)

LOGITS, LOSSES = bound("lora.logits_vs_peft"), bound("lora.adam_losses_vs_peft")

check = Checks()

try:
    import torch
    import transformers as T
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file, save_file
except ImportError as e:
    print(f"skip: transformers/peft are not installed ({e}); install deps/requirements-tools.txt into the venv")
    sys.exit(77)

probe, logits_bin = sys.argv[1], sys.argv[2]
V = 256  # byte-level text trains it
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run(*args, timeout=300, env=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=env or dict(os.environ, OMP_NUM_THREADS="1"))


def build_base(d):
    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                        bos_token_id=1, eos_token_id=2)
    m = T.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():
        for name, t in m.named_parameters():
            if "norm" in name:
                t.add_(0.1 * torch.randn_like(t))
    path = os.path.join(d, "base")
    m.save_pretrained(path)
    return path


def base_model(path, dtype=torch.float32):
    return T.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=dtype)


def shifted_loss(logits, x):
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(),
                                             x[:, 1:].reshape(-1))


def peft_name(name):  # trainbox's (and PEFT's saved) name → the live PeftModel's
    return "base_model.model." + name.replace(".lora_A.weight", ".lora_A.default.weight").replace(
        ".lora_B.weight", ".lora_B.default.weight")


def probe_case(d, base, what, r, alpha, targets, rslora):
    torch.manual_seed(1)
    model = get_peft_model(base_model(base), LoraConfig(r=r, lora_alpha=alpha, target_modules=targets,
                                                        lora_dropout=0.0, use_rslora=rslora, task_type="CAUSAL_LM"))
    with torch.no_grad():  # B is zero at the start: make the adapters matter
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    adapter = os.path.join(d, f"adapter_{what}")
    model.save_pretrained(adapter)
    x = torch.randint(0, V, (2, 24), generator=torch.Generator().manual_seed(2))
    save_file({"x": x}, os.path.join(d, f"in_{what}.safetensors"))
    out = os.path.join(d, f"out_{what}.safetensors")
    p = subprocess.run([probe, base, os.path.join(d, f"in_{what}.safetensors"), out, "--lora", adapter,
                        "--steps", "10", "--lr", "1e-3"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"{what}: llama_probe --lora runs", p.stderr[-600:])
    if p.returncode:
        return adapter
    ours = load_file(out)
    model.eval()
    with torch.no_grad():
        ref = model(x).logits
    diff = (ours["logits"] - ref).abs().max().item()
    check(diff <= LOGITS, f"{what}: logits = PEFT's (max |diff| {diff:.2e}, tolerance {LOGITS})")
    model.train()
    model.zero_grad()
    shifted_loss(model(x).logits, x).backward()
    named = dict(model.named_parameters())
    grads = [k for k in ours if k.startswith("grad.")]
    check(grads and all(".lora_" in k for k in grads), f"{what}: gradients for the adapters alone "
          f"({len(grads)} tensors, the frozen base none)", str(grads[:4]))
    worst = max((((ours[k] - named[peft_name(k[5:])].grad).abs().max() /
                  named[peft_name(k[5:])].grad.abs().max().clamp_min(1e-12)).item() for k in grads), default=1.0)
    check(worst <= 1e-4, f"{what}: adapter gradients = PEFT's (largest relative difference {worst:.2e}, "
          "tolerance 1e-4)")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, betas=(0.9, 0.999),
                            eps=1e-8, weight_decay=0.01)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = shifted_loss(model(x).logits, x)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    diff = max(abs(a - b) for a, b in zip(losses, ours["adam_losses"].tolist()))
    check(len(ours["adam_losses"]) == 10 and diff <= LOSSES and losses[-1] < losses[0] - 1e-3,
          f"{what}: 10 AdamW steps over the adapters = PEFT + torch's (max |diff| {diff:.2e}, tolerance {LOSSES}; "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f})")
    return adapter


CONFIG = """
[model]
name = "llama"
init_from = "{base}"
block_size = 32
lora.r = 4
lora.alpha = 8
lora.target_modules = ["q_proj", "v_proj", "down_proj"]

[data]
dataset = "text"
path = "{text}"

[train]
batch_size = 4
max_steps = 6
log_every = 1
threads = 1
seed = 5
deterministic = true

[optim]
name = "adamw"
lr = 0.01

[checkpoint]
every_steps = 3
"""


def losses(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return [e["loss"] for e in map(json.loads, open(path)) if e["event"] == "train"]


def events(run_dir, kind):
    path = os.path.join(run_dir, "metrics.jsonl")
    return [e for e in map(json.loads, open(path)) if e["event"] == kind] if os.path.exists(path) else []


def trainbox_logits(d, checkpoint, x, tag):
    inp, out = os.path.join(d, f"lx_{tag}.safetensors"), os.path.join(d, f"ly_{tag}.safetensors")
    save_file({"x": x}, inp)
    p = subprocess.run([logits_bin, checkpoint, inp, out], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"{tag}: logits of the checkpoint", p.stderr[-400:])
    return load_file(out)["logits"] if p.returncode == 0 else None


def train_and_export(d, base, cfg):
    run_dir = os.path.join(d, "one")
    r = run("train", cfg, "--run-dir", run_dir)
    check(r.returncode == 0 and "LoRA r=4 alpha=8 on 6 layers" in r.stderr, "trainbox train with model.lora.* "
          "(the start-up line names the adapters)", r.stderr[-800:])
    adapter = os.path.join(d, "exported")
    r = run("export", run_dir, adapter, "--adapter")
    check(r.returncode == 0 and os.path.exists(os.path.join(adapter, "adapter_config.json")),
          "export --adapter writes PEFT's folder", r.stderr[-400:])
    x = torch.randint(0, V, (2, 20), generator=torch.Generator().manual_seed(7))
    ours = trainbox_logits(d, run_dir, x, "trained")
    try:
        peft = PeftModel.from_pretrained(base_model(base), adapter).eval()
        with torch.no_grad():
            ref = peft(x).logits
        moved = max(t.abs().max().item() for k, t in load_file(os.path.join(adapter, "adapter_model.safetensors"))
                    .items() if "lora_B" in k)
        diff = (ours - ref).abs().max().item() if ours is not None else float("inf")
        check(diff <= LOGITS and moved > 0, f"PEFT loads the exported adapter and gives trainbox's logits "
              f"(max |diff| {diff:.2e}; trained B up to {moved:.3f})")
        merged_ref = peft.merge_and_unload().state_dict()
    except Exception as e:  # noqa: BLE001: a failure to compare is a failure
        check(False, "PeftModel.from_pretrained on the exported adapter", repr(e))
        return run_dir
    hf = os.path.join(d, "merged")
    r = run("export", run_dir, hf, "--merge", "--format", "hf")
    check(r.returncode == 0, "export --merge --format hf", r.stderr[-400:])
    if r.returncode == 0:
        got = base_model(hf).state_dict()
        worst = max((got[k] - merged_ref[k]).abs().max().item() for k in merged_ref)
        check(set(got) == set(merged_ref) and worst <= 1e-6,
              f"the merged folder = PEFT's merge_and_unload (max |diff| {worst:.2e})")
        base_sd = base_model(base).state_dict()
        still = all(torch.equal(got[k], base_sd[k]) for k in base_sd if not any(t in k for t in
                                                                              ("q_proj", "v_proj", "down_proj")))
        check(still, "every weight without an adapter is the base's, bit for bit (frozen)")
    return run_dir


def distributed(d, cfg):
    one, two = os.path.join(d, "one"), os.path.join(d, "two")
    r = run("train", cfg, "--run-dir", two, "--nproc-per-node", "2", "--set", "train.batch_size=2")
    check(r.returncode == 0, "LoRA at 2 ranks x batch 2", r.stderr[-800:])
    a, b = losses(one), losses(two)
    worst = max((abs(x - y) for x, y in zip(a, b)), default=float("inf"))
    check(len(a) == len(b) == 6 and worst <= 1e-5, f"2 ranks x 2 = 1 rank x 4, step for step "
          f"(max |diff| {worst:.2e}, tolerance 1e-5)", f"{a} vs {b}")
    comm = [e["comm"] for e in events(two, "train") if e.get("comm", {}).get("sent_bytes_per_step")]
    adapters = 2 * (4 * 64 + 64 * 4) + 2 * (4 * 64 + 32 * 4) + 2 * (4 * 128 + 64 * 4)  # q, v, down per layer
    want = 2.0 * (2 - 1) / 2 * 4 * adapters  # the ring's 2(N-1)/N of the fp32 bytes
    sent = comm[-1]["sent_bytes_per_step"] if comm else []
    check(sent and all(abs(s - want) <= 0.02 * want for s in sent),
          f"bytes sent per step at 2 ranks = the adapters' all-reduce ({want:.0f} B; measured {sent})",
          str(comm[-1:] if comm else events(two, "train")[-1:]))
    z2 = os.path.join(d, "zero2")
    r = run("train", cfg, "--run-dir", z2, "--nproc-per-node", "2", "--set", "train.batch_size=2",
            "--set", "dist.zero_stage=2")
    c = losses(z2)
    worst = max((abs(x - y) for x, y in zip(a, c)), default=float("inf"))
    check(r.returncode == 0 and len(c) == 6 and worst <= 1e-5,
          f"ZeRO stage 2 with LoRA: the same losses (max |diff| {worst:.2e})", r.stderr[-800:])


def resume(d, cfg):
    one, part = os.path.join(d, "one"), os.path.join(d, "part")
    r = run("train", cfg, "--run-dir", part, "--set", "train.max_steps=3")
    check(r.returncode == 0, "a LoRA run stopped at step 3", r.stderr[-400:])
    r = run("train", "--run-dir", part, "--resume", "auto", "--set", "train.max_steps=6")
    a, b = losses(one), losses(part)
    check(r.returncode == 0 and "resuming from" in r.stderr and a == b and len(a) == 6,
          "stop at 3 + resume = the uninterrupted run's 6 losses, exactly", f"{a} vs {b}; {r.stderr[-400:]}")


def init_and_dtype(d, base, cfg, peft_adapter):
    cont = os.path.join(d, "cont")
    r = run("train", cfg, "--run-dir", cont, "--set", f"model.lora.init_from={peft_adapter}",
            "--set", "train.max_steps=1")
    check(r.returncode == 0 and "LoRA r=8 alpha=16 on 14 layers" in r.stderr and "adapters from" in r.stderr,
          "model.lora.init_from takes the PEFT adapter's r, alpha and layers", r.stderr[-600:])
    half = os.path.join(d, "bf16")
    r = run("train", cfg, "--run-dir", half, "--set", "model.base_dtype=bf16", "--set", "train.max_steps=2")
    check(r.returncode == 0 and "frozen at bf16" in r.stderr, "model.base_dtype = bf16 trains", r.stderr[-600:])
    if r.returncode:
        return
    merged = os.path.join(d, "bf16_merged.safetensors")
    r = run("export", half, merged, "--merge")
    kinds = {str(t.dtype) for t in load_file(merged).values()} if r.returncode == 0 else set()
    check(kinds == {"torch.bfloat16"}, f"the checkpoint keeps the frozen base in bf16 (merged export: {kinds})",
          r.stderr[-300:])
    adapter = os.path.join(d, "bf16_adapter")
    run("export", half, adapter, "--adapter")
    x = torch.randint(0, V, (2, 20), generator=torch.Generator().manual_seed(9))
    ours = trainbox_logits(d, half, x, "bf16")
    try:
        peft = PeftModel.from_pretrained(base_model(base, torch.bfloat16), adapter).eval()
        dtypes = {str(p.dtype) for n, p in peft.named_parameters() if "lora_" in n}
        with torch.no_grad():
            ref = peft(x).logits.float()
        rel = ((ours.float() - ref).abs().max() / ref.abs().max()).item()
        check(rel <= 2e-2, f"bf16 base: logits = PEFT's over a bf16 base "
              f"(adapters {dtypes}) within bf16's error (max |diff| / max |logit| {rel:.2e}, tolerance 2e-2)")
    except Exception as e:  # noqa: BLE001
        check(False, "bf16 base vs PEFT", repr(e))


def plan(cfg):
    """--plan: the frozen base at its dtype beside the adapters' state; a full fine-tune over budget names LoRA."""
    r = run("train", cfg, "--plan", "--json", "--set", "model.base_dtype=bf16")
    try:
        j = json.loads(r.stdout)
        per = j["per_rank"]
        base = 256 * 64 * 2 + 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128) + 2 * 2 * 64 + 64  # embed, lm_head, ..
        adapters = 3328
        check(j["parameters"] == adapters and per["frozen_bytes"] == 2 * base and
              per["parameters_bytes"] == 4 * adapters and per["optimizer_state_bytes"] == 8 * adapters,
              f"--plan of the LoRA run: {adapters} trainable parameters (4 B + AdamW's 8 B each) and the frozen "
              f"base at 2 B/param ({per['frozen_bytes']} B, formula {2 * base})", r.stdout[-600:])
    except (ValueError, KeyError, IndexError) as e:
        check(False, "--plan --json of the LoRA run", f"{e!r}: {r.stdout[-400:]} {r.stderr[-400:]}")
    r = run("train", cfg, "--plan", "--budget", "1MB", "--set", "model.lora.r=0")
    check(r.returncode == 1 and "a LoRA fine-tune (model.lora.r = 16" in r.stdout,
          "--plan of a full fine-tune over its budget names the LoRA configuration", r.stdout[-500:])


def bad_input(d, cfg, run_dir, peft_adapter):
    def refused(args, text, what):
        target = os.path.join(d, "bad_" + str(abs(hash(what)) % 10 ** 6))
        r = run("train", cfg, "--run-dir", target, *args)
        check(r.returncode == 2 and text in r.stderr and not os.path.exists(target),
              f"{what}: exit 2, named, nothing written", f"rc {r.returncode}: {r.stderr[-500:]}")
    refused(["--set", 'model.lora.target_modules=["q_prj"]'], 'did you mean "q_proj"', "a target that matches nothing")
    refused(["--set", "model.lora.r=-1"], "model.lora.r = -1 is not allowed", "r < 0")
    refused(["--set", "model.lora.alpha=0"], "model.lora.alpha = 0 is not allowed", "alpha 0")
    refused(["--set", "model.lora.r=0", "--set", "model.base_dtype=bf16"], "model.base_dtype = \"bf16\" applies",
            "base_dtype without LoRA")
    refused(["--set", "dist.zero_stage=3"], "dist.zero_stage = 3 with model.lora.r > 0", "LoRA with ZeRO stage 3")
    broken = os.path.join(d, "broken_adapter")
    shutil.copytree(peft_adapter, broken)
    t = load_file(os.path.join(broken, "adapter_model.safetensors"))
    k = sorted(t)[0]
    t[k] = t[k][:, :-1].contiguous()
    save_file(t, os.path.join(broken, "adapter_model.safetensors"))
    refused(["--set", f"model.lora.init_from={broken}"], k, "an adapter whose shapes do not fit the base")
    r = run("export", run_dir, os.path.join(d, "plain.safetensors"))
    check(r.returncode == 2 and "--adapter" in r.stderr and "--merge" in r.stderr
          and not os.path.exists(os.path.join(d, "plain.safetensors")),
          "exporting a LoRA run without --adapter or --merge: exit 2, both named", r.stderr[-400:])
    r = run("export", run_dir, os.path.join(d, "exported"), "--adapter")
    check(r.returncode == 2 and "exists" in r.stderr, "an adapter export onto an existing folder: exit 2",
          r.stderr[-300:])


def main():
    d = tempfile.mkdtemp(prefix="trainbox-lora-")
    base = build_base(d)
    probe_case(d, base, "lora q,v", 4, 8, ["q_proj", "v_proj"], False)
    peft_adapter = probe_case(d, base, "rslora all", 8, 16, ALL, True)
    text = os.path.join(d, "corpus.txt")
    with open(text, "w") as f:
        f.write("\n".join(CORPUS)[:40000])  # ~1200 windows of 32 bytes: seconds
    cfg = os.path.join(d, "cfg.toml")
    with open(cfg, "w") as f:
        f.write(CONFIG.format(base=base, text=text))
    run_dir = train_and_export(d, base, cfg)
    distributed(d, cfg)
    resume(d, cfg)
    init_and_dtype(d, base, cfg, peft_adapter)
    plan(cfg)
    bad_input(d, cfg, run_dir, peft_adapter)
    print(f"{check.bad} failed")
    shutil.rmtree(d, ignore_errors=True)
    return 1 if check.bad else 0


if __name__ == "__main__":
    sys.exit(main())
