#!/usr/bin/env python3
"""Writes src/text/unicode_tables.h: where HF tokenizers' Unicode tables and utf8proc's disagree.

trainbox's tokenizer takes categories, case and normalization forms from utf8proc (Unicode 15).
HF tokenizers takes them from Rust crates of other Unicode versions: unicode_categories
(is_punctuation, BertNormalizer's nonspacing marks and control characters: older tables),
unicode-normalization-alignments (NFC/NFD/NFKC/NFKD and StripAccents' combining marks: older), and Rust's std (is_whitespace,
is_numeric, to_lowercase: newer). To give HF's ids on every character, this asks HF itself, code
point by code point, and records the disagreements:
  - per predicate, the code points where HF's answer differs from utf8proc's (flips);
  - the code points HF's normalization leaves alone while utf8proc changes them, or whose
    combining class HF does not know (opaque: trainbox normalizes around them);
  - the code points whose lowercase differs (HF's string).
Run with the venv's Python (tokenizers installed) when tokenizers or utf8proc changes:
  .venv/bin/python scripts/gen-text-tables.py > src/text/unicode_tables.h
tests/integration/tokenizer_parity.py checks the result on a character of every Unicode block."""
import ctypes
import ctypes.util
import sys

import tokenizers
from tokenizers import normalizers, pre_tokenizers

lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
lib.utf8proc_category.restype = ctypes.c_int
lib.utf8proc_tolower.restype = ctypes.c_int32
lib.utf8proc_version.restype = ctypes.c_char_p
lib.utf8proc_map.restype = ctypes.c_ssize_t
lib.utf8proc_map.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]


class Property(ctypes.Structure):
    _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16)]


lib.utf8proc_get_property.restype = ctypes.POINTER(Property)
CAT = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf",
       "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]
STABLE, COMPAT, COMPOSE, DECOMPOSE = 1 << 1, 1 << 2, 1 << 3, 1 << 4
FORMS = {"NFC": STABLE | COMPOSE, "NFD": STABLE | DECOMPOSE, "NFKC": STABLE | COMPOSE | COMPAT,
         "NFKD": STABLE | DECOMPOSE | COMPAT}


def u_map(s, opts):
    b = s.encode("utf-8")
    out = ctypes.c_char_p()
    n = lib.utf8proc_map(b, len(b), ctypes.byref(out), opts)
    return ctypes.string_at(out, n).decode("utf-8") if n >= 0 else None


def cat(cp):
    return CAT[lib.utf8proc_category(cp)]


CPS = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
strip = normalizers.StripAccents()
clean = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
bert_strip = normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True,
                                        lowercase=False)
lower = normalizers.Lowercase()
punct = pre_tokenizers.Punctuation(behavior="isolated")
digits = pre_tokenizers.Digits(individual_digits=True)
ws = pre_tokenizers.WhitespaceSplit()
HF = {f: getattr(normalizers, f)() for f in FORMS}


# trainbox's is_whitespace (src/text/unicode.cpp): the White_Space property
WHITESPACE = {9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, *range(0x2000, 0x200B)}


def ranges(cps):
    out = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


flips = {"kCombiningMarkFlips": [], "kMarkFlips": [], "kPunctuationFlips": [], "kControlFlips": [], "kNumericFlips": [], "kWhitespaceFlips": []}
opaque, lowers = [], []
for cp in CPS:
    c = chr(cp)
    k = cat(cp)
    # StripAccents removes a combining mark (is_combining_mark: Mn, Mc, Me in the normalization crate's tables)
    if (k in ("Mn", "Mc", "Me")) != (strip.normalize_str(c) == ""):
        flips["kCombiningMarkFlips"].append(cp)
    # BertNormalizer's strip_accents: NFD, then nonspacing marks (unicode_categories) removed
    if HF["NFD"].normalize_str(c) == c and (k == "Mn") != (bert_strip.normalize_str(c) == ""):
        flips["kMarkFlips"].append(cp)
    # BertNormalizer's clean_text removes a control character (not \t \n \r, and not U+0000/U+FFFD, removed anyway)
    if cp not in (0, 0xFFFD, 9, 10, 13):
        if (clean.normalize_str(c) == "") != (k in ("Cc", "Cf", "Co", "Cs")):
            flips["kControlFlips"].append(cp)
    if cp >= 0x80:
        isolated = len(punct.pre_tokenize_str("a" + c + "a")) == 3
        if isolated != (k in ("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po")):
            flips["kPunctuationFlips"].append(cp)
    if (len(digits.pre_tokenize_str("a" + c + "a")) == 3) != (k in ("Nd", "Nl", "No")):
        flips["kNumericFlips"].append(cp)
    if (len(ws.pre_tokenize_str("a" + c + "a")) == 2) != (cp in WHITESPACE):
        flips["kWhitespaceFlips"].append(cp)
    hl = lower.normalize_str(c)
    ml = chr(lib.utf8proc_tolower(cp))
    if hl != ml:
        lowers.append((cp, hl))
    # normalization: per character, and the combining class against a ccc-1 probe (U+0334)
    if cp >= 0xA0:
        differs = any(u_map(c, opts) != HF[f].normalize_str(c) for f, opts in FORMS.items())
        ccc = lib.utf8proc_get_property(cp).contents.combining_class
        if not differs and ccc > 1:
            differs = HF["NFD"].normalize_str("a" + c + "\u0334") == "a" + c + "\u0334"
        if differs:
            opaque.append(cp)


def emit(name, rs):
    print(f"inline constexpr CodeRange {name}[] = {{")
    line = "   "
    for a, b in rs:
        item = f" {{0x{a:X}, 0x{b:X}}},"
        if len(line) + len(item) > 116:
            print(line)
            line = "   "
        line += item
    print(line + (" {0x110000, 0x110000}" if not rs else ""))
    print("};")


print("// Generated by scripts/gen-text-tables.py from tokenizers "
      f"{tokenizers.__version__} and utf8proc {lib.utf8proc_version().decode()}: do not edit.")
print("// Where HF tokenizers' Unicode tables disagree with utf8proc's (see the script).")
print("#pragma once\n#include <cstdint>\n\n// clang-format off\nnamespace trainbox::text::uni {\n")
print("struct CodeRange {\n  char32_t first, last;\n};\nstruct Lowercase {\n  char32_t cp;\n  const char* utf8;\n};\n")
for name, cps in flips.items():
    emit(name, ranges(cps))
emit("kNormalizationOpaque", ranges(opaque))
print("inline constexpr Lowercase kLowercaseOverrides[] = {")
for cp, s in lowers:
    esc = "".join(f"\\x{b:02X}" for b in s.encode("utf-8"))
    print(f'    {{0x{cp:X}, "{esc}"}},')
if not lowers:
    print('    {0x110000, ""},')
print("};\n\n}  // namespace trainbox::text::uni\n// clang-format on")
print(f"generated: {', '.join(f'{k} {len(v)}' for k, v in flips.items())}, opaque {len(opaque)}, "
      f"lowercase {len(lowers)}", file=sys.stderr)
