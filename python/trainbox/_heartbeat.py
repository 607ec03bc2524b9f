"""The heartbeat record of util/heartbeat.h, written from Python (docs/python.md).

The launcher (`trainbox run`) sets TRAINBOX_HEARTBEAT_FILE for every worker. A beat writes one
64-byte line into a shared memory map of that file: "<step> <phase> <unix_ms>", padded with
spaces, ending in a newline. A memory store and a vDSO clock read: no system call per beat.
Outside `trainbox run` (the variable unset) every beat is a no-op.

Only the process that opened the map writes: a forked child (a DataLoader worker) is switched
off by an at-fork hook, so it can never overwrite its parent's record.
"""
import mmap
import os
import re
import time

ENV = "TRAINBOX_HEARTBEAT_FILE"
RECORD_BYTES = 64  # kHeartbeatBytes
_PHASE = re.compile(r"[a-z_]{1,32}\Z")

_map = None       # the mmap, or None: beats do nothing
_held = None      # a mapped file not written yet (hold()/arm(): instrumentation's start-up)
_step = 0         # last step written
_phase = b"start"  # last phase written (bytes)
_encoded = {}     # phase str -> bytes, validated once
_time_ns = time.time_ns


def _open(path):
    global _map
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return  # off, as the C++ writer: a heartbeat must never fail a job
    try:
        os.ftruncate(fd, RECORD_BYTES)
        _map = mmap.mmap(fd, RECORD_BYTES)
    except (OSError, ValueError):
        _map = None
    finally:
        os.close(fd)  # the mapping keeps the file


def _forget_in_child():
    global _map, _held
    _map = _held = None  # the parent's map stays the parent's; munmap is the kernel's job at exit


def hold():
    """Keeps beats out of the file until arm(): the instrumentation's start-up, while ranks
    still join at different speeds (a rank that waits for a late one is not stalled)."""
    global _map, _held
    if _map is not None:
        _held, _map = _map, None


def arm():
    """Ends hold(): writes the current step and phase, and every beat from now on."""
    global _map, _held
    if _held is not None:
        _map, _held = _held, None
        beat_bytes(_step, _phase)


def active():
    """True inside `trainbox run` (a heartbeat file is mapped)."""
    return _map is not None or _held is not None


def step():
    return _step


def phase():
    return _phase.decode()


def encode_phase(phase):
    b = _encoded.get(phase)
    if b is None:
        if not isinstance(phase, str) or not _PHASE.match(phase):
            raise ValueError(
                f"heartbeat phase {phase!r} is not a word of 1-32 letters a-z or '_' "
                "(e.g. 'data', 'forward', 'allreduce')")
        b = _encoded[phase] = phase.encode()
    return b


def beat_bytes(step, phase_b):
    """The hot path: `phase_b` already encoded by encode_phase()."""
    global _step, _phase
    _step = step
    _phase = phase_b
    m = _map
    if m is not None:
        m[:] = (b"%d %s %d" % (step, phase_b, _time_ns() // 1000000)).ljust(63)[:63] + b"\n"


def beat(step, phase):
    if _held is not None:
        arm()
    if type(step) is not int or step < 0:
        raise ValueError(f"heartbeat step {step!r} is not an integer >= 0 (optimizer steps done)")
    beat_bytes(step, encode_phase(phase))


def init():
    """Maps TRAINBOX_HEARTBEAT_FILE once; safe to call again."""
    if _map is None and os.environ.get(ENV):
        _open(os.environ[ENV])


init()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
