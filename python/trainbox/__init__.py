"""trainbox from Python: heartbeats for `trainbox run`'s stall forensics, and the doctor.

    import trainbox
    trainbox.heartbeat(step, "data")      # no-op outside `trainbox run`; no system call
    report = trainbox.doctor()            # `trainbox doctor --json` as a dict
    gpus = trainbox.smi()                 # `trainbox smi --json`: one dict per GPU

`python -m trainbox …` is the `trainbox` command. Importing this module imports no torch.
A Python worker started by `trainbox run` reports its phases without any of this
(docs/python.md, "Zero-code instrumentation"); heartbeat() is for loops the automatic
phases do not describe.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from . import _heartbeat

__all__ = ["heartbeat", "doctor", "smi", "binary", "TrainboxError"]
__version__ = "0.1.0"


class TrainboxError(RuntimeError):
    """A trainbox command failed; the message is its own one-line explanation."""


def heartbeat(step, phase):
    """Reports progress to `trainbox run`: `step` optimizer steps done, now in `phase`
    (a word of a-z and '_': data, forward, backward, allreduce, optimizer, checkpoint …;
    "allreduce" and "barrier" mean waiting for other ranks). A no-op outside trainbox run."""
    _heartbeat.beat(step, phase)


def binary():
    """Path of the `trainbox` program: $TRAINBOX_BIN, else the one installed with this
    package (this interpreter's scripts folder), else (in a worker of `trainbox run`) the
    launcher's, else the first on PATH."""
    env = os.environ.get("TRAINBOX_BIN")
    if env:
        return env
    for d in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        p = os.path.join(d or "", "trainbox")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    if os.environ.get(_heartbeat.ENV):  # a worker of `trainbox run`: the launcher itself
        try:
            p = os.readlink(f"/proc/{os.getppid()}/exe")
            if os.path.basename(p) == "trainbox":
                return p
        except OSError:
            pass
    p = shutil.which("trainbox")
    if p:
        return p
    raise TrainboxError("the trainbox program is not installed: pip install trainbox from the "
                        "checkout (pip install .), or set TRAINBOX_BIN=/path/to/trainbox")


def _json_command(args, ok=(0,)):
    # The document comes through a result file of our own (docs/distributed.md, "The result
    # file"): in a worker of `trainbox run` the inherited TRAINBOX_RESULT_FILE is the worker's,
    # and on ranks other than 0 nothing would come on stdout.
    with tempfile.TemporaryDirectory(prefix="trainbox-result-") as d:
        path = os.path.join(d, "result.json")
        env = dict(os.environ, TRAINBOX_RESULT_FILE=path)
        r = subprocess.run([binary()] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if r.returncode not in ok:
            msg = r.stderr.strip().splitlines()
            raise TrainboxError(msg[0] if msg else f"trainbox {' '.join(args)} exited {r.returncode}")
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:  # a trainbox from before the result file printed it instead
            text = r.stdout
    return json.loads(text)


def doctor(*args):
    """The doctor's report (`trainbox doctor --json`) as a dict. Extra arguments go to the
    command (e.g. "--library-path", "/opt/cuda/lib64"). A report that found problems is
    still returned (exit code 1): read its findings."""
    return _json_command(["doctor", "--json", *args], ok=(0, 1))


def smi():
    """One dict per GPU (`trainbox smi --json`). Raises TrainboxError without an NVIDIA driver."""
    return _json_command(["smi", "--json"])
