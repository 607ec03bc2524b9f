"""The anchor for bench/rendezvous_scale.sh: torch's TCPStore with N clients in one process.

What torch's rendezvous does with a store, reduced to formation: node 0 hosts a TCPStore
(the libuv backend, torch's default), every node connects a client, sets its own key
(host, address), adds itself to a counter; the last one sets "all"; everybody waits for "all"
and then reads every node's key (the full membership, as our `assign` carries it). One thread
per client (store calls release the GIL). Then, as our swarm does once formed:
  - heartbeats: every node sets its key "hb/<i>" once a second (torchelastic's keep-alive,
    at our interval) for HB_SECONDS; the store server thread's CPU over that window, % of one
    core (its threads are the ones the master store started, read from /proc/self/task);
  - fail-together: every node waits on "rdzv/failed" (store.wait, torchelastic's way to hear
    of a change); one set of it; the time until the last node's wait returned.
Prints one JSON line:
  {"nodes": N, "formation_ms": …, "hb_cpu_pct": …, "fail_all_ms": …, "torch": "2.x"}
    python tcpstore_swarm.py N [TIMEOUT_S] [HB_SECONDS]
"""
import os
import json
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def tasks():
    return set(os.listdir("/proc/self/task"))


def cpu_s(tids):  # time on CPU in ns (schedstat: finer than stat's 10 ms ticks)
    total = 0
    for t in tids:
        try:
            total += int(open(f"/proc/self/task/{t}/schedstat").read().split()[0])
        except OSError:
            pass
    return total / 1e9


def main():
    n = int(sys.argv[1])
    timeout = timedelta(seconds=float(sys.argv[2]) if len(sys.argv) > 2 else 120)
    hb_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10
    before = tasks()
    master = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, timeout=timeout, wait_for_workers=False)
    server_threads = tasks() - before
    port = master.port
    done = [None] * n
    released = [None] * n
    errors = []
    formed = threading.Barrier(n + 1)
    stop_beats = threading.Event()

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
            formed.wait()
            k = 0
            while not stop_beats.wait(1.0 if k else (i % 100) / 100):  # spread over the second, as real nodes are
                s.set(f"hb/{i}", str(k))
                k += 1
            formed.wait()
            s.wait(["rdzv/failed"])
            released[i] = time.monotonic()
        except Exception as e:  # noqa: BLE001 — reported, the run fails
            errors.append(f"node {i}: {e}")
            formed.abort()

    t0 = time.monotonic()
    threads = [threading.Thread(target=node, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    out = {"nodes": n, "torch": torch.__version__, "server_threads": len(server_threads)}
    try:
        formed.wait()
        out["formation_ms"] = round((max(done) - t0) * 1000, 1)
        c0, w0 = cpu_s(server_threads), time.monotonic()
        time.sleep(hb_seconds)
        out["hb_cpu_pct"] = round((cpu_s(server_threads) - c0) / (time.monotonic() - w0) * 100, 2)
        stop_beats.set()
        formed.wait()
        time.sleep(0.5)  # every node is in its wait
        t_fail = time.monotonic()
        master.set("rdzv/failed", "node 0")
        for t in threads:
            t.join()
        out["fail_all_ms"] = round((max(released) - t_fail) * 1000, 1)
    except threading.BrokenBarrierError:
        pass
    if errors or None in done or None in released:
        print(json.dumps({**out, "error": (errors or ["a node did not finish"])[0]}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
