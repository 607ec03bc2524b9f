"""Fashion-MNIST's IDX files (gzip) as numpy arrays, for the Python peers (train_peer.py,
ddp_peer.py). A module of its own: importing train_peer.py runs its whole training."""
import gzip

import numpy as np


def load_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
