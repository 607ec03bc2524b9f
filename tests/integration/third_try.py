"""What a third try found (issue 43), items 5 and 8: what a user bringing their own model and
data is told, and small things a first session meets.

5. model.init_from = a save_pretrained folder reads its model.safetensors (a tiny random
   GPT2LMHeadModel from transformers, no download); a folder of pytorch_model.bin, or of
   nothing, is refused saying what it holds; a tiny LlamaForCausalLM's folder is named a
   Llama-family checkpoint instead of 20 missing and 20 unexpected names; a JSON Lines chat
   file given to data.dataset = "text" is refused, not trained on as bytes.
8. the start line says "1 step" and "1 epoch"; an unknown config key points at
   `trainbox train --config-reference`; a resume with a larger train.max_steps says that the
   cosine schedule changed (and a resume that keeps it says nothing); `trainbox sample`
   prints each token as it is drawn: the first bytes of a sample of 10^6 tokens arrive while
   it runs (the old code printed nothing before the last token).
Every wait is bounded; the sampler is killed at the end."""
import os
import subprocess
import sys
import tempfile
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here downloads
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

bin_ = os.environ["TRAINBOX_BIN"]
bad = 0


def check(ok, what, detail=""):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + ("" if ok else f"\n     {detail.strip()[:600]}"))


def train(*sets, run_dir, extra=()):
    cmd = [bin_, "train", *extra, "--run-dir", run_dir]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


with tempfile.TemporaryDirectory() as d:
    corpus = os.path.join(d, "corpus.txt")
    with open(corpus, "w") as f:
        for i in range(400):
            f.write(f"line {i}: the quick brown fox jumps over the lazy dog, then rests a while.\n")
    C, L, H, T = 32, 2, 2, 32
    gpt = ["model.name=gpt", f"model.n_layer={L}", f"model.n_head={H}", f"model.n_embd={C}", f"model.block_size={T}",
           "data.dataset=text", f"data.path={corpus}", "train.device=cpu", "train.threads=1", "train.batch_size=8",
           "output.progress=off", "train.eval_batch_size=64"]

    # --- 5: model.init_from = a save_pretrained folder ---
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    except ImportError as e:  # installed by scripts/bootstrap (deps/requirements-tools.txt): missing is a failure
        print(f"FAIL transformers is not installed ({e}); run scripts/bootstrap")
        sys.exit(1)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=T, n_embd=C, n_layer=L, n_head=H))
    hf_dir = os.path.join(d, "hf")
    hf.save_pretrained(hf_dir)
    p = train(*gpt, "train.max_steps=1", f"model.init_from={hf_dir}", run_dir=os.path.join(d, "from_hf"))
    check(p.returncode == 0 and f"initial weights from {hf_dir}/model.safetensors" in p.stderr
          and "Hugging Face GPT-2 layout" in p.stderr,
          "init_from = a save_pretrained folder reads its model.safetensors", p.stderr)
    # 8: "1 step", not "1 steps"
    check(p.returncode == 0 and "(1 step by train.max_steps," in p.stderr and "1 steps" not in p.stderr,
          "the start line says '1 step by train.max_steps'", p.stderr)

    bin_dir = os.path.join(d, "hf_bin")
    # A folder as older transformers wrote it (pickle weights): config.json and pytorch_model.bin.
    # (transformers 5 writes safetensors whatever safe_serialization says.)
    os.makedirs(bin_dir)
    hf.config.to_json_file(os.path.join(bin_dir, "config.json"))
    torch.save(hf.state_dict(), os.path.join(bin_dir, "pytorch_model.bin"))
    p = train(*gpt, "train.max_steps=1", f"model.init_from={bin_dir}", run_dir=os.path.join(d, "from_bin"))
    check(p.returncode == 2 and "holds pytorch_model.bin" in p.stderr and "safe_serialization=True" in p.stderr
          and "errno" not in p.stderr,
          "a folder of pytorch_model.bin: exit 2, says what it holds and how to save safetensors", p.stderr)
    os.mkdir(os.path.join(d, "empty"))
    p = train(*gpt, "train.max_steps=1", f"model.init_from={d}/empty", run_dir=os.path.join(d, "from_empty"))
    check(p.returncode == 2 and "is a folder without model.safetensors" in p.stderr and "fix:" in p.stderr,
          "an empty folder: exit 2, 'a folder without model.safetensors', with a fix (was: Is a directory)", p.stderr)

    # --- 5: a Llama-family checkpoint is named ---
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=C, intermediate_size=64, num_hidden_layers=L,
                                         num_attention_heads=H, num_key_value_heads=H, max_position_embeddings=T))
    llama_dir = os.path.join(d, "llama")
    llama.save_pretrained(llama_dir)
    p = train(*gpt, "train.max_steps=1", f"model.init_from={llama_dir}", run_dir=os.path.join(d, "from_llama"))
    check(p.returncode == 2 and "is a Llama-family checkpoint" in p.stderr
          and "this model is not a llama" in p.stderr and "missing: transformer." not in p.stderr
          and 'model.name = "llama"' in p.stderr,
          "Llama weights into a gpt: 'a Llama-family checkpoint', the fix model.name = \"llama\", not the names",
          p.stderr)
    check(not os.path.exists(os.path.join(d, "from_llama")), "the refused run left no run dir")

    # --- 5: a JSON Lines chat file given to data.dataset = "text" ---
    chat = os.path.join(d, "chat.jsonl")
    with open(chat, "w") as f:
        for i in range(300):
            f.write('{"messages": [{"role": "user", "content": "hi %d"}, {"role": "assistant", "content": "hello"}]}\n'
                    % i)
    p = train(*[s for s in gpt if not s.startswith("data.path")], f"data.path={chat}", "train.max_steps=1",
              run_dir=os.path.join(d, "chat"))
    check(p.returncode == 2 and "is JSON Lines" in p.stderr and "jq -r '.messages[].content'" in p.stderr,
          "a JSON Lines chat file as text: exit 2, named, with the jq line that extracts it", p.stderr)

    # --- 8: "1 epoch"; unknown keys point at --config-reference ---
    syn = ["data.dataset=synthetic", "data.synthetic_samples=64", "train.batch_size=32", "train.epochs=1",
           "train.threads=1", "train.device=cpu", "output.progress=off"]
    p = train(*syn, run_dir=os.path.join(d, "one_epoch"))
    check(p.returncode == 0 and "2 steps/epoch, 1 epoch)" in p.stderr, "the start line says '1 epoch'", p.stderr)
    p = train("optim.lrr=0.1", run_dir=os.path.join(d, "typo"))
    check(p.returncode == 2 and "did you mean 'optim.lr'?" in p.stderr
          and "trainbox train --config-reference" in p.stderr,
          "a mistyped key: did you mean, and trainbox train --config-reference", p.stderr)
    p = train("nothing.like_it=1", run_dir=os.path.join(d, "typo2"))
    check(p.returncode == 2 and "trainbox train --config-reference lists every key" in p.stderr,
          "an unknown key: trainbox train --config-reference lists every key", p.stderr)

    # --- 8: a resume with a larger train.max_steps re-stretches the cosine schedule: said once ---
    cos = [*gpt, "schedule.name=cosine", "schedule.warmup_steps=0", "checkpoint.every_steps=2", "checkpoint.keep=10"]
    run = os.path.join(d, "cos")
    p = train(*cos, "train.max_steps=4", run_dir=run)
    check(p.returncode == 0, "cosine run of 4 steps", p.stderr)
    p = train(*cos, "train.max_steps=8", run_dir=run, extra=["--resume", "auto"])
    check(p.returncode == 0 and "note: the learning rate schedule changed since the checkpoint: step 5 runs at lr"
          in p.stderr and "schedule.name = cosine now spans 8 steps" in p.stderr,
          "resume with train.max_steps 4 -> 8: one line says the cosine schedule changed", p.stderr)
    p = train(*cos, "train.max_steps=4", run_dir=os.path.join(d, "cos_same"),
              extra=["--resume", os.path.join(run, "checkpoints", "step_2")])
    check(p.returncode == 0 and "resuming from" in p.stderr and "schedule changed" not in p.stderr,
          "a resume that keeps the schedule says nothing about it", p.stderr)

    # --- 8: trainbox sample streams: bytes arrive while a 10^6-token sample runs ---
    ck = os.path.join(d, "from_hf")
    sampler = subprocess.Popen([bin_, "sample", ck, "--prompt", "line", "--tokens", "1000000", "--temperature", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got = bytearray()

    def read_some():
        while len(got) < len("line") + 16:
            b = sampler.stdout.read1(64)
            if not b:
                return
            got.extend(b)

    reader = threading.Thread(target=read_some, daemon=True)
    reader.start()
    reader.join(timeout=60)  # a bound on failure, not a timing: 10^6 tokens take far longer than this
    running = sampler.poll() is None
    sampler.kill()
    sampler.wait()
    check(running and len(got) >= len("line") + 16 and got.startswith(b"line"),
          f"sample prints tokens as drawn: {len(got)} bytes while the sampler still runs",
          f"running {running}, got {bytes(got)[:40]!r}, stderr {sampler.stderr.read().decode(errors='replace')}")

sys.exit(1 if bad else 0)
