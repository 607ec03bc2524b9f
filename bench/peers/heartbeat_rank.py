"""A quiet rank for bench/dashboard.sh's scale part: no torch, no output; beats its heartbeat
file (util/heartbeat.h's record, as docs/distributed.md writes it from Python) once a second,
one step a beat, for --seconds, then "done".
  trainbox run --standalone -n 256 --no-instrument -- python3 heartbeat_rank.py --seconds 60
"""
import argparse
import mmap
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=60)
a = ap.parse_args()
path = os.environ.get("TRAINBOX_HEARTBEAT_FILE")
if not path:
    sys.exit("heartbeat_rank.py: run it under trainbox run (TRAINBOX_HEARTBEAT_FILE is unset)")
fd = os.open(path, os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, 64)
hb = mmap.mmap(fd, 64)


def beat(step, phase):
    hb[:64] = f"{step} {phase} {time.time_ns() // 10**6}".ljust(63).encode() + b"\n"


end, step = time.time() + a.seconds, 0
while time.time() < end:
    beat(step, "forward_backward")
    time.sleep(1.0)
    step += 1
beat(step, "done")
