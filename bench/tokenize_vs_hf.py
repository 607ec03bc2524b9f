"""Benchmark: trainbox's tokenizer against Hugging Face `tokenizers` (Rust) on the same tokenizer.json
and corpus (issue 45's benchmark table).

The tokenizers are the parity test's layouts (tests/integration/tokenizer_parity.py builds them with
`tokenizers` itself): a Llama-3-style byte-level BPE, a GPT-2 byte-level BPE, a Llama-2-style BPE with
byte fallback and a BERT WordPiece. The corpus: the license texts and the fortunes, repeated to
about 8 MB, one document per line (JSON strings). For each tokenizer:
  - trainbox: `trainbox tokenize TOK --json --no-special` over the corpus on stdin (one thread; the
    process's whole wall time, start-up and JSON in/out included);
  - HF encode_batch: `Tokenizer.encode_batch` over all the documents (Rust, all threads: RAYON);
  - HF encode, one thread: `encode` per document (TOKENIZERS_PARALLELISM=false);
  - `trainbox data tokenize`: the same documents as JSONL {"text"} records to token shards, every
    core (its --threads default), the process's wall time including the shard writes; its tokens
    are the manifest's (each document + the eos, when the tokenizer has one), against HF
    encode_batch's time for the same documents (the issue's "data tokenize vs encode_batch ≥ 1.0x").
Prints tokens/s per row, the ratios trainbox / HF, and the rows as JSON (--json-only: the JSON alone).
The ids are checked equal before any timing (a fast wrong tokenizer is no result).
  bench/tokenize_vs_hf.sh [BUILD_DIR] [--mb 8] [--repeat 3] [--json-only]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
os.environ.setdefault("TRAINBOX_BIN", "/bin/false")  # the parity module reads it at import
import tokenizer_parity as parity  # noqa: E402  (the tokenizers and the corpus)


def best(f, repeat):
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--mb", type=float, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    trainbox = os.path.join(a.build, "bin", "trainbox")
    base = [d for d in parity.CORPUS + parity.FORTUNES if d.strip()]
    docs = []
    while sum(len(d) for d in docs) < a.mb * 1e6:
        docs += base
    stdin = "".join(json.dumps(d) + "\n" for d in docs)
    records = "".join(json.dumps({"text": d}) + "\n" for d in docs)
    rows = []
    say = (lambda *x: None) if a.json_only else print
    say(f"# corpus: {len(docs)} documents, {sum(len(d) for d in docs) / 1e6:.1f} M characters; "
        f"tokenizers {parity.tokenizers_version()}; {os.cpu_count()} CPUs; best of {a.repeat}")
    say(f"# {'tokenizer':<10} {'tokens':>10} {'trainbox tok/s':>15} {'HF batch tok/s':>15} {'HF 1-thread':>12} "
        f"{'vs batch':>9} {'vs 1-thread':>12} {'data tokenize':>14} {'vs batch':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = os.path.join(tmp, "docs.jsonl")
        with open(jsonl, "w") as f:
            f.write(records)
        for name in ("llama3", "gpt2", "llama2", "bert"):
            tok = parity.BUILDERS[name]()
            path = os.path.join(tmp, name + ".json")
            tok.save(path)
            tok = parity.Tokenizer.from_file(path)

            def ours():
                r = subprocess.run([trainbox, "tokenize", path, "--json", "--no-special"], input=stdin,
                                   capture_output=True, text=True, check=True)
                return [json.loads(x) for x in r.stdout.split("\n")[:-1]]

            got = ours()
            want = [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]
            if got != want:
                print(f"{name}: trainbox's ids differ from HF's: no timing", file=sys.stderr)
                return 1
            n = sum(len(w) for w in want)
            t_ours, _ = best(lambda: subprocess.run([trainbox, "tokenize", path, "--json", "--no-special"],
                                                    input=stdin, capture_output=True, text=True, check=True),
                            a.repeat)
            t_batch, _ = best(lambda: tok.encode_batch(docs, add_special_tokens=False), a.repeat)
            t_one, _ = best(lambda: [tok.encode(d, add_special_tokens=False) for d in docs], a.repeat)
            shards = os.path.join(tmp, name + "-shards")
            t_data, _ = best(lambda: subprocess.run([trainbox, "data", "tokenize", jsonl, shards, "--tokenizer", path,
                                                     "--force"], capture_output=True, text=True, check=True),
                             a.repeat)
            n_data = json.load(open(os.path.join(shards, "manifest.json")))["counts"]["tokens"]
            row = {"tokenizer": name, "tokens": n, "trainbox_tokens_per_s": n / t_ours,
                   "hf_encode_batch_tokens_per_s": n / t_batch, "hf_encode_one_thread_tokens_per_s": n / t_one,
                   "vs_hf_batch": t_batch / t_ours, "vs_hf_one_thread": t_one / t_ours,
                   "data_tokenize_tokens": n_data, "data_tokenize_tokens_per_s": n_data / t_data,
                   "data_tokenize_vs_hf_batch": (n_data / t_data) / (n / t_batch)}
            rows.append(row)
            say(f"  {name:<10} {n:>10} {n / t_ours:>15,.0f} {n / t_batch:>15,.0f} {n / t_one:>12,.0f} "
                f"{t_batch / t_ours:>8.2f}x {t_one / t_ours:>11.2f}x {n_data / t_data:>14,.0f} "
                f"{(n_data / t_data) / (n / t_batch):>8.2f}x")
    print(json.dumps({"benchmark": "tokenize_vs_hf", "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
