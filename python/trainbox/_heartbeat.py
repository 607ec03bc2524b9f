"""The heartbeat record of util/heartbeat.h, written from Python (docs/python.md).

The launcher (`trainbox run`) sets TRAINBOX_HEARTBEAT_FILE for every worker. A record is one
64-byte line in a shared memory map of that file: "<step> <phase> <unix_ms>", padded with
spaces, ending in a newline. A memory store and a vDSO clock read: no system call.
Outside `trainbox run` (the variable unset) every beat is a no-op.

Two ways in:
  beat()     trainbox.heartbeat(): the record is written at once (a user's own loop). From
             then on the record is the script's: the sampler below stops.
  _sampler   the zero-code instrumentation (_instrument.py): a function that reads the
             training thread's phase off its stack. A writer thread calls it every
             WRITE_EVERY_S and writes the record when the step or phase changed, so a
             training step pays nothing for the phases (the instrumentation counts steps).

Only the process that opened the map writes: a forked child (a DataLoader worker) is switched
off by an at-fork hook, so it can never overwrite its parent's record.

A script that writes the record itself (the standard-library snippet of docs/distributed.md,
its own mmap of the same file) wins: before each write the writer compares the record with
the one it wrote last, and on the first difference it stops writing for good, so the
script's "5 data" is never overwritten by the sampler's view of the same moment.
"""
import mmap
import os
import re
import threading
import time

ENV = "TRAINBOX_HEARTBEAT_FILE"
RECORD_BYTES = 64  # kHeartbeatBytes
MAX_STEP = 10**18  # the reader takes up to 18 digits (parse_heartbeat)
WRITE_EVERY_S = 0.1
_PHASE = re.compile(r"[a-z_]{1,32}\Z")

_map = None       # the mmap, or None: nothing is written
_held = None      # a mapped file not written yet (hold()/arm(): instrumentation's start-up)
_step = 0         # the step and phase now (note()/beat())
_phase = b"start"
_seq = 0          # note()s so far: the writer writes when it moved
_sampler = None   # the instrumentation's: () -> the phase now (bytes), called by the writer
_written = None   # (_step, _phase, _seq) in the record
_record = None    # the bytes last written, to see a write that was not ours
_lock = threading.Lock()  # one writer at a time: the thread, beat(), arm()
_writer = None    # the writer thread, once arm()ed
_encoded = {}     # phase str -> bytes, validated once
_time_ns = time.time_ns


def _open(path):
    global _map, _record
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return  # off, as the C++ writer: a heartbeat must never fail a job
    try:
        os.ftruncate(fd, RECORD_BYTES)
        _map = mmap.mmap(fd, RECORD_BYTES)
        _record = _map[:]  # as the launcher left it: a script's write before ours shows too
    except (OSError, ValueError):
        _map = None
    finally:
        os.close(fd)  # the mapping keeps the file


def _forget_in_child():
    global _map, _held, _writer, _lock, _record
    # the parent's map stays the parent's (munmap is the kernel's job at exit); the writer
    # thread is not in the child
    _map = _held = _writer = _record = None
    _lock = threading.Lock()


def hold():
    """Keeps beats out of the file until arm(): the instrumentation's start-up, while ranks
    still join at different speeds (a rank that waits for a late one is not stalled)."""
    global _map, _held
    if _map is not None:
        _held, _map = _map, None


def arm():
    """Ends hold(): writes the current step and phase, and from now on the writer thread
    keeps the record current."""
    global _map, _held
    if _held is not None:
        _map, _held = _held, None
        flush()
    _start_writer()


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


def note(step, phase_b):
    """The step and phase now (`phase_b` from encode_phase(), 0 <= step < MAX_STEP), for the
    next flush()."""
    global _step, _phase, _seq
    _step = step
    _phase = phase_b
    _seq += 1


def flush():
    """Writes the step and phase now into the record, if they are not there yet."""
    with _lock:
        _write()


def _write(mine=False):
    """Writes the record if it changed. Unless `mine` (trainbox.heartbeat() was called), a
    record someone else wrote since our last one means the script keeps its own: we stop."""
    global _written, _record, _map, _sampler
    m = _map
    now = (_step, _phase, _seq)
    if m is None or now == _written:
        return
    if not mine and _record is not None and m[:] != _record:
        _map = _sampler = None  # the script's own writer: leave the file to it
        return
    _record = (b"%d %s %d" % (now[0], now[1], _time_ns() // 1000000)).ljust(63)[:63] + b"\n"
    m[:] = _record
    _written = now


def own(step, phase_b, mine=True):
    """The record is the script's (or the end's) from now on: the sampler stops, and this step
    and phase are written at once (`mine` False: unless the script writes the record itself)."""
    global _sampler
    with _lock:
        _sampler = None
        note(step, phase_b)
        _write(mine)


def _write_loop():
    global _phase
    try:
        while True:
            time.sleep(WRITE_EVERY_S)
            with _lock:
                if _sampler is not None:
                    _phase = _sampler()
                _write()
                if _map is None and _held is None:
                    return  # the script writes the record itself (_write): nothing left to do
    except Exception:  # a heartbeat must never fail or litter a job
        return


def _start_writer():
    global _writer
    if _writer is None and _map is not None:
        _writer = threading.Thread(target=_write_loop, name="trainbox-heartbeat", daemon=True)
        _writer.start()


def beat(step, phase):
    """trainbox.heartbeat(): validated, and written at once."""
    if type(step) is not int or not 0 <= step < MAX_STEP:
        raise ValueError(f"heartbeat step {step!r} is not an integer from 0 to 10**18 - 1 "
                         "(optimizer steps done)")
    p = encode_phase(phase)
    if _held is not None:
        arm()
    own(step, p)


def init():
    """Maps TRAINBOX_HEARTBEAT_FILE once; safe to call again."""
    if _map is None and os.environ.get(ENV):
        _open(os.environ[ENV])


init()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
