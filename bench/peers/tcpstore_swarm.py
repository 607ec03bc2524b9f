"""The anchor for bench/rendezvous_scale.sh: torch's TCPStore with N clients in one process.

What torch's rendezvous does with a store, reduced to formation: node 0 hosts a TCPStore
(the libuv backend, torch's default), every node connects a client, sets its own key
(host, address), adds itself to a counter; the last one sets "all"; everybody waits for "all"
and then reads every node's key (the full membership, as our `assign` carries it). One thread
per client (store calls release the GIL). Prints one JSON line:
  {"nodes": N, "formation_ms": …, "torch": "2.x"}
    python tcpstore_swarm.py N [TIMEOUT_S]
"""
import json
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    n = int(sys.argv[1])
    timeout = timedelta(seconds=float(sys.argv[2]) if len(sys.argv) > 2 else 120)
    master = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, timeout=timeout, wait_for_workers=False)
    port = master.port
    done = [None] * n
    errors = []

    def node(i):
        try:
            s = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
            s.set(f"rdzv/node/{i}", json.dumps({"host": f"node-{i}", "addr": "127.0.0.1", "nproc": 1}))
            if s.add("rdzv/joined", 1) == n:
                s.set("rdzv/all", "1")
            s.wait(["rdzv/all"])
            members = s.multi_get([f"rdzv/node/{k}" for k in range(n)])
            assert len(members) == n
            done[i] = time.monotonic()
        except Exception as e:  # noqa: BLE001 — reported, the run fails
            errors.append(f"node {i}: {e}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=node, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors or None in done:
        print(json.dumps({"nodes": n, "error": (errors or ["a node did not finish"])[0]}))
        return 1
    print(json.dumps({"nodes": n, "formation_ms": round((max(done) - t0) * 1000, 1), "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
