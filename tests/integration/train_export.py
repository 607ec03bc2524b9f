"""A trainbox safetensors export loads into the equivalent torch.nn module
(bench/peers/models.py, load_state_dict strict) and gives the same logits as trainbox on a batch."""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "bench", "peers"))
from models import make_model  # noqa: E402
sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)

bin_, logits_bin = os.environ["TRAINBOX_BIN"], sys.argv[1]
cases = {
    "mlp": {"name": "mlp", "hidden": [64, 32]},
    "cnn": {"name": "cnn", "channels": [8, 16], "fc": 32},
    "resnet": {"name": "resnet", "width": 8, "blocks": [1, 1]},
    # byte-level text; the export carries lm_head.weight, tied to transformer.wte.weight
    "gpt": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16},
}
bad = 0
with tempfile.TemporaryDirectory() as d:
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write("The quick brown fox jumps over the lazy dog. " * 200)
    for label, model in cases.items():
        run = os.path.join(d, label)
        sets = [f"model.name={model['name']}"]
        for k, v in model.items():
            if k != "name":
                sets.append(f"model.{k}={v}")
        if label == "gpt":
            data = ["--set", "data.dataset=text", "--set", f"data.path={text}", "--set", "train.max_steps=5"]
        else:
            data = ["--set", "data.dataset=synthetic", "--set", "data.synthetic_samples=256"]
        args = [bin_, "train", "--run-dir", run, "--quiet", *data, "--set", "train.epochs=1", "--set", "train.batch_size=32",
                "--set", "checkpoint.export_safetensors=true"]
        for s in sets:
            args += ["--set", s]
        subprocess.run(args, check=True)
        ckpt = os.path.join(run, "checkpoints", open(os.path.join(run, "checkpoints", "latest")).read().strip())
        out = os.path.join(d, f"{label}.safetensors")
        subprocess.run([bin_, "export", ckpt, out], check=True, capture_output=True)
        net = make_model(model, (1, 28, 28), 256 if label == "gpt" else 10)
        state = load_file(out)
        net.load_state_dict(state, strict=True)  # every name and shape matches PyTorch's state_dict
        net.eval()
        torch.manual_seed(0)
        x = torch.randint(256, (4, 16)) if label == "gpt" else torch.randn(16, 1, 28, 28)
        save_file({"x": x}, os.path.join(d, "x.safetensors"))
        subprocess.run([logits_bin, ckpt, os.path.join(d, "x.safetensors"), os.path.join(d, "y.safetensors")], check=True)
        ours = load_file(os.path.join(d, "y.safetensors"))["logits"]
        with torch.no_grad():
            theirs = net(x)
        err = (ours - theirs).abs().max().item()
        same_end = load_file(os.path.join(run, "model.safetensors")).keys() == state.keys()
        ok = err < bound("export.torch_module_logits") and same_end
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label}: {len(state)} tensors, max |logit diff| {err:.2e}")
sys.exit(1 if bad else 0)
