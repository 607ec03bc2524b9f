"""Bad paths never cost the user a file.

A user's project sits next to every path this test makes up: proj/cfg.toml, proj/notes.md, a real run
(proj/runs/exp1, two checkpoints), a folder outside the project reached through a link
(proj/link -> ../outside), and a file where a folder could be expected (proj/afile). Then `trainbox train`
(--resume, --run-dir), `trainbox export`, `trainbox data pack` and `trainbox run --log-dir` are driven
with paths generated from a seed: missing components, "..", links to the sentinel folder, trailing
slashes, relative and absolute, a file where a folder is expected.

After every command:
  - every file that was there before is there, with the same bytes (nothing removed, nothing changed:
    a run dir's own lock and, after a run that continued it (exit 0), its metrics.jsonl, config.toml and
    event files excepted; and the file an `export --force` was told to replace);
  - a command that failed with exit 2 (bad input) created nothing: no new file or folder anywhere in
    the project or outside it (a run dir lock, `.lock`, in a folder that already existed excepted);
  - the exit code is 0, 1 or 2: no crash.
Plus the regression cases by name: a mistyped run dir, a step that does not exist, a path through a
link (each once deleted the user's files), each "does not exist", exit 2.

BAD_PATHS_SEED picks another draw (printed, to rerun a failure); BAD_PATHS_CASES how many.
"""
import hashlib
import os
import random
import subprocess
import sys
import tempfile

bin_ = os.environ["TRAINBOX_BIN"]
seed = int(os.environ.get("BAD_PATHS_SEED", "20261207"))
cases = int(os.environ.get("BAD_PATHS_CASES", "48"))
bad = 0

SMALL = ["--set", "data.dataset=synthetic", "--set", "data.synthetic_samples=64", "--set", "train.batch_size=32",
         "--set", "model.hidden=[8]", "--set", "train.threads=1", "--set", "output.progress=off",
         "--set", "train.device=cpu", "--set", "train.eval_batch_size=64", "--set", "output.tensorboard=false"]


def check(ok, what):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
    return ok


def snapshot(roots):
    """Every path under the roots (links not followed): path -> sha256 of a file, 'dir', or 'link:target'."""
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for d in list(dirnames):
                p = os.path.join(dirpath, d)
                out[p] = "link:" + os.readlink(p) if os.path.islink(p) else "dir"
            for f in filenames:
                p = os.path.join(dirpath, f)
                if os.path.islink(p):
                    out[p] = "link:" + os.readlink(p)
                else:
                    with open(p, "rb") as fh:
                        out[p] = hashlib.sha256(fh.read()).hexdigest()
    return out


ENV = dict(os.environ)


def run(cmd, cwd):
    p = subprocess.run([bin_, *cmd], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def judge(name, cmd, cwd, roots, before, want_rc=None, want_text=None, replaced=()):
    """`replaced`: files the command was told to replace (export --force): they may change."""
    rc, out = run(cmd, cwd)
    after = snapshot(roots)
    may_change = {os.path.realpath(os.path.join(cwd, r)) for r in replaced}

    def own_run_file(p):
        """A run dir's own record, which a start rewrites (the lock names its holder) and a run it continues appends to."""
        base, in_run_dir = os.path.basename(p), os.path.isdir(os.path.join(os.path.dirname(p), "checkpoints"))
        return base == ".lock" or (rc == 0 and in_run_dir and (base in ("metrics.jsonl", "config.toml") or
                                                                base.startswith("events.out.tfevents.")))
    lost = [p for p, h in before.items()
            if p not in after or (after[p] != h and os.path.realpath(p) not in may_change and not own_run_file(p))]
    made = [p for p in after if p not in before and os.path.basename(p) != ".lock"]
    ok = check(not lost, f"{name}: nothing removed or changed" + (f" (LOST {lost[:4]})" if lost else ""))
    ok &= check(rc in (0, 1, 2), f"{name}: exit {rc} is 0, 1 or 2")
    if rc == 2:
        ok &= check(not made, f"{name}: exit 2 created nothing" + (f" (MADE {made[:4]})" if made else ""))
    if want_rc is not None:
        ok &= check(rc == want_rc, f"{name}: exit {rc}, wanted {want_rc}")
    if want_text is not None:
        ok &= check(want_text in out, f"{name}: says '{want_text}'")
    if not ok:
        print("   $ trainbox " + " ".join(cmd) + f"   (in {cwd})\n   " + out.strip().replace("\n", "\n   ")[-800:])
    # What a successful command wrote is part of the project from now on.
    return rc, snapshot(roots)


def make_images(root):
    try:
        from PIL import Image
    except ImportError:
        return False
    for cls in ("cat", "dog"):
        os.makedirs(os.path.join(root, cls))
        for i in range(2):
            Image.new("RGB", (8, 8), (40 * i, 90, 200)).save(os.path.join(root, cls, f"{i}.png"))
    return True


def generated_path(rng, top):
    """A made-up path: one of the project's places, bent by the ways users mistype."""
    base = rng.choice([
        "runs/exp1", "runs/exp2", "runs/exp1/checkpoints", "runs/exp1/checkpoints/step_2",
        "runs/exp1/checkpoints/step_40", "runs/exp1/checkpoints/latest", "runs/exp1/checkpoints/step_2/model.pt",
        "link", "link/x", "link/x/y", "link/keep", "afile", "afile/sub", "notes.md", ".", "..", "runs",
        "runs/new", "nothere/deeper/still",
    ])
    bend = rng.randrange(8)
    if bend == 1:
        base += "/"
    elif bend == 2:
        base = "./" + base
    elif bend == 3:
        base = os.path.join(top, base)
    elif bend == 4:
        base += "/.."
    elif bend == 5:
        base += "/../.."
    elif bend == 6:
        base = base + "/" + rng.choice(["x", "x/y", "../x", "checkpoints/step_2"])
    elif bend == 7:
        base = "link/../" + base
    return base


def main():
    with tempfile.TemporaryDirectory() as tmp:
        top = os.path.join(tmp, "proj")
        # a failed `trainbox run` keeps its error files in $TMPDIR: in this test's folder, and gone with it
        ENV["TMPDIR"] = os.path.join(tmp, "launcher-tmp")
        os.makedirs(ENV["TMPDIR"])
        outside = os.path.join(tmp, "outside")
        os.makedirs(os.path.join(outside, "keep"))
        os.makedirs(os.path.join(outside, "x", "y"))
        with open(os.path.join(outside, "keep", "precious.txt"), "w") as f:
            f.write("the user's other folder\n")
        with open(os.path.join(outside, "x", "y", "data.txt"), "w") as f:
            f.write("reached through a link\n")
        os.makedirs(top)
        os.symlink("../outside", os.path.join(top, "link"))
        with open(os.path.join(top, "notes.md"), "w") as f:
            f.write("# my notes\n")
        with open(os.path.join(top, "afile"), "w") as f:
            f.write("a file, not a folder\n")
        with open(os.path.join(top, "cfg.toml"), "w") as f:
            f.write("[train]\nmax_steps = 2\n")
        rc, out = run(["train", "cfg.toml", *SMALL, "--set", "checkpoint.every_steps=1", "--set", "checkpoint.keep=2",
                       "--run-dir", "runs/exp1"], top)
        if not check(rc == 0 and os.path.isdir(os.path.join(top, "runs/exp1/checkpoints/step_2")),
                     "the sentinel run trained (runs/exp1, checkpoints step_1 and step_2)"):
            print(out)
            return 1
        with open(os.path.join(top, "runs/exp1/my-notes.txt"), "w") as f:
            f.write("the user keeps notes in the run dir\n")
        images = os.path.join(top, "images")
        have_images = make_images(images)
        roots = [top, outside]
        before = snapshot(roots)

        # --- the regressions, by name ---
        for name, path in [("mistyped run dir", "runs/exp2"), ("a step that does not exist",
                           "runs/exp1/checkpoints/step_40"), ("a path through a link", "link/x/nothere")]:
            _, before = judge(f"--resume {path} ({name})", ["train", "cfg.toml", "--resume", path, *SMALL], top, roots,
                              before, want_rc=2, want_text="does not exist")
        _, before = judge("--resume runs/exp2 under --nproc-per-node 2",
                          ["train", "cfg.toml", "--nproc-per-node", "2", "--resume", "runs/exp2", *SMALL], top, roots,
                          before, want_rc=2, want_text="does not exist")
        # every rank refuses before any makes a folder (ranks > 0 make the run dir for their logs)
        _, before = judge("--resume runs/exp2 --run-dir runs/new under --nproc-per-node 2",
                          ["train", "cfg.toml", "--nproc-per-node", "2", "--resume", "runs/exp2", "--run-dir",
                           "runs/new", *SMALL], top, roots, before, want_rc=2, want_text="does not exist")

        # --- generated: each command with made-up paths ---
        rng = random.Random(seed)
        print(f"seed {seed}, {cases} cases (BAD_PATHS_SEED to rerun one draw)")
        good_ckpt = "runs/exp1/checkpoints/step_2"
        for i in range(cases):
            p, q = generated_path(rng, top), generated_path(rng, top)
            kind = rng.choice(["resume", "resume+run-dir", "mismatch", "run-dir", "export-in", "export-out", "pack-in",
                               "pack-out", "run-log-dir"])
            if kind == "resume":
                cmd = ["train", "cfg.toml", "--resume", p, *SMALL]
            elif kind == "resume+run-dir":
                cmd = ["train", "cfg.toml", "--resume", p, "--run-dir", q, *SMALL]
            elif kind == "mismatch":  # the run dir is made, then the checkpoint does not fit the model
                cmd = ["train", "cfg.toml", "--resume", good_ckpt, "--run-dir", q, *SMALL, "--set", "model.hidden=[4]"]
            elif kind == "run-dir":  # a fresh run that fails after its run dir exists: a batch larger than the data
                cmd = ["train", "cfg.toml", "--run-dir", q, *SMALL, "--set", "train.batch_size=100000"]
            elif kind == "export-in":
                cmd = ["export", p, os.path.join(tmp, f"out{i}.safetensors")]
            elif kind == "export-out":
                cmd = ["export", good_ckpt, q.rstrip("/") + rng.choice([".safetensors", ".onnx", ".pt", ""])]
                if rng.random() < 0.3:
                    cmd.append("--force")
            elif kind == "pack-in":
                cmd = ["data", "pack", p, os.path.join(tmp, f"pack{i}-%06d.tar")]
            elif kind == "pack-out":
                if not have_images:
                    continue
                cmd = ["data", "pack", "images", q.rstrip("/") + "/s-%06d.tar"]
            else:
                cmd = ["run", "--log-dir", q, "--", "false"]
            replaced = [cmd[2], cmd[2] + ".data"] if "--force" in cmd else []
            _, before = judge(f"[{i}] {kind}", cmd, top, roots, before, replaced=replaced)
        for f in ["notes.md", "cfg.toml", "afile", "runs/exp1/my-notes.txt", "runs/exp1/config.toml"]:
            check(os.path.isfile(os.path.join(top, f)), f"at the end: proj/{f} is there")
        check(os.path.isfile(os.path.join(outside, "keep", "precious.txt")), "at the end: outside/keep/precious.txt")
    print(f"{'FAILED' if bad else 'PASSED'}: {bad} failed check(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
