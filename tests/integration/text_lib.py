"""What the text tests share (tokenizer_parity, chat_template_parity, data_tokenize, packing_train):
the trainbox binary under test, a counter of failed checks, and the reference texts (every file in
/usr/share/common-licenses, whole, in name order)."""
import glob
import os

BIN = os.environ.get("TRAINBOX_BIN", "trainbox")

LICENSES = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(p))
CORPUS = [open(p, encoding="utf-8", errors="replace").read() for p in LICENSES]


class Checks:
    """check(ok, what, detail): prints "ok" or "FAIL" with what was checked (and the detail of a
    failure); .bad counts the failures, for the test's exit status."""

    def __init__(self):
        self.bad = 0

    def __call__(self, ok, what, detail=""):
        self.bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f" ({detail})" if detail and not ok else ""), flush=True)
