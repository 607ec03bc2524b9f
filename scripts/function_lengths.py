#!/usr/bin/env python3
"""Function and class lengths of C++ files, measured so that a string cannot fool the count
(scripts/check-function-length; docs/decisions.md "Layout").

lizard tokenises C++ itself, and a raw string whose delimiter it does not know
(R"re(PRETTY_NAME="?([^"\\n]*)"?)re" in src/env/probe.cpp) turned the rest of probe_host into
one long string: lizard ran the function on to line 207, past three other functions, where its
closing brace is at line 112. So lizard reads a copy of each file with every comment, string and
character literal blanked (same lines, same columns; the quotes kept), and each function's end is
cross-checked by matching its braces in that copy: a disagreement is an error, not a guess.
Classes (class/struct/union bodies, `struct Outer::Inner` by its whole name) are measured by
brace matching alone; lizard has no classes.

  function_lengths.py [--limit N] [--class-limit C] [--allow FILE] [--top K] PATH...
Prints the K longest functions and classes; exit 1 when a function is over N lines or a class
over C lines (0: that kind is not checked; those in FILE excepted: one `path:function` or
`class path:Class` a line, each with its reason after a `#`), when an entry of FILE for a
checked kind is no longer over its limit, when lizard and the braces disagree, or when nothing
was measured. Length = lines from the signature (the class head) to the closing brace.
"""
import argparse
import os
import re
import sys
import tempfile

import lizard

SOURCE_EXT = (".cpp", ".cc", ".h", ".hpp")


def blank(text):
    """text with comments and the insides of string and character literals as spaces (newlines kept)."""
    out, i, n = [], 0, len(text)

    def spaces(s):
        return re.sub(r"[^\n]", " ", s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(spaces(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(spaces(text[i:j]))
            i = j
        elif c == '"' or c == "'":
            # a raw string: R"delim( … )delim", with an optional u8/u/U/L prefix before the R
            prefix = re.search(r"(?:u8|u|U|L)?R$", text[max(0, i - 3):i])
            before = text[i - len(prefix.group(0)) - 1] if prefix and i - len(prefix.group(0)) > 0 else ""
            if c == '"' and prefix and not (before.isalnum() or before == "_"):
                m = re.match(r'"([^()\\\s]{0,16})\(', text[i:])
                if m:
                    end = text.find(")" + m.group(1) + '"', i + len(m.group(0)))
                    end = n if end < 0 else end + len(m.group(1)) + 2
                    out.append('"' + spaces(text[i + 1:end - 1]) + '"')
                    i = end
                    continue
            if c == "'":  # a digit separator (1'000'000) is no character literal
                k = i - 1
                while k >= 0 and (text[k].isalnum() or text[k] in "'."):
                    k -= 1
                if k + 1 < i and text[k + 1].isdigit():
                    out.append(c)
                    i += 1
                    continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j, n - 1)
            out.append(c + spaces(text[i + 1:j]) + text[j])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def line_starts(text):
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


def match_brace(text, pos):
    """Index of the brace closing the one at pos, or None."""
    depth = 0
    for k in range(pos, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return None


BODY_AFTER = {"const", "override", "final", "noexcept", "mutable", "try", "volatile"}


def body_open(text, pos):
    """Where the body of the function whose signature starts at pos opens: the first '{' outside
    parentheses that is not a member initialiser's (`x_{1}`) or a default argument's."""
    parens, arrow = 0, False
    k = pos
    while k < len(text):
        ch = text[k]
        if ch == "(":
            parens += 1
        elif ch == ")":
            parens -= 1
        elif text.startswith("->", k) and parens == 0:
            arrow = True
        elif ch == "{" and parens == 0:
            prev = text[:k].rstrip()
            word = re.search(r"[A-Za-z_]\w*$", prev)
            if arrow or not prev or prev[-1] in ")]" or (word and word.group(0) in BODY_AFTER):
                return k
            close = match_brace(text, k)  # an initialiser: step over it
            if close is None:
                return None
            k = close
        elif ch == ";" and parens == 0:
            return None
        k += 1
    return None


CLASS = re.compile(r"\b(class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)(?:\s+final)?\s*"
                   r"(?::(?!:)[^;{()]*)?\{")


def classes(text):
    """(start line, end line, name) of each class/struct/union body (not enum class)."""
    starts = line_starts(text)
    found = []
    for m in CLASS.finditer(text):
        if re.search(r"\benum\s*$", text[:m.start()]):
            continue
        close = match_brace(text, m.end() - 1)
        if close is None:
            continue
        line = lambda p: next(i for i in range(len(starts) - 1, -1, -1) if starts[i] <= p) + 1
        found.append((line(m.start()), line(close), m.group(2)))
    return found


def files_under(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for dirpath, dirs, names in os.walk(p):
            dirs.sort()
            for name in sorted(names):
                if name.endswith(SOURCE_EXT):
                    yield os.path.join(dirpath, name)


def measure(path):
    """(functions, classes, errors) of one file; functions as (length, start, end, name)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank(f.read())
    starts = line_starts(text)
    funcs, errors = [], []
    with tempfile.NamedTemporaryFile("w", suffix=os.path.splitext(path)[1], encoding="utf-8") as tmp:
        tmp.write(text)
        tmp.flush()
        info = lizard.analyze_file(tmp.name)
    for fn in info.function_list:
        start, end = fn.start_line, fn.end_line
        open_at = body_open(text, starts[start - 1])
        close = match_brace(text, open_at) if open_at is not None else None
        if close is None:
            errors.append(f"{path}:{start}: {fn.name}: no body found by brace matching")
            continue
        brace_end = text.count("\n", 0, close) + 1
        if brace_end != end:
            errors.append(f"{path}:{start}: {fn.name}: lizard ends it at line {end}, its braces at {brace_end}")
        funcs.append((end - start + 1, start, end, fn.name))
    cls = [(e - s + 1, s, e, name) for s, e, name in classes(text)]
    return funcs, cls, errors


def over_limit(rows, limit, allowed, key_of):
    """(over, excused, used keys) of rows (lines, where, name) longer than limit."""
    over, excused, used = [], [], set()
    for n, where, name in rows:
        if limit and n > limit:
            key = key_of(where.rsplit(":", 1)[0], name)
            (excused if key in allowed else over).append(f"  {n}\t{where}\t{name}")
            used.add(key)
    return over, excused, used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--class-limit", type=int, default=0)
    ap.add_argument("--allow", default=None)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("paths", nargs="+")
    a = ap.parse_args()
    allowed = set()
    if a.allow:
        with open(a.allow, encoding="utf-8") as f:
            allowed = {ln.split("#")[0].strip() for ln in f} - {""}
    funcs, cls, errors = [], [], []
    for path in files_under(a.paths):
        fs, cs, es = measure(path)
        funcs += [(n, f"{path}:{s}", name) for n, s, _, name in fs]
        cls += [(n, f"{path}:{s}", name) for n, s, _, name in cs]
        errors += es
    if not funcs:
        errors.append("measured no function")
    funcs.sort(key=lambda r: (-r[0], r[1]))
    cls.sort(key=lambda r: (-r[0], r[1]))
    print(f"function_lengths: the {a.top} longest functions (lines, where, name):")
    for n, where, name in funcs[:a.top]:
        print(f"  {n}\t{where}\t{name}")
    print(f"function_lengths: the {a.top} longest classes (lines, where, name):")
    for n, where, name in cls[:a.top]:
        print(f"  {n}\t{where}\t{name}")
    kinds = [  # (what, limit, rows, key of an entry, its exceptions, the fix)
        ("", a.limit, funcs, lambda path, name: f"{path}:{name.split('::')[-1]}",
         {k for k in allowed if not k.startswith("class ")},
         "split the function into named stages (CONVENTIONS.md: a loop that reads top to bottom)"),
        ("class ", a.class_limit, cls, lambda path, name: f"class {path}:{name}",
         {k for k in allowed if k.startswith("class ")},
         "split the class by concern, each piece with its own state and a small interface; a declarative "
         f"table is excepted by `class PATH:NAME  # reason` in {a.allow or 'the --allow file'}"),
    ]
    for e in errors:
        print(f"function_lengths: {e}", file=sys.stderr)
    failed = bool(errors)
    for what, limit, rows, key_of, mine, fix in kinds:
        if not limit:
            continue
        over, excused, used = over_limit(rows, limit, mine, key_of)
        noun = "classes" if what else "functions"
        if excused:
            print(f"function_lengths: {noun} over {limit} lines, excepted by name in {a.allow}:")
            print("\n".join(excused))
        for key in sorted(mine - used):
            print(f"function_lengths: {a.allow} excepts {key}, which is no longer over {limit}: take it off",
                  file=sys.stderr)
            failed = True
        if over:
            print(f"function_lengths: {noun} over {limit} lines:", file=sys.stderr)
            print("\n".join(over), file=sys.stderr)
            print(f"fix: {fix}", file=sys.stderr)
            failed = True
    print(f"function_lengths: {len(funcs)} functions, {len(cls)} classes measured")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
