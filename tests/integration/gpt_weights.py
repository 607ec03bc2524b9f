"""The built-in GPT against PyTorch: its weights in both directions and its logits.

1. One torch seed gives trainbox's GPT and bench/peers' PyTorch GPT the same initial weights,
   and trainbox's save_weights loads into PyTorch with load_state_dict(strict=True).
2. PyTorch GPT weights (state_dict, both tied names) load into trainbox and give the same logits.
3. A tiny random Hugging Face GPT2LMHeadModel (transformers), saved with save_pretrained
   (Conv1D weights stored transposed, lm_head.weight dropped as a shared tensor), loads into
   trainbox and gives HF's logits; so does the GPT2Model layout (no `transformer.` prefix)
   with the causal-mask buffers older checkpoints carry.
4. The wrong architecture is refused with exit 2, naming the keys.
Without transformers, part 3 is skipped visibly (exit 77 after the rest passed)."""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here downloads; never try the network
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "bench", "peers"))
from models import make_model  # noqa: E402
sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)

logits_bin = sys.argv[1]
cfg = {"name": "gpt", "n_layer": 2, "n_head": 4, "n_embd": 48, "block_size": 32}
VOCAB = 97
sets = [f"model.{k}={v}" for k, v in cfg.items()]
bad = 0


def check(ok, what):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


def trainbox_logits(d, weights, x, extra_sets=()):
    save_file({"x": x}, os.path.join(d, "x.safetensors"))
    out = os.path.join(d, "y.safetensors")
    p = subprocess.run([logits_bin, "--weights", weights, str(VOCAB), os.path.join(d, "x.safetensors"), out,
                        *sets, *extra_sets], capture_output=True, text=True)
    if p.returncode != 0:
        return None, p
    return load_file(out)["logits"], p


torch.manual_seed(0)
x = torch.randint(VOCAB, (3, 32))
with tempfile.TemporaryDirectory() as d:
    # --- 1. same seed, same init; trainbox's file loads strictly into PyTorch ---
    init = os.path.join(d, "init.safetensors")
    subprocess.run([logits_bin, "--init", "1234", str(VOCAB), init, *sets], check=True)
    ours = load_file(init)
    torch.manual_seed(1234)
    peer = make_model(cfg, None, VOCAB)
    theirs = peer.state_dict()
    check(ours.keys() == theirs.keys(), f"trainbox's names are PyTorch's state_dict names ({len(theirs)}, lm_head.weight tied)")
    diff = max((ours[k] - theirs[k]).abs().max().item() for k in theirs)
    check(diff == 0, f"one seed, one init: max |trainbox - PyTorch| over the initial weights {diff:.1e}")
    fresh = make_model(cfg, None, VOCAB)
    fresh.load_state_dict(ours, strict=True)
    check(fresh.lm_head.weight.data_ptr() == fresh.transformer.wte.weight.data_ptr(), "load_state_dict(strict=True) of trainbox's file")

    # --- 2. PyTorch's weights into trainbox: same logits (with and without biases) ---
    for bias in (True, False):
        torch.manual_seed(5)
        peer = make_model({**cfg, "bias": bias}, None, VOCAB).eval()
        pt = os.path.join(d, f"pt_{bias}.safetensors")
        save_file({k: v.clone() for k, v in peer.state_dict().items()}, pt)  # both tied names, as state_dict has them
        y, p = trainbox_logits(d, pt, x, [f"model.bias={str(bias).lower()}"])
        with torch.no_grad():
            ref = peer(x)
        err = (y - ref).abs().max().item() if y is not None else float("inf")
        check(err < bound("gpt.pytorch_weights_logits"), f"PyTorch GPT weights (bias={bias}) in trainbox: max |logit diff| {err:.2e} {p.stderr.strip()}")
    pt = os.path.join(d, "pt_True.safetensors")

    # --- 4. the wrong architecture: exit 2, the keys named ---
    y, p = trainbox_logits(d, pt, x, ["model.n_layer=3", "model.n_embd=64"])
    msg = p.stderr
    check(y is None and p.returncode == 2 and "transformer.h.2.ln_1.weight" in msg and "another shape" in msg
          and "fix:" in msg, f"a 2-layer file into a 3-layer model: exit {p.returncode}: {msg.strip()[:160]}...")

    # --- 3. Hugging Face GPT-2 layout ---
    try:
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print(f"skip: Hugging Face part: transformers is not installed ({e}); "
              "install deps/requirements-tools.txt into the venv")
        sys.exit(1 if bad else 77)
    # HF's GPT-2 default GELU is the tanh approximation ("gelu_new"); trainbox's is nanoGPT's exact one.
    hf_cfg = GPT2Config(vocab_size=VOCAB, n_positions=cfg["block_size"], n_embd=cfg["n_embd"], n_layer=cfg["n_layer"],
                        n_head=cfg["n_head"], activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, layer_norm_epsilon=1e-5, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    torch.manual_seed(7)
    hf = GPT2LMHeadModel(hf_cfg).eval()
    with torch.no_grad():  # HF's init leaves biases and LayerNorms at 0/1: make every tensor matter
        for name, t in hf.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                t.add_(0.1 * torch.randn_like(t))
    hf.save_pretrained(os.path.join(d, "hf"))
    hf_file = os.path.join(d, "hf", "model.safetensors")
    with torch.no_grad():
        ref = hf(x).logits
    keys = load_file(hf_file)
    print(f"     transformers {transformers.__version__}: {len(keys)} tensors, c_attn.weight "
          f"{list(keys['transformer.h.0.attn.c_attn.weight'].shape)}, lm_head.weight in file: {'lm_head.weight' in keys}")
    y, p = trainbox_logits(d, hf_file, x)
    err = (y - ref).abs().max().item() if y is not None else float("inf")
    check(err < bound("gpt.hf_weights_logits") and "Hugging Face" in p.stdout,
          f"HF GPT2LMHeadModel save_pretrained: max |logit diff| {err:.2e} {p.stderr.strip()}")

    # GPT2Model names (no prefix), with the causal-mask buffers of older checkpoints
    bare = {k.removeprefix("transformer."): v for k, v in keys.items() if k != "lm_head.weight"}
    P = cfg["block_size"]
    for i in range(cfg["n_layer"]):
        bare[f"h.{i}.attn.bias"] = torch.tril(torch.ones(P, P, dtype=torch.bool)).view(1, 1, P, P)
        bare[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    bare_file = os.path.join(d, "bare.safetensors")
    save_file(bare, bare_file)
    y, p = trainbox_logits(d, bare_file, x)
    err = (y - ref).abs().max().item() if y is not None else float("inf")
    check(err < bound("gpt.hf_weights_logits"), f"HF GPT2Model layout + attn.bias/masked_bias buffers: max |logit diff| {err:.2e} {p.stderr.strip()}")

sys.exit(1 if bad else 0)
