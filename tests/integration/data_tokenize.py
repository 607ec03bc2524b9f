"""`trainbox data tokenize` and `data ls` for text against transformers itself (issue 45).

Inputs: a JSONL file of the three record forms (text, prompt/completion, messages) made from the
license texts and fortunes, a plain text file and a folder. For each record the expected ids and
loss mask come from transformers: tokenizer(text) + eos; tokenizer(prompt + completion) + eos with
the mask from the prompt's length; apply_chat_template(..., return_assistant_tokens_mask=True) with
the tokenizer's own chat template. The shards must hold exactly those ids, masks and document
starts, in input order:
  * a 1,200-id byte-level BPE: uint16 shards (llm.c's version 1);
  * the same with 66,000 added tokens: ids above 65,535 stored exactly as uint32 (llm.c's Llama 3
    layout, magic 20240801 version 7);
  * a run killed after its first shard, then run again, gives the same bytes as one that never stopped;
  * `data ls` counts the same documents, tokens and targets;
  * bad input: exit 2 with the file:line, or skipped and counted with --on-bad skip.
  TRAINBOX_BIN=build/bin/trainbox python tests/integration/data_tokenize.py"""
import glob
import hashlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time

from text_lib import BIN, CORPUS, LICENSES, Checks  # noqa: F401 (CORPUS, LICENSES: the texts)

check = Checks()


try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers, Regex
    from transformers import PreTrainedTokenizerFast
except ImportError as e:
    print(f"skip: tokenizers/transformers are not installed ({e}); install deps/requirements-tools.txt")
    sys.exit(77)

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TEMPLATE = ("{%- for m in messages %}{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' }}{% generation %}"
            "{{- m.content | trim + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}{%- else %}"
            "{{- '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}")


def tokenizer(extra):
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=1200, show_progress=False,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if extra:
        t.add_tokens([f"<extra_{k:05d}>" for k in range(extra)])
    t.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=t, eos_token="<|endoftext|>")
    tok.chat_template = TEMPLATE
    return tok


def records(n, rng, extra):
    paras = [p.strip() for text in CORPUS for p in text.split("\n\n") if p.strip()]
    out = []
    for k in range(n):
        a, b = rng.choice(paras), rng.choice(paras)
        if extra and k % 7 == 0:
            a += f" <extra_{extra - 1 - k % 50:05d}>"
        form = k % 3
        if form == 0:
            out.append({"text": a})
        elif form == 1:
            out.append({"prompt": a[:200] + "\nAnswer:", "completion": " " + b[:300]})
        else:
            out.append({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": a[:300]},
                                     {"role": "assistant", "content": b[:300]}, {"role": "user", "content": "More?"},
                                     {"role": "assistant", "content": a[-200:]}]})
    return out


def expected(tok, rec):
    eos = tok.eos_token_id
    if "text" in rec:
        ids = tok(rec["text"])["input_ids"] + [eos]
        return ids, [1] * len(ids)
    if "prompt" in rec:
        ids = tok(rec["prompt"] + rec["completion"])["input_ids"] + [eos]
        n = len(tok(rec["prompt"])["input_ids"])
        return ids, [0] * n + [1] * (len(ids) - n)
    out = tok.apply_chat_template(rec["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


def read_shards(folder):
    m = json.load(open(os.path.join(folder, "manifest.json")))
    ids, mask, widths = [], [], set()
    for sh in m["shards"]:
        b = open(os.path.join(folder, sh["file"]), "rb").read()
        magic, version, n = struct.unpack("<3i", b[:12])
        width = 4 if magic == 20240801 else 2
        widths.add((magic, version, width))
        ids += list(struct.unpack(f"<{n}{'I' if width == 4 else 'H'}", b[1024:]))
        mb = open(os.path.join(folder, sh["file"][:-4] + ".mask"), "rb").read()
        mm, mv, mn = struct.unpack("<3i", mb[:12])
        assert (mm, mv, mn) == (20261207, 1, n), (mm, mv, mn, n)
        mask += list(mb[1024:])
    return m, ids, mask, widths


def run(*args, timeout=300):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


def digest(folder):
    return {f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest()
            for f in sorted(os.listdir(folder)) if f.startswith("shard_")}


def main():
    tmp = tempfile.mkdtemp(prefix="trainbox-data-")
    rng = random.Random(0)
    for extra, label in ((0, "uint16"), (66000, "uint32")):
        tok = tokenizer(extra)
        tdir = os.path.join(tmp, f"tok{extra}")
        tok.save_pretrained(tdir)
        recs = records(600, rng, extra)
        jl = os.path.join(tmp, f"data{extra}.jsonl")
        with open(jl, "w") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
            f.write("\n")  # a blank line is not a record
        folder = os.path.join(tmp, f"docs{extra}")
        os.makedirs(folder)
        for k, p in enumerate(LICENSES[:3]):
            with open(os.path.join(folder, f"{k}.txt"), "w") as f:
                f.write(CORPUS[k])
        out = os.path.join(tmp, f"out{extra}")
        p = run("data", "tokenize", jl, folder, out, "--tokenizer", tdir, "--shard-tokens", "20000", "--threads", "2")
        check(p.returncode == 0, f"{label}: data tokenize exits 0", p.stderr.strip())
        m, ids, mask, widths = read_shards(out)
        want_ids, want_mask, starts = [], [], []
        for r in recs + [{"text": CORPUS[k]} for k in range(3)]:
            i, mk = expected(tok, r)
            starts.append(len(want_ids))
            want_ids += i
            want_mask += mk
        check(ids == want_ids, f"{label}: the shards hold transformers' ids, record for record ({len(want_ids)} tokens)",
              f"first difference at {next((k for k, (a, b) in enumerate(zip(ids, want_ids)) if a != b), min(len(ids), len(want_ids)))}")
        check([x & 1 for x in mask] == want_mask,
              f"{label}: the loss mask equals transformers' (assistant mask, completion + eos, all of text)")
        check([k for k, x in enumerate(mask) if x & 2] == starts, f"{label}: document starts marked ({len(starts)})")
        check(len(m["shards"]) >= 3 and m["complete"], f"{label}: {len(m['shards'])} shards, the manifest complete")
        if extra:
            check(widths == {(20240801, 7, 4)} and max(ids) > 65535,
                  f"uint32: llm.c's Llama 3 layout, ids up to {max(ids)} exact", str(widths))
        else:
            check(widths == {(20240520, 1, 2)}, "uint16: llm.c's version-1 layout", str(widths))
        p = run("data", "ls", out, "--json", "--block", "256")
        j = json.loads(p.stdout) if p.returncode == 0 else {}
        check(j.get("documents") == len(starts) and j.get("tokens") == len(want_ids) and j.get("targets") == sum(want_mask),
              f"{label}: data ls counts the documents, tokens and targets", p.stdout[:300] + p.stderr)
        check(j.get("longer_than_block", -1) == sum(1 for a, b in zip(starts, starts[1:] + [len(want_ids)]) if b - a > 256),
              f"{label}: data ls counts the documents longer than the block")

    # --- restart: killed after the first shard, run again: the same bytes as an uninterrupted run ---
    tdir = os.path.join(tmp, "tok0")
    big = os.path.join(tmp, "big.jsonl")
    with open(big, "w") as f:
        for r in records(6000, random.Random(1), 0):
            f.write(json.dumps(r) + "\n")
    whole = os.path.join(tmp, "whole")
    p = run("data", "tokenize", big, whole, "--tokenizer", tdir, "--shard-tokens", "4096", "--threads", "1")
    check(p.returncode == 0, "restart: the uninterrupted run", p.stderr)
    cut = os.path.join(tmp, "cut")
    proc = subprocess.Popen([BIN, "data", "tokenize", big, cut, "--tokenizer", tdir, "--shard-tokens", "4096",
                             "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(cut, "shard_000002.bin")):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    m = json.load(open(os.path.join(cut, "manifest.json")))
    check(not m["complete"] and len(m["shards"]) >= 1, f"restart: killed with {len(m['shards'])} shards recorded")
    p = run("data", "tokenize", big, cut, "--tokenizer", tdir, "--shard-tokens", "4096", "--threads", "2")
    check(p.returncode == 0 and "resuming" in p.stderr, "restart: the same command resumes", p.stderr)
    check(digest(cut) == digest(whole) and len(digest(whole)) > 10,
          f"restart: every shard and mask byte-identical to the uninterrupted run's ({len(digest(whole))} files)")
    p = run("data", "tokenize", big, cut, "--tokenizer", tdir, "--shard-tokens", "4096")
    check(p.returncode == 0 and "complete already" in p.stderr, "a complete output is left alone", p.stderr)

    # --- bad input ---
    def refused(args, want, what, rc=2):
        p = run(*args)
        first = p.stderr.strip().splitlines()[0] if p.stderr.strip() else ""
        check(p.returncode == rc and all(w in first for w in want), f"refused: {what}", f"rc {p.returncode}: {p.stderr.strip()}")

    badf = os.path.join(tmp, "bad.jsonl")
    with open(badf, "w") as f:
        f.write('{"text": "fine"}\n{"text": "fine"}\n{oops\n{"nothing": 1}\n{"prompt": "p"}\n'
                '{"messages": [{"role": "user", "content": "x"}]}\n{"text": 5}\n')
    refused(["data", "tokenize", badf, os.path.join(tmp, "o1"), "--tokenizer", tdir], [badf + ":3", "not JSON"],
            "a line that is not JSON: file:line, exit 2")
    p = run("data", "tokenize", badf, os.path.join(tmp, "o2"), "--tokenizer", tdir, "--on-bad", "skip")
    check(p.returncode == 0 and "skipped 4 bad lines" in p.stdout and f"{badf}:4" in p.stdout and f"{badf}:7" in p.stdout,
          "--on-bad skip: counted, the first five shown with file:line", p.stdout + p.stderr)
    inv = os.path.join(tmp, "latin1.txt")
    with open(inv, "wb") as f:
        f.write("caf\xe9 cr\xe8me".encode("latin-1"))
    refused(["data", "tokenize", inv, os.path.join(tmp, "o3"), "--tokenizer", tdir], [inv, "UTF-8"],
            "invalid UTF-8 named with the file")
    refused(["data", "tokenize", big, whole, "--tokenizer", os.path.join(tmp, "tok66000")], ["other inputs"],
            "an output folder of another tokenizer is not overwritten")
    foreign = os.path.join(tmp, "foreign")
    os.makedirs(foreign)
    open(os.path.join(foreign, "notes.txt"), "w").write("mine")
    refused(["data", "tokenize", big, foreign, "--tokenizer", tdir, "--force"], ["not shards", "nothing was removed"],
            "--force never removes files it did not write")
    check(os.path.exists(os.path.join(foreign, "notes.txt")), "the user's file is still there")
    refused(["data", "tokenize", big, os.path.join(tmp, "o4"), "--tokenizer", tdir, "--shard-tokens", "10"],
            ["--shard-tokens 10"], "a shard size below 1024 tokens")
    refused(["data", "tokenize", os.path.join(tmp, "missing.jsonl"), os.path.join(tmp, "o5"), "--tokenizer", tdir],
            ["missing.jsonl", "does not exist"], "a missing input")
    p = run("data", "ls", badf)
    check(p.returncode == 0 and "2 text" in p.stdout and "1 messages" in p.stdout and "4 bad lines" in p.stdout,
          "data ls on JSONL: the forms and the bad lines", p.stdout + p.stderr)
    print(f"{'FAILED' if check.bad else 'passed'}: {check.bad} of the checks failed")
    return 1 if check.bad else 0


if __name__ == "__main__":
    sys.exit(main())
