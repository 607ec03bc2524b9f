"""What the dashboard tests share (dashboard.py, dashboard_prometheus.py, dash_runs.py): the
check line they print and the failures it collects, and a free loopback port."""
import socket

failed = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (f" ({detail})" if detail else ""), flush=True)
    if not ok:
        failed.append(name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
