"""`trainbox export` to .pt and .onnx, checked by the real clients.

.pt: torch.load(weights_only=True) reads every built-in model's export; its tensors equal the
safetensors export's bit for bit (names, order, dtype, values); the PyTorch twins of
bench/peers load it with strict=True and give trainbox's logits; the GPT's tied weights share
one storage. ONNX: onnx.checker.check_model(full_check=True) passes; ONNX Runtime's CPU logits
equal trainbox's within 1e-4 relative at batch 1, 7, 64 (the GPT also at sequence 1, 17 and
block_size); a wrong input shape is rejected naming the axis; metadata, external data and
fp16/bf16 where the CPU runtime has the kernels. Bad input: exit 2, one error line with a fix,
nothing left at OUT."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import ml_dtypes  # numpy's bfloat16 (onnx depends on it)
import numpy as np
import onnx
import onnxruntime as ort
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "bench", "peers"))
from models import make_model  # noqa: E402
sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)

bin_, logits_bin = os.environ["TRAINBOX_BIN"], sys.argv[1]
BLOCK = 32
cases = {
    "mlp": {"name": "mlp", "hidden": [64, 32]},
    "cnn": {"name": "cnn", "channels": [8, 16], "fc": 32},
    "resnet": {"name": "resnet", "width": 8, "blocks": [1, 1]},
    "gpt": {"name": "gpt", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": BLOCK},
}
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)
    return ok


def export(ckpt, out, *extra):
    return subprocess.run([bin_, "export", ckpt, out, *extra], capture_output=True, text=True)


def rel_err(ours, ref):
    return float(np.abs(ours.astype(np.float64) - ref.astype(np.float64)).max() / max(np.abs(ref).max(), 1e-12))


def raw(t):
    """The bytes of a tensor, so that equality is bit for bit (NaN == NaN, -0 != +0)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def inputs_for(label):
    """{key: tensor}: the batches the logits are compared at."""
    torch.manual_seed(0)
    if label == "gpt":
        shapes = [(1, BLOCK), (7, BLOCK), (64, BLOCK), (7, 1), (7, 17)]
        return {("x" if i == 0 else f"x_{i}"): torch.randint(256, s) for i, s in enumerate(shapes)}
    return {("x" if i == 0 else f"x_{i}"): torch.randn(n, 1, 28, 28) for i, n in enumerate([1, 7, 64])}


with tempfile.TemporaryDirectory() as d:
    text = os.path.join(d, "text.txt")
    with open(text, "w") as f:
        f.write("The quick brown fox jumps over the lazy dog. " * 200)
    ckpts = {}
    for label, model in cases.items():
        run = os.path.join(d, label)
        args = [bin_, "train", "--run-dir", run, "--quiet", "--set", "train.epochs=1", "--set", "train.batch_size=32"]
        if label == "gpt":
            args += ["--set", "data.dataset=text", "--set", f"data.path={text}", "--set", "train.max_steps=5"]
        else:
            args += ["--set", "data.dataset=synthetic", "--set", "data.synthetic_samples=256"]
        for k, v in model.items():
            args += ["--set", f"model.{k}={json.dumps(v) if k != 'name' else v}"]
        subprocess.run(args, check=True)
        ckpt = os.path.join(run, "checkpoints", open(os.path.join(run, "checkpoints", "latest")).read().strip())
        ckpts[label] = ckpt

        # --- trainbox's own logits, the reference ---
        xs = inputs_for(label)
        save_file(xs, os.path.join(d, "x.safetensors"))
        subprocess.run([logits_bin, ckpt, os.path.join(d, "x.safetensors"), os.path.join(d, "y.safetensors")], check=True)
        ys = load_file(os.path.join(d, "y.safetensors"))
        ref = {k: ys["logits" + k[1:]].numpy() for k in xs}

        # --- .pt ---
        st_path, pt_path = os.path.join(d, f"{label}.safetensors"), os.path.join(d, f"{label}.pt")
        r1, r2 = export(ckpt, st_path), export(ckpt, pt_path)
        check(r1.returncode == 0 and r2.returncode == 0, f"{label}: export .safetensors and .pt ({r2.stdout.strip()}{r2.stderr.strip()})")
        pt = torch.load(pt_path, weights_only=True)
        st = load_file(st_path)
        same = list(pt.keys()) == list(st.keys()) and all(
            pt[k].dtype == st[k].dtype and pt[k].shape == st[k].shape and torch.equal(raw(pt[k]), raw(st[k])) for k in st)
        check(same, f"{label}: torch.load(weights_only=True) reads the .pt; {len(pt)} tensors equal the safetensors export bit for bit")
        net = make_model(model, (1, 28, 28), 256 if label == "gpt" else 10)
        net.load_state_dict(pt, strict=True)
        net.eval()
        with torch.no_grad():
            twin = net(xs["x"]).numpy()
        check(rel_err(twin, ref["x"]) < bound("export.twin_logits"), f"{label}: the PyTorch twin loads the .pt strictly, logits rel. diff {rel_err(twin, ref['x']):.1e}")
        if label == "gpt":
            check(pt["lm_head.weight"].data_ptr() == pt["transformer.wte.weight"].data_ptr(),
                  "gpt: lm_head.weight and transformer.wte.weight share one storage, as in PyTorch's state_dict")

        # --- ONNX, fp32 ---
        onnx_path = os.path.join(d, f"{label}.onnx")
        r = export(ckpt, onnx_path)
        if not check(r.returncode == 0, f"{label}: export .onnx ({r.stdout.strip()}{r.stderr.strip()})"):
            continue
        m = onnx.load(onnx_path)
        try:
            onnx.checker.check_model(m, full_check=True)
            check(True, f"{label}: onnx.checker.check_model(full_check=True), opset {m.opset_import[0].version}, IR {m.ir_version}")
        except Exception as e:  # noqa: BLE001
            check(False, f"{label}: onnx.checker: {e}")
        meta = {p.key: p.value for p in m.metadata_props}
        want = {"trainbox_version", "trainbox_model", "model_config"} | ({"input_mean", "input_std"} if label != "gpt" else set())
        check(want <= meta.keys() and json.loads(meta["model_config"])["name"] == model["name"],
              f"{label}: metadata {sorted(meta)}")
        sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        in_name = sess.get_inputs()[0].name
        for k, x in xs.items():
            out = sess.run(["logits"], {in_name: x.numpy()})[0]
            e = rel_err(out, ref[k])
            check(out.shape == ref[k].shape and e < bound("export.onnx_logits"), f"{label}: ONNX Runtime CPU logits {list(out.shape)} vs trainbox: rel. diff {e:.1e}")
        # a wrong input shape: rejected by ONNX Runtime, naming the axis
        if label == "gpt":
            bad = torch.randint(256, (2, BLOCK + 1)).numpy()
            needle = f"sequence_length_must_be_at_most_block_size_{BLOCK}"
        else:
            bad = torch.randn(2, 1, 27, 28).numpy()
            needle = "index: 2"
        try:
            sess.run(["logits"], {in_name: bad})
            check(False, f"{label}: ONNX Runtime accepted the input of shape {list(bad.shape)}")
        except Exception as e:  # noqa: BLE001
            check(needle in str(e), f"{label}: shape {list(bad.shape)} rejected: {str(e).splitlines()[0][:160]}")

    # --- external data: the weights in OUT.data, read back by onnx and ONNX Runtime ---
    ext = os.path.join(d, "ext", "mlp.onnx")
    os.makedirs(os.path.dirname(ext))
    r = export(ckpts["mlp"], ext, "--external-data")
    check(r.returncode == 0 and os.path.getsize(ext + ".data") > os.path.getsize(ext), f"mlp: --external-data writes {os.path.basename(ext)}.data")
    onnx.checker.check_model(ext, full_check=True)
    moved = os.path.join(d, "moved")
    shutil.copytree(os.path.dirname(ext), moved)  # the model finds its data beside it, wherever the pair goes
    a = ort.InferenceSession(os.path.join(moved, "mlp.onnx"), providers=["CPUExecutionProvider"]).run(None, {"input": np.ones((3, 1, 28, 28), np.float32)})[0]
    b = ort.InferenceSession(os.path.join(d, "mlp.onnx"), providers=["CPUExecutionProvider"]).run(None, {"input": np.ones((3, 1, 28, 28), np.float32)})[0]
    check(np.array_equal(a, b), "mlp: the external-data model gives the same logits as the single-file one")

    # --- fp16 / bf16: a valid model always, executed: on ONNX Runtime's CPU provider where it has
    # the kernels, else (bf16: no Gemm/Add there) on onnx's own reference evaluator ---
    from onnx.reference import ReferenceEvaluator
    for label in cases:
        for dtype, npt in (("fp16", np.float16), ("bf16", ml_dtypes.bfloat16)):
            path = os.path.join(d, f"{label}-{dtype}.onnx")
            r = export(ckpts[label], path, "--dtype", dtype)
            if dtype == "bf16" and label in ("cnn", "resnet"):  # opset 17's Conv has no bfloat16
                check(r.returncode == 2 and "Conv" in r.stderr and not os.path.exists(path), f"{label}: --dtype bf16 refused: {r.stderr.strip().splitlines()[0]}")
                continue
            if not check(r.returncode == 0, f"{label}: --dtype {dtype} export"):
                continue
            onnx.checker.check_model(path, full_check=True)
            torch.manual_seed(0)
            x = torch.randint(256, (2, BLOCK)) if label == "gpt" else torch.randn(2, 1, 28, 28)
            in_name = onnx.load(path, load_external_data=False).graph.input[0].name
            feed = {in_name: x.numpy() if label == "gpt" else x.numpy().astype(npt)}
            ref32 = ort.InferenceSession(os.path.join(d, f"{label}.onnx"), providers=["CPUExecutionProvider"]).run(None, {in_name: x.numpy()})[0]
            try:
                out, runner = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)[0], "ONNX Runtime"
            except Exception as e:  # noqa: BLE001
                if "NOT_IMPLEMENTED" not in str(e):
                    check(False, f"{label}: {dtype}: ONNX Runtime failed for another reason than a missing kernel: {str(e)[:160]}")
                    continue
                out, runner = ReferenceEvaluator(path).run(None, feed)[0], "onnx.reference (ONNX Runtime's CPU provider has no kernel)"
            e = rel_err(out.astype(np.float32), ref32)
            # fp16: a few roundings of 2^-11 (measured 3.6e-4..6.2e-4); bf16: of 2^-8 (6.7e-3, 1.1e-2).
            check(out.dtype == npt and e < bound("export.fp16_logits" if dtype == "fp16" else "export.bf16_logits"), f"{label}: {dtype} logits vs fp32 on {runner}: rel. diff {e:.1e}")

    # --- bad input: exit 2, an error line and a fix, nothing at OUT ---
    def refused(what, ckpt, out, *extra, expect=""):
        before = set(os.listdir(os.path.dirname(out))) if os.path.isdir(os.path.dirname(out)) else set()
        existed = os.path.exists(out)
        r = export(ckpt, out, *extra)
        lines = r.stderr.strip().splitlines()
        after = set(os.listdir(os.path.dirname(out))) if os.path.isdir(os.path.dirname(out)) else set()
        ok = (r.returncode == 2 and len(lines) == 2 and lines[0].startswith("trainbox: error:") and lines[1].startswith("  fix:")
              and expect in lines[0] and after == before and (existed or not os.path.exists(out)))
        check(ok, f"refused, {what}: exit {r.returncode}: {' / '.join(lines)}")

    bad_dir = os.path.join(d, "bad")
    os.makedirs(bad_dir)
    broken = os.path.join(d, "broken")
    shutil.copytree(ckpts["mlp"], broken)
    with open(os.path.join(broken, "model.pt"), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    for fmt_ in ("safetensors", "pt", "onnx"):
        refused(f"a checkpoint failing verification ({fmt_})", broken, os.path.join(bad_dir, f"o.{fmt_}"), expect="model.pt")
    refused("an unknown format", ckpts["mlp"], os.path.join(bad_dir, "o.bin"), "--format", "tflite", expect="tflite")
    refused("an unknown dtype", ckpts["mlp"], os.path.join(bad_dir, "o.onnx"), "--dtype", "fp8", expect="fp8")
    refused("--dtype for a .pt", ckpts["mlp"], os.path.join(bad_dir, "o.pt"), "--dtype", "fp16", expect="ONNX")
    # a valid dtype on a non-ONNX format: ONNX-only; an invalid one: the valid values first, whatever the format
    refused("--dtype fp32 for a .pt", ckpts["mlp"], os.path.join(bad_dir, "o.pt"), "--dtype", "fp32",
            expect="--dtype fp32 applies to ONNX export only, not pt")
    refused("--dtype fp8 for a .safetensors", ckpts["mlp"], os.path.join(bad_dir, "o.safetensors"), "--dtype", "fp8",
            expect="--dtype fp8 is not an export dtype: fp32, fp16 or bf16")
    refused("OUT in a missing folder", ckpts["mlp"], os.path.join(bad_dir, "nowhere", "o.onnx"), expect="nowhere")
    with open(os.path.join(bad_dir, "file"), "w") as f:
        f.write("x")
    refused("OUT under a file", ckpts["mlp"], os.path.join(bad_dir, "file", "o.pt"), expect="not a folder")
    os.makedirs(os.path.join(bad_dir, "adir.onnx"))
    refused("OUT a folder", ckpts["mlp"], os.path.join(bad_dir, "adir.onnx"), "--force", expect="it is a folder")
    refused("OUT a folder, without --force: said at once", ckpts["mlp"], os.path.join(bad_dir, "adir.onnx"),
            expect="it is a folder")
    r = export(ckpts["mlp"], os.path.join(bad_dir, "adir.onnx"))
    check("--force" not in r.stderr, f"... and no --force advice for a folder: {r.stderr.strip()}")
    # a misspelt extension: safetensors as before, with one warning line naming the near extension
    for name, near in (("model.onxx", "'.onnx'"), ("model.ONNX", "in another case than '.onnx'"), ("model.safetensor", "'.safetensors'")):
        r = export(ckpts["mlp"], os.path.join(d, name))
        warn = [l for l in r.stderr.splitlines() if "warning" in l]
        check(r.returncode == 0 and len(warn) == 1 and near in warn[0] and name.split(".")[1] in warn[0]
              and len(load_file(os.path.join(d, name))) > 0, f"{name}: safetensors, one warning: {warn}")
    for name in ("model.pth", "model.onnx", "model.weights"):
        r = export(ckpts["mlp"], os.path.join(d, "ok-" + name))
        check(r.returncode == 0 and "warning" not in r.stderr, f"{name}: no warning ({r.stderr.strip()})")
    existing = os.path.join(bad_dir, "old.pt")
    with open(existing, "w") as f:
        f.write("keep me")
    refused("an existing OUT without --force", ckpts["mlp"], existing, expect="already exists")
    check(open(existing).read() == "keep me", "... and the existing OUT is untouched")
    r = export(ckpts["mlp"], existing, "--force")
    check(r.returncode == 0 and len(torch.load(existing, weights_only=True)) > 0, "--force replaces it")
    # An ONNX export may write OUT.data beside OUT: a leftover one is another model's weights.
    stale = os.path.join(bad_dir, "other.onnx")
    with open(stale + ".data", "w") as f:
        f.write("another model's weights")
    refused("an existing OUT.data without --force", ckpts["mlp"], stale, expect="other.onnx.data already exists")
    check(open(stale + ".data").read() == "another model's weights", "... and the existing OUT.data is untouched")
    check(not glob.glob(os.path.join(d, "**", "*.tmp.*"), recursive=True), "no temp file left anywhere")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
