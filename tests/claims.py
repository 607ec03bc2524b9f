#!/usr/bin/env python3
"""The claims table (tests/claims.toml): its reader, its check, and docs/testing.md from it.

  tests/claims.py bound ID          print the bound a test asserts (a range as "LO HI")
  tests/claims.py check [--build BUILD_DIR] [--partial]
                                    the rules of tests/claims.toml's header (ctest `claims`)
  tests/claims.py doc [--check]     write docs/testing.md from tests/testing.md.in and the table
                                    (--check: exit 1 with a diff when it is not what this writes;
                                    ctest `testing_doc`). scripts/gen-testing-doc runs this.

In Python tests:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from claims import bound
    MIN_PSNR = bound("images.full_crop_psnr")
In bash tests:  tol=$("$(dirname "$0")/../claims.py" bound elastic.losses)
--table, --root, --tests-json and the TRAINBOX_CLAIMS_TABLE variable are for this script's own
checks (a table or a ctest listing other than the checkout's).
"""
import argparse
import ast
import difflib
import fnmatch
import json
import os
import re
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "tests", "claims.toml")
TEMPLATE = os.path.join("tests", "testing.md.in")
OUTPUT = os.path.join("docs", "testing.md")
MARKER = re.compile(r"<!--\s*claim:\s*([A-Za-z0-9_.\-]+)\s*-->")
SECTION = re.compile(r"^<!--\s*claims:\s*([A-Za-z0-9_\-]+)\s*-->\s*$")
KINDS = ("max", "min", "range", "exact")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # a marker written as code is shown, not a marker
_loaded = {}


def load(path=None):
    """(claims, machines): claims is {id: entry} in the file's order; an entry is a table with a `claim` key."""
    path = path or os.environ.get("TRAINBOX_CLAIMS_TABLE") or TABLE
    if path not in _loaded:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        machines = data.pop("machines", {})
        claims = {}

        def walk(prefix, table):
            for k, v in table.items():
                if isinstance(v, dict):
                    cid = f"{prefix}.{k}" if prefix else k
                    if "claim" in v:
                        claims[cid] = v
                    else:
                        walk(cid, v)

        walk("", data)
        for cid, e in claims.items():  # an entry it names that is missing: check says so
            if "bound_of" in e and "bound" in claims.get(e["bound_of"], {}):
                e["bound"] = claims[e["bound_of"]]["bound"]
        _loaded[path] = (claims, machines)
    return _loaded[path]


def bound(cid, path=None):
    """The bound the test of claim `cid` asserts: a number, [lo, hi], or words."""
    claims, _ = load(path)
    if cid not in claims:
        raise KeyError(f"no claim {cid!r} in {path or TABLE}: add its entry (tests/claims.toml's header)")
    return claims[cid]["bound"]


# --- formatting -------------------------------------------------------------------------------

def fmt(x):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e6:
        return str(int(x))
    s = repr(float(x))
    if "e" not in s and abs(x) < 0.05:  # 0.0001 -> 1e-4, the shortest that reads back
        s = next(t for t in (f"{x:.{k}e}" for k in range(17)) if float(t) == x)
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), s)


def numeric(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def numbers(x):
    """The numbers of a bound or figure: [x] or [lo, hi]; [] for words."""
    if numeric(x):
        return [float(x)]
    if isinstance(x, list) and len(x) == 2 and all(numeric(v) for v in x):
        return [float(v) for v in x]
    return []


def with_unit(text, unit):
    return f"{text} {unit}" if unit else text


def bound_text(e):
    if "bound_text" in e:
        return e["bound_text"]
    b, unit, kind = e["bound"], e.get("unit", ""), e["kind"]
    if kind == "range" and len(numbers(b)) == 2:
        return with_unit(f"{fmt(b[0])}–{fmt(b[1])}", unit)
    if kind == "min":
        return with_unit(f"≥ {fmt(b)}", unit)
    return with_unit(fmt(b), unit) if numeric(b) else str(b)


def measured_text(e):
    m = e.get("measured_text")
    if m is None:
        m = with_unit(fmt(e["measured"]), e.get("unit", "")) if numeric(e.get("measured")) else str(e.get("measured", "—"))
    return f"{m} [{e['machine']}]" if e.get("machine") else m


def why_text(e):
    return "; ".join(e[k] for k in ("why", "looser", "outside") if e.get(k))


# --- the rules --------------------------------------------------------------------------------

def looser(e):
    """True when the bound lets through more than the stated figure."""
    b, f = numbers(e.get("bound")), numbers(e.get("figure"))
    if not b or not f:
        return False
    kind, close = e["kind"], lambda a, c: abs(a - c) <= 1e-9 * max(abs(a), abs(c))
    if kind == "max":
        return b[0] > f[0] and not close(b[0], f[0])
    if kind == "min":
        return b[0] < f[0] and not close(b[0], f[0])
    if kind == "range":
        lo, hi = (f[0], f[-1])
        return b[0] < lo and not close(b[0], lo) or b[-1] > hi and not close(b[-1], hi)
    return not all(close(x, y) for x, y in zip(b, f)) or len(b) != len(f)


def outside(e):
    """True when the measured value fails the bound."""
    m, b = e.get("measured"), numbers(e.get("bound"))
    if not numeric(m) or not b:
        return False
    kind = e["kind"]
    if kind == "max":
        return m > b[0]
    if kind == "min":
        return m < b[0]
    if kind == "range":
        return not b[0] <= m <= b[-1]
    return False


def uncoded(text):
    """The text with code spans and fenced blocks blanked (same length and lines)."""
    return CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def paragraphs_with(text, cid):
    """The paragraphs (blocks between blank lines) that carry `<!-- claim: cid -->`, markers removed."""
    masked, out, start = uncoded(text), [], 0
    for end in [m.start() for m in re.finditer(r"\n\s*\n", text)] + [len(text)]:
        if any(m.group(1) == cid for m in MARKER.finditer(masked[start:end])):
            out.append(" ".join(MARKER.sub("", text[start:end]).split()))
        start = end
    return out


def doc_files(root):
    files = [os.path.join(root, "README.md")]
    d = os.path.join(root, "docs")
    files += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".md") and f != "testing.md")
    return files


def source_test_names(root):
    """Test names the sources register: CMake's add_test / trainbox_*_test calls and GoogleTest's TEST()s."""
    names = set()
    with open(os.path.join(root, "tests", "CMakeLists.txt")) as f:
        cm = f.read()
    names |= set(re.findall(r"add_test\(NAME\s+([\w.]+)", cm))
    names |= set(re.findall(r"trainbox_(?:integration|gpu_test|labelled_test)\((?:\w+\s+)?([\w.]+)\s", cm))
    for dirpath, _, fs in os.walk(os.path.join(root, "tests", "unit")):
        for fn in fs:
            if fn.endswith(".cpp"):
                with open(os.path.join(dirpath, fn)) as f:
                    names |= {f"{a}.{b}" for a, b in re.findall(r"^TEST(?:_F)?\((\w+),\s*(\w+)\)", f.read(), re.M)}
    return names


def safe_eval(expr):
    """An arithmetic literal (C++ or Python): numbers, + - * / and parentheses; None otherwise."""
    expr = re.sub(r"(?<=\d)[fFlLuU]+\b", "", expr.strip())
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and numeric(n.value):
            return float(n.value)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            a, b = ev(n.left), ev(n.right)
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.Div: a / b if b else float("nan")}[type(n.op)]
        raise ValueError

    try:
        return ev(tree)
    except (ValueError, KeyError, TypeError):
        return None


def literal_values(line):
    """The values a line holds: `= EXPR;` evaluated, else every number literal on it."""
    code = re.split(r"\s(?://|#)\s*claim:", line)[0]
    vals = []
    m = re.search(r"=\s*([^;=]+);", code)
    if m and safe_eval(m.group(1)) is not None:
        vals.append(safe_eval(m.group(1)))
    vals += [float(x) for x in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?![\w.])", code)]
    return vals


def test_source_files(root):
    """A function: ctest name -> the test files it runs (tests/CMakeLists.txt's add_test and
    trainbox_* calls: the scripts in their arguments and the sources of the programs they run;
    a GoogleTest name or pattern: the tests/unit files that define it), with the test files those
    name (a helper script, a sourced library), transitively."""
    with open(os.path.join(root, "tests", "CMakeLists.txt")) as f:
        cm = f.read()
    here = lambda a: os.path.join(root, "tests", a.replace("${CMAKE_CURRENT_SOURCE_DIR}/", ""))
    programs = {m.group(1): [here(x) for x in m.group(2).split() if x.endswith((".cpp", ".py", ".sh"))]
                for m in re.finditer(r"add_executable\((\w+)\s+([^)]*)\)", cm)}
    direct = {}
    call = (r"(?:trainbox_integration|trainbox_gpu_test)\(([\w.]+)\s+([^)]*)\)"
            r"|trainbox_labelled_test\(\w+\s+([\w.]+)\s+([^)]*)\)|add_test\(NAME\s+([\w.]+)\s+COMMAND\s+([^)]*)\)")
    for m in re.finditer(call, cm):
        name, args = next((m.group(i), m.group(i + 1)) for i in (1, 3, 5) if m.group(i))
        files = []
        for a in args.split():
            if os.path.isfile(here(a)):
                files.append(here(a))
            t = re.match(r"\$<TARGET_FILE:(\w+)>", a)
            if t:
                files += programs.get(t.group(1), [])
        direct[name] = files
    unit = {}
    everything = []
    for dirpath, _, fs in os.walk(os.path.join(root, "tests")):
        for fn in sorted(fs):
            p = os.path.join(dirpath, fn)
            if fn.endswith((".py", ".sh", ".cpp")) and fn != "claims.py":
                everything.append(p)
            if fn.endswith(".cpp") and os.sep + "unit" in dirpath:
                with open(p, errors="replace") as f:
                    for a, b in re.findall(r"^TEST(?:_F|_P)?\((\w+),\s*(\w+)\)", f.read(), re.M):
                        unit.setdefault(f"{a}.{b}", []).append(p)
    texts = {}

    def named_in(p):
        if p not in texts:
            with open(p, errors="replace") as f:
                text = f.read()
            texts[p] = [q for q in everything if q != p and os.path.basename(q) in text]
        return texts[p]

    def files_of(test):
        if any(c in test for c in "*?["):
            start = [p for u, ps in unit.items() if fnmatch.fnmatchcase(u, test) for p in ps]
        else:
            start = list(direct.get(test, [])) + unit.get(test, [])
        seen, todo = set(start), list(start)
        while todo:
            for q in named_in(todo.pop()):
                if q not in seen:
                    seen.add(q)
                    todo.append(q)
        return sorted(seen)

    return files_of


def check(args):
    root = args.root
    claims, machines = load(args.table)
    problems, notes = [], []

    def bad(cid, what):
        problems.append(f"{cid}: {what}")

    # 1. every marker in the docs has its entry
    marked = {}
    for path in doc_files(root):
        with open(path) as f:
            text = f.read()
        rel = os.path.relpath(path, root)
        text = uncoded(text)
        for m in MARKER.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            marked.setdefault(m.group(1), []).append((rel, text))
            if m.group(1) not in claims:
                problems.append(f"{rel}:{line}: the number marked `<!-- claim: {m.group(1)} -->` has no entry in "
                                f"tests/claims.toml: add [{m.group(1)}] (claim, doc, stated, bound, measured, tests)")
    # 2. each entry: complete, its doc marked, bound vs figure, measured vs bound
    with open(os.path.join(root, TEMPLATE)) as f:
        sections = {SECTION.match(l).group(1) for l in f if SECTION.match(l)}
    for cid, e in claims.items():
        if "bound_of" in e and "bound" not in e:
            bad(cid, f"bound_of = {e['bound_of']!r}: tests/claims.toml has no such entry with a bound")
            continue
        for key in ("claim", "section", "doc", "kind", "bound", "tests"):
            if key not in e:
                bad(cid, f"no `{key}` (tests/claims.toml's header lists the keys)")
        if e.get("kind") not in KINDS:
            bad(cid, f"kind {e.get('kind')!r}: one of {', '.join(KINDS)}")
            continue
        if e.get("section") not in sections:
            bad(cid, f"section {e.get('section')!r} is not placed in {TEMPLATE} (<!-- claims: SECTION -->): "
                     "docs/testing.md would leave it out")
        if e.get("machine") and e["machine"] not in machines:
            bad(cid, f"machine {e['machine']!r} is not in [machines]")
        if e["kind"] in ("max", "min") and numeric(e.get("bound")) is False:
            bad(cid, f"a {e['kind']} bound is a number, got {e.get('bound')!r}")
        if e["kind"] == "range" and len(numbers(e.get("bound"))) != 2:
            bad(cid, f"a range bound is [lo, hi], got {e.get('bound')!r}")
        doc = e.get("doc", "")
        if doc != OUTPUT:
            if not os.path.isfile(os.path.join(root, doc)):
                bad(cid, f"doc {doc!r} does not exist")
            else:
                with open(os.path.join(root, doc)) as f:
                    paras = paragraphs_with(f.read(), cid)
                if not paras:
                    bad(cid, f"{doc} has no `<!-- claim: {cid} -->` next to the number it states")
                elif not e.get("stated"):
                    bad(cid, f"no `stated`: the figure as {doc} writes it")
                elif not any(" ".join(e["stated"].split()) in p for p in paras):
                    bad(cid, f"{doc} no longer states {e['stated']!r} where it marks this claim: update the entry "
                             "(stated, figure, bound) or the doc")
        if looser(e) and not e.get("looser"):
            bad(cid, f"the bound {bound_text(e)} is looser than the stated figure {e.get('stated', fmt(e.get('figure')))} "
                     f"({doc}) and no `looser` says why")
        if e.get("looser") and not looser(e):
            bad(cid, "has a `looser` reason, but its bound is not looser than its figure: remove the reason")
        if outside(e) and not e.get("outside"):
            bad(cid, f"measured {fmt(e['measured'])} lies outside its bound {bound_text(e)} and no `outside` says why "
                     "(noise, another machine)")
        if e.get("measured") is None:
            bad(cid, "no `measured` (\"—\" when no run printed it)")
    # 3. the tests: ctest has them
    if args.tests_json:
        with open(args.tests_json) as f:
            listing = json.load(f)
    else:
        r = subprocess.run([args.ctest, "--show-only=json-v1"], cwd=args.build, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"claims: `ctest --show-only=json-v1` in {args.build} failed: {r.stderr.strip()[:300]}")
        listing = json.loads(r.stdout)
    have = {t["name"] for t in listing.get("tests", [])}
    in_sources = source_test_names(root) if args.partial else set()
    for cid, e in claims.items():
        tests = e.get("tests", [])
        if not tests:
            bad(cid, "names no test")
        for t in tests:
            if any(fnmatch.fnmatchcase(h, t) for h in have):
                continue
            if args.partial and any(fnmatch.fnmatchcase(h, t) for h in in_sources):
                notes.append(f"{cid}: {t} is not configured in this build (a partial build); the sources register it")
                continue
            bad(cid, f"names the test {t!r}, which ctest does not have (ctest -N)")
    # 4. a numeric bound is read by every test the entry lists (in the test's own sources: its
    #    script or program and the test files they name), or held there as a literal marked
    #    `claim: ID` equal to it
    sources = test_source_files(root)
    reads = {}  # file -> {cid: True (reads) | False (a marked literal that is not the bound)}

    def reads_in(path, cid, want):
        key = (path, cid)
        if key not in reads:
            found = None
            with open(path, errors="replace") as f:
                for n, line in enumerate(f, 1):
                    if not re.search(r"(?<![\w.])" + re.escape(cid) + r"(?![\w.])", line):
                        continue
                    if re.search(r"(?://|#)\s*claim:\s*" + re.escape(cid) + r"\b", line):
                        vals = literal_values(line)
                        if all(any(abs(v - w) <= 1e-12 * max(abs(w), 1e-300) for v in vals) for w in want):
                            found = found or True
                        else:
                            bad(cid, f"{os.path.relpath(path, root)}:{n} holds a literal marked `claim: {cid}` that is "
                                     f"not the table's bound {' '.join(fmt(w) for w in want)}: {line.strip()[:120]}")
                            found = found or False
                    elif "bound" in line:
                        found = True
            reads[key] = found
        return reads[key]

    for cid, e in claims.items():
        want = numbers(e.get("bound"))
        if not want or "bound_of" in e:  # the entry it names is the one a test reads
            continue
        unread = []
        for t in e.get("tests", []):
            files = sources(t)
            if not files:
                unread.append(f"{t} (its sources were not found in tests/CMakeLists.txt or tests/unit)")
            elif not any(reads_in(f, cid, want) for f in files):
                unread.append(t)
        if unread and not any(p.startswith(f"{cid}: ") and "literal marked" in p for p in problems):
            bad(cid, f"listed test{'s' if len(unread) > 1 else ''} {', '.join(unread)} read{'' if len(unread) > 1 else 's'} "
                     "no bound of it (bound(\"ID\") in Python, `tests/claims.py bound ID` in bash, or a literal "
                     "marked `claim: ID`): read it there, or list only the tests that assert it")
    for n in notes:
        print(f"note: {n}")
    for p in problems:
        print(f"FAIL  {p}")
    print(f"claims: {len(claims)} entries, {sum(len(v) for v in marked.values())} markers in README.md and docs/, "
          f"{len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


# --- docs/testing.md ----------------------------------------------------------------------------

def cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def render(root, table=None):
    claims, machines = load(table)
    with open(os.path.join(root, TEMPLATE)) as f:
        lines = f.read().split("\n")
    out = ["<!-- Generated by scripts/gen-testing-doc from tests/testing.md.in and tests/claims.toml: edit those, "
           "then run it (ctest testing_doc fails when this file differs). -->"]
    for line in lines:
        m = SECTION.match(line)
        if not m:
            out.append(line)
            continue
        out.append("| claim | test | compared | bound | measured | why this bound |")
        out.append("|---|---|---|---|---|---|")
        for cid, e in claims.items():
            if e.get("section") != m.group(1):
                continue
            where = "" if e.get("doc") == OUTPUT else f" ({e['doc']})"
            out.append("| " + " | ".join(cell(c) for c in (
                f"`{cid}`{where}", ", ".join(e.get("tests", [])), e.get("claim", ""), bound_text(e),
                measured_text(e), why_text(e))) + " |")
    text = "\n".join(out)
    text = text.replace("{{machines}}", "; ".join(f"`{k}`: {v}" for k, v in machines.items()))

    def sub(m):
        what, cid = m.group(1), m.group(2)
        if cid not in claims:
            raise SystemExit(f"gen-testing-doc: {TEMPLATE} names {{{{{what}:{cid}}}}}, which tests/claims.toml has not")
        return bound_text(claims[cid]) if what == "bound" else measured_text(claims[cid])

    return re.sub(r"\{\{(bound|measured):([A-Za-z0-9_.\-]+)\}\}", sub, text)


def doc(args):
    text = render(args.root, args.table)
    path = os.path.join(args.root, OUTPUT)
    if args.check:
        try:
            with open(path) as f:
                old = f.read()
        except OSError:
            old = ""
        if old == text:
            print(f"{OUTPUT} is what scripts/gen-testing-doc writes")
            return 0
        diff = list(difflib.unified_diff(old.split("\n"), text.split("\n"), OUTPUT, "generated", lineterm="", n=1))
        print("\n".join(diff[:60]))
        print(f"FAIL  {OUTPUT} differs from what scripts/gen-testing-doc writes from {TEMPLATE} and tests/claims.toml "
              "(edit those, not docs/testing.md, then run scripts/gen-testing-doc)")
        return 1
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {OUTPUT}")
    return 0


def main():
    ap = argparse.ArgumentParser(prog="tests/claims.py")
    ap.add_argument("--table", help="another claims table (this script's own checks)")
    ap.add_argument("--root", default=ROOT, help="the checkout (README.md, docs/, tests/)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bound")
    b.add_argument("id")
    c = sub.add_parser("check")
    c.add_argument("--build", default=os.getcwd(), help="the build folder ctest lists the tests of")
    c.add_argument("--partial", action="store_true", help="a build without torch or Python: tests it does not "
                   "configure are looked up in the sources instead")
    c.add_argument("--ctest", default="ctest", help="the ctest program (CMake's own, from the ctest `claims`)")
    c.add_argument("--tests-json", help="a `ctest --show-only=json-v1` document instead of asking ctest")
    d = sub.add_parser("doc")
    d.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.cmd == "bound":
        try:
            v = bound(args.id, args.table)
        except KeyError as e:
            print(f"tests/claims.py: {e.args[0]}", file=sys.stderr)
            return 2
        print(" ".join(fmt(x) for x in v) if isinstance(v, list) else fmt(v))
        return 0
    return check(args) if args.cmd == "check" else doc(args)


if __name__ == "__main__":
    sys.exit(main())
