"""Our TensorBoard event files and safetensors must read back exactly in the real Python
readers: TensorBoard's EventAccumulator / EventFileLoader and Hugging Face's safetensors.

Usage: formats_vs_python.py PATH/TO/write_formats
The expected values below are this script's own copy of what write_formats.cpp writes.
"""
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import safetensors
import safetensors.numpy
from tensorboard.backend.event_processing import event_accumulator, event_file_loader

BIG = 1 << 40
f32 = np.float32
EXPECTED_SCALARS = {  # tag -> [(step, value, wall_time or None = "now")]
    "train/loss": [(0, f32(2.5), None), (1, f32(0.1), None), (2, f32(1e-8), None), (3, f32(-3.5), None),
                   (4, f32(-0.0), None), (5, f32(1e-45), None), (6, f32("nan"), None),
                   (BIG, np.finfo(np.float32).max, None)],
    "eval/accuracy": [(2, f32(0.5), 1700000000.25), (BIG, f32(0.9375), 1700000001.5)],
}
NUMPY_TENSORS = {
    "f64": np.array([1.0 / 3.0, -0.0, 1e300], dtype=np.float64),
    "f32": np.array([0.1, -3.5, 1e-8, -0.0, np.inf, np.nan, 1e-45, np.finfo(np.float32).max],
                    dtype=np.float32).reshape(2, 4),
    "f16": np.array([1.0, -np.inf], dtype=np.float16),
    "i64": np.array([0, -1, np.iinfo(np.int64).min], dtype=np.int64),
    "i32": np.array([np.iinfo(np.int32).max, -2], dtype=np.int32),
    "i16": np.array([-32768, 12345], dtype=np.int16),
    "i8": np.array([-128, 0, 127], dtype=np.int8),
    "u8": np.array([0, 1, 2, 253, 254, 255], dtype=np.uint8).reshape(2, 3),
    "bool": np.array([True, False, False, True]),
    "scalar": np.array(42.5, dtype=np.float32),
    "empty": np.zeros((0,), dtype=np.int32),
}
NUMPY_METADATA = {"format": "np", "source": "trainbox write_formats"}
BF16_BITS = np.array([0x3F80, 0xBF80, 0x4049, 0x7F80, 0x0001, 0x7FC0], dtype=np.uint16).reshape(2, 3)
BF16_OTHERS = {
    "bias": np.array([0.5, -1.25, 1e-8], dtype=np.float32),
    "step": np.array(BIG, dtype=np.int64),
    "ids": np.zeros((0, 4), dtype=np.uint8),
    "flags": np.array([7, 8, 9], dtype=np.uint8),
}
BF16_METADATA = {"format": "pt"}

bad = 0


def check(name, ok, detail=""):
    global bad
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}")


def f32_bits(x):
    return struct.pack("<f", x)


def same_array(a, b):
    """Same dtype, shape and bytes (so NaN == NaN and -0.0 != 0.0)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


prog = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    t0 = time.time()
    subprocess.run([prog, tmp], check=True)
    t1 = time.time()

    # --- TensorBoard: the accumulator TensorBoard's UI is built on ---
    acc = event_accumulator.EventAccumulator(os.path.join(tmp, "events"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    check("scalar tags", tags == set(EXPECTED_SCALARS), f"{sorted(tags)}")
    for tag, expected in EXPECTED_SCALARS.items():
        got = acc.Scalars(tag) if tag in tags else []
        check(f"{tag}: steps", [e.step for e in got] == [s for s, _, _ in expected],
              f"{[e.step for e in got]}")
        check(f"{tag}: values (float32 bits)",
              [f32_bits(e.value) for e in got] == [f32_bits(v) for _, v, _ in expected],
              f"{[e.value for e in got]}")
        for e, (step, _, wall) in zip(got, expected):
            if wall is None:
                check(f"{tag}@{step}: wall_time is now", t0 - 1 <= e.wall_time <= t1 + 1, f"{e.wall_time}")
            else:
                check(f"{tag}@{step}: wall_time", e.wall_time == wall, f"{e.wall_time!r}")

    # --- TensorBoard: raw Event protos (file_version record, negative int64 step) ---
    files = glob.glob(os.path.join(tmp, "events", "*tfevents*"))
    check("one event file", len(files) == 1, f"{files}")
    events = list(event_file_loader.LegacyEventFileLoader(files[0]).Load()) if files else []
    check("first event is file_version brain.Event:2",
          bool(events) and events[0].file_version == "brain.Event:2"
          and t0 - 1 <= events[0].wall_time <= t1 + 1, f"{events[:1]}")
    check("event count", len(events) == 1 + sum(map(len, EXPECTED_SCALARS.values())), f"{len(events)}")
    files = glob.glob(os.path.join(tmp, "events_negative_step", "*tfevents*"))
    events = list(event_file_loader.LegacyEventFileLoader(files[0]).Load()) if len(files) == 1 else []
    check("negative step", len(events) == 2 and events[1].step == -7 and events[1].wall_time == 1.0
          and events[1].summary.value[0].tag == "x" and events[1].summary.value[0].simple_value == 1.0,
          f"{events}")

    # --- safetensors via numpy: every dtype numpy has ---
    path = os.path.join(tmp, "numpy.safetensors")
    loaded = safetensors.numpy.load_file(path)
    check("numpy.safetensors: names", set(loaded) == set(NUMPY_TENSORS), f"{sorted(loaded)}")
    for name, want in NUMPY_TENSORS.items():
        got = loaded.get(name)
        check(f"numpy.safetensors: {name} {want.dtype}{list(want.shape)}",
              got is not None and same_array(got, want), f"{got!r}")
    with safetensors.safe_open(path, framework="numpy") as f:
        check("numpy.safetensors: metadata", f.metadata() == NUMPY_METADATA, f"{f.metadata()}")

    # --- safetensors with BF16: torch if present, else the raw bytes ---
    path = os.path.join(tmp, "bf16.safetensors")
    try:
        import torch
        import safetensors.torch
    except ImportError:
        torch = None
    if torch is not None:
        loaded = safetensors.torch.load_file(path)
        check("bf16.safetensors: names", set(loaded) == {"w", *BF16_OTHERS}, f"{sorted(loaded)}")
        w = loaded.get("w")
        check("bf16.safetensors: w BF16[2, 3] (torch)",
              w is not None and w.dtype == torch.bfloat16
              and same_array(w.view(torch.int16).numpy().view(np.uint16), BF16_BITS), f"{w!r}")
        for name, want in BF16_OTHERS.items():
            got = loaded.get(name)
            check(f"bf16.safetensors: {name} {want.dtype}{list(want.shape)} (torch)",
                  got is not None and same_array(got.numpy(), want), f"{got!r}")
    else:
        print("note: torch not importable; comparing BF16 raw bytes via the header")
        with open(path, "rb") as fh:
            raw = fh.read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        buf = raw[8 + n:]
        info = header.get("w", {})
        b, e = info.get("data_offsets", (0, 0))
        check("bf16.safetensors: w BF16[2, 3] (raw)",
              info.get("dtype") == "BF16" and info.get("shape") == [2, 3] and buf[b:e] == BF16_BITS.tobytes(),
              f"{info}")
        with safetensors.safe_open(path, framework="numpy") as f:
            for name, want in BF16_OTHERS.items():
                got = f.get_tensor(name)
                check(f"bf16.safetensors: {name} {want.dtype}{list(want.shape)} (numpy)",
                      same_array(got, want), f"{got!r}")
    with safetensors.safe_open(path, framework="numpy") as f:
        check("bf16.safetensors: metadata", f.metadata() == BF16_METADATA, f"{f.metadata()}")

print(f"{bad} failure(s)")
sys.exit(1 if bad else 0)
