"""trainbox run --dashboard scraped by a real Prometheus (Debian's /usr/bin/prometheus): a 2-rank
CPU job's /metrics as the only target (scrape_interval 1s), and after two scrapes Prometheus's own
HTTP API (/api/v1/query?query=trainbox_step) has a sample for every rank, with up == 1.
Everything on loopback; Prometheus's TSDB in a temp folder; both stopped (SIGTERM) on the way
out. Exit 77 without /usr/bin/prometheus.
  TRAINBOX_BIN=build/bin/trainbox python3 tests/integration/dashboard_prometheus.py
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

BIN = os.environ["TRAINBOX_BIN"]
PROMETHEUS = "/usr/bin/prometheus"
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python", "heartbeat_worker.py")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from dashlib import check, failed, free_port  # noqa: E402


def query(prom_port, expr):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    return body["data"]["result"] if body.get("status") == "success" else None


def wait_query(prom_port, expr, pred, limit):
    end = time.time() + limit
    last = None
    while time.time() < end:
        try:
            last = query(prom_port, expr)
            if last is not None and pred(last):
                return last, True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.25)
    return last, False


def stop(p, name):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
    try:
        return p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        check(f"{name} stopped on SIGTERM within 15 s", False)
        return None


def main():
    if not os.access(PROMETHEUS, os.X_OK):
        print(f"SKIP: {PROMETHEUS} missing (apt-get install prometheus)")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        dash_port, prom_port = free_port(), free_port()
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: trainbox\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{dash_port}']\n")
        prom = subprocess.Popen([PROMETHEUS, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/tsdb",
                                 f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                                stdout=open(os.path.join(tmp, "prometheus.log"), "w"), stderr=subprocess.STDOUT,
                                cwd=tmp, start_new_session=True)
        job = subprocess.Popen([BIN, "run", "--standalone", "--nproc-per-node", "2", "--no-instrument", "--dashboard",
                                f"127.0.0.1:{dash_port}", "--", sys.executable, WORKER, "--seconds", "25", "--run-dir",
                                os.path.join(tmp, "run")], stdout=open(os.path.join(tmp, "job.log"), "w"),
                               stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)
        t0 = time.time()
        try:
            up, ok = wait_query(prom_port, "up", lambda r: any(x["value"][1] == "1" for x in r), 20)
            check("Prometheus scrapes the dashboard (up == 1)", ok, f"{up} after {time.time() - t0:.1f} s")
            # two scrapes: the count of samples in the last 10 s reaches 2 for every rank
            res, ok = wait_query(prom_port, "count_over_time(trainbox_step[10s])",
                                 lambda r: len(r) == 2 and all(int(x["value"][1]) >= 2 for x in r), 15)
            check("... two scrapes of both ranks", ok, json.dumps(res)[:300])
            res = query(prom_port, "trainbox_step")
            ranks = sorted(x["metric"].get("rank") for x in res or [])
            check("/api/v1/query?query=trainbox_step: a sample for every rank", ranks == ["0", "1"], str(ranks))
            check("... labelled with the job and host", all(x["metric"].get("job") == "trainbox" and
                                                            x["metric"].get("host") for x in res or []))
            res = query(prom_port, "trainbox_world_size")
            check("... trainbox_world_size is 2", res and res[0]["value"][1] == "2", str(res))
            print(f"# {time.time() - t0:.1f} s from start to the checks")
        finally:
            stop(job, "trainbox run")
            rc = stop(prom, "prometheus")
            check("Prometheus stopped cleanly (exit 0)", rc == 0, f"exit {rc}")
    print("FAILED: " + ", ".join(failed) if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
