"""trainbox's resnet18 / resnet34 / resnet50 are torchvision's (docs/models.md).

Each is trained a few steps at a small crop (3×64×64 synthetic images, 10 classes), exported
with `trainbox export` to .pt, and loaded into `torchvision.models.resnetNN(num_classes=10)`
with strict=True: every parameter and buffer name, shape and dtype is torchvision's. In eval
mode torchvision's logits equal trainbox's own (tests/integration/logits.cpp) within 1e-4
relative at two input sizes (64 and 96 px: the stem and the adaptive pool take any size), and
ONNX Runtime's logits of the .onnx export (whose input is the trained 3×64×64) within 1e-4 too. Then the other way: torchvision's
resnet18 and resnet50 (BatchNorm statistics moved off their initial values), saved as
safetensors, load into trainbox's models strictly (models::load_weights, what model.init_from
uses) and give torchvision's logits within 1e-4."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import torch
import torchvision
from safetensors.torch import load_file, save_file

bin_, logits_bin = os.environ["TRAINBOX_BIN"], sys.argv[1]
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    if not ok:
        failures.append(what)
    return ok


def rel_err(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-12))


def latest(run):
    ckdir = os.path.join(run, "checkpoints")
    return os.path.join(ckdir, open(os.path.join(ckdir, "latest")).read().strip())


def trainbox_logits(ckpt, xs, d):
    save_file(xs, os.path.join(d, "x.safetensors"))
    subprocess.run([logits_bin, ckpt, os.path.join(d, "x.safetensors"), os.path.join(d, "y.safetensors")], check=True)
    ys = load_file(os.path.join(d, "y.safetensors"))
    return {k: ys["logits" + k[1:]].numpy() for k in xs}


def train(run, name, *extra):
    args = [bin_, "train", "--run-dir", run, "--quiet", "--set", f"model.name={name}",
            "--set", "data.dataset=synthetic", "--set", "data.synthetic_shape=[3,64,64]",
            "--set", "data.synthetic_samples=48", "--set", "train.batch_size=16", "--set", "train.epochs=1",
            *extra]
    r = subprocess.run(args, capture_output=True, text=True)
    check(r.returncode == 0, f"{name}: trainbox train {' '.join(extra)} (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    return r.returncode == 0


torch.manual_seed(0)
xs = {"x": torch.randn(3, 3, 64, 64), "x_1": torch.randn(2, 3, 96, 96)}
with tempfile.TemporaryDirectory() as d:
    for name in ("resnet18", "resnet34", "resnet50"):
        run = os.path.join(d, name)
        if not train(run, name):
            continue
        ckpt = latest(run)
        ref = trainbox_logits(ckpt, xs, d)
        pt, onnx_path = os.path.join(d, f"{name}.pt"), os.path.join(d, f"{name}.onnx")
        r1 = subprocess.run([bin_, "export", ckpt, pt], capture_output=True, text=True)
        r2 = subprocess.run([bin_, "export", ckpt, onnx_path], capture_output=True, text=True)
        check(r1.returncode == 0 and r2.returncode == 0, f"{name}: export .pt and .onnx {r1.stderr.strip()}{r2.stderr.strip()}")
        state = torch.load(pt, weights_only=True)
        net = getattr(torchvision.models, name)(num_classes=10)
        want = net.state_dict()
        # the same names, shapes and dtypes (the order is trainbox's: parameters, then buffers)
        check(sorted(state) == sorted(want) and all(state[k].shape == want[k].shape and state[k].dtype == want[k].dtype for k in want),
              f"{name}: the export has torchvision's {len(want)} names, with its shapes and dtypes")
        try:
            net.load_state_dict(state, strict=True)
            check(True, f"{name}: torchvision.models.{name}(num_classes=10).load_state_dict(strict=True)")
        except RuntimeError as e:
            check(False, f"{name}: load_state_dict(strict=True): {str(e)[:300]}")
            continue
        net.eval()
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        for k, x in xs.items():
            with torch.no_grad():
                tv = net(x).numpy()
            e = rel_err(tv, ref[k])
            check(e < 1e-4, f"{name}: torchvision's logits {list(tv.shape)} at {x.shape[-1]} px vs trainbox's: rel. diff {e:.1e}")
            if x.shape[-1] != 64:  # the ONNX graph has the trained input size, as every export does
                continue
            out = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
            e = rel_err(out, ref[k])
            check(e < 1e-4, f"{name}: ONNX Runtime's logits at {x.shape[-1]} px vs trainbox's: rel. diff {e:.1e}")

    # --- the other way: torchvision's own weights in trainbox give torchvision's logits ---
    torch.manual_seed(1)
    for name in ("resnet18", "resnet50"):
        net = getattr(torchvision.models, name)(num_classes=10)
        # a state that is not the initial one: BatchNorm statistics from a few batches in train mode
        with torch.no_grad():
            for _ in range(3):
                net(torch.randn(4, 3, 64, 64))
        net.eval()
        init = os.path.join(d, f"tv_{name}.safetensors")
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, init)
        save_file({"x": xs["x"]}, os.path.join(d, "x.safetensors"))
        r = subprocess.run([logits_bin, "--weights", init, "10", os.path.join(d, "x.safetensors"), os.path.join(d, "y.safetensors"),
                            f"model.name={name}", "data.synthetic_shape=[3,64,64]"], capture_output=True, text=True)
        if not check(r.returncode == 0, f"{name}: torchvision's weights load into trainbox strictly ({r.stdout.strip()}{r.stderr.strip()[-200:]})"):
            continue
        with torch.no_grad():
            tv = net(xs["x"]).numpy()
        e = rel_err(load_file(os.path.join(d, "y.safetensors"))["logits"].numpy(), tv)
        check(e < 1e-4, f"{name}: trainbox's logits with torchvision's weights vs torchvision's: rel. diff {e:.1e}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
