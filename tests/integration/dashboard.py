"""trainbox run --dashboard (docs/dashboard.md), on CPU with a torch-free 2-rank job:
  1. a non-loopback bind without a token is refused at start (exit 2, one line);
  2. /api/state shows both ranks with advancing steps; / is the page; curves from metrics.jsonl;
  3. /metrics passes `promtool check metrics` (Debian's prometheus; without it that part alone
     is skipped, as `SKIP part promtool`, which scripts/check-skips counts);
  4. 200 idle connections stop neither the job nor the page; an oversized request line (414), header
     line (400) and a POST (405) are refused;
  5. a SIGSTOPped rank is marked stalled within the stall timeout + 2 s, and the log panel's
     default (job.log_rank) is that rank;
  6. with a token, a request without it gets 403 (with it, 200), a UTF-8 text naming trainbox run;
  7. /api/state: job.run_dir is the worker's run dir, job.metrics_path its metrics.jsonl; each
     rank's samples/s is its steps/s x the samples a rank trains a step (global_batch / world_size
     of the worker's lines: 8), the job's the sum; with rank 0's log empty the log panel opens on
     rank 1;
  8. the connection cap (a job of its own): 256 connections at once are served, the 257th waits
     (no answer, no refusal) until they close, then is served, and new connections too.
Every wait is bounded; the job is killed on the way out.
  TRAINBOX_BIN=build/bin/trainbox python3 tests/integration/dashboard.py
"""
import http.client
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BIN = os.environ["TRAINBOX_BIN"]
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "python", "heartbeat_worker.py")
STALL_TIMEOUT = 3
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from dashlib import check, failed, free_port  # noqa: E402
sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)


def get(port, path, headers=None, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def state(port, token=""):
    """The state, or None while the dashboard answers 503 (its first state not yet collected)."""
    status, body = get(port, "/api/state" + (f"?token={token}" if token else ""))
    if status != 200:
        return None
    s = json.loads(body)
    if "ranks" not in s and s.get("mode") != "runs":
        check("a 200 /api/state always holds the job's ranks (503 before the first state)", False, body[:200])
        return None
    return s


def start(port, tmp, extra, seconds=40, worker_args=()):
    cmd = [BIN, "run", "--standalone", "--nproc-per-node", "2", "--no-instrument", "--dashboard", f"127.0.0.1:{port}",
           "--stall-timeout", str(STALL_TIMEOUT), "--on-stall", "dump", "--log-dir", os.path.join(tmp, "logs"),
           *extra, "--", sys.executable, WORKER, "--seconds", str(seconds), "--run-dir", os.path.join(tmp, "run"),
           *worker_args]
    out = open(os.path.join(tmp, "launcher.out"), "w")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)


def wait_state(port, pred, limit, token=""):
    end = time.time() + limit
    while time.time() < end:
        try:
            s = state(port, token)
            if s is not None and pred(s):
                return s
        except (OSError, ValueError, http.client.HTTPException):
            pass
        time.sleep(0.1)
    return None


def refused_without_token(tmp):
    env = {k: v for k, v in os.environ.items() if k != "TRAINBOX_DASHBOARD_TOKEN"}
    r = subprocess.run([BIN, "run", "--dashboard", "0.0.0.0:1", "--", "true"], capture_output=True, text=True,
                       env=env, cwd=tmp, timeout=30)
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    check("1. non-loopback bind without a token: exit 2", r.returncode == 2, f"got {r.returncode}")
    check("... with one line naming the token", len(lines) <= 2 and "needs a token" in lines[0], repr(lines))
    check("... and trainbox run's options for it", "--dashboard-token TOKEN" in r.stderr and "--token " not in r.stderr,
          r.stderr.strip()[-200:])


def idle_connections(port):
    idle = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        idle.append(s)
    t0 = time.time()
    before = state(port)
    took = time.time() - t0
    time.sleep(2.5)  # past the server's 2 s idle timeout: they are closed, never served forever
    after = state(port)
    check("4. 200 idle connections: the page still answers", before is not None and after is not None,
          f"/api/state in {took:.3f} s")
    check("... and the job goes on", after and before and after["ranks"][0]["step"] > before["ranks"][0]["step"])
    for s in idle:
        s.close()


def refuses_bad_requests(port):
    def first_line(data):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(data)
            try:
                return s.recv(200).decode(errors="replace").split("\r\n")[0]
            except OSError as e:
                return f"(no answer: {e})"

    # docs/dashboard.md "Bounded": request lines over 8 KiB get 414, header lines over 8 KiB 400,
    # and a body is never read (every method but GET and HEAD is 405 before it).
    line_cap, header_cap = bound("dashboard.request_line_cap"), bound("dashboard.header_line_cap")
    for n in (line_cap + 1, 100000):
        head = first_line(b"GET /" + b"a" * n + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        check(f"... a {n}-byte request line gets 414", head == "HTTP/1.1 414 URI Too Long", head)
    head = first_line(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (header_cap + 1) + b"\r\n\r\n")
    check(f"... a {header_cap + 8}-byte header line gets 400", head == "HTTP/1.1 400 Bad Request", head)
    head = first_line(b"POST /api/state HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000)
    check("... a POST with a 5000-byte body gets 405", head == "HTTP/1.1 405 Method Not Allowed", head)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("POST", "/api/state", body=b"x")
    r = c.getresponse()
    check("... a POST gets 405, Allow: GET, HEAD", r.status == 405 and r.getheader("Allow") == "GET, HEAD",
          f"{r.status} {r.getheader('Allow')}")
    c.close()


def connection_cap(port):
    """docs/dashboard.md "Bounded": at most 256 connections at once, more wait in the kernel's
    backlog. 256 connections, opened one after another, each get an answer and then hold their
    thread: each starts its next request and gets one more byte of it every 0.25 s (the server's
    read timeout is 2 s). The 257th, a whole request, gets nothing while they are held (no answer,
    no refusal, no reset); once they close it is answered, and a new connection too. A few
    seconds (one at a time: cpp-httplib's listen backlog is 5, and a burst of connects overflows
    it into 1 s SYN retransmits)."""
    def answered(s):  # one whole response: the head, then Content-Length bytes
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return "(closed)"
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                return "(closed)"
            body += chunk
        return head.split(b"\r\n")[0].decode(errors="replace")

    request = b"GET /api/state HTTP/1.1\r\nHost: x\r\n\r\n"
    held, heads, dropped, extra = [], [], [0], None
    last = [time.time()]

    def hold():  # a byte of the next request line on every held connection, every 0.25 s
        if time.time() - last[0] < 0.25:
            return
        last[0] = time.time()
        for s in held:
            try:
                s.sendall(b"a")
            except OSError:
                dropped[0] += 1

    t0 = time.time()
    try:
        for _ in range(256):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            try:
                s.sendall(request)
                heads.append(answered(s))
                s.sendall(b"GET /api/state?hold=")  # the next request, held open from here on
            except OSError as e:
                heads.append(f"(no answer: {e})")
            held.append(s)
            hold()
        ok = sum(h == "HTTP/1.1 200 OK" for h in heads)
        print(f"     (256 connections answered one by one in {time.time() - t0:.2f} s)")
        check("8. 256 connections at once are each answered", ok == 256,
              f"{ok} of 256; first other: {next((h for h in heads if h != 'HTTP/1.1 200 OK'), '')}")
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)  # the kernel's backlog takes it
        extra.sendall(request)
        early = b""
        end = time.time() + 1.5
        while time.time() < end and not early:
            hold()
            r, _, _ = select.select([extra], [], [], 0.05)
            if r:
                try:
                    early = extra.recv(200) or b"(closed by the server)"
                except OSError as e:
                    early = f"({e})".encode()
        check("... the 257th waits while they are held (no answer, no refusal)", early == b"",
              early.decode(errors="replace").split("\r\n")[0])
        check("... (each held connection stayed open)", dropped[0] == 0, f"{dropped[0]} sends failed")
        for s in held:
            s.close()
        held = []
        extra.settimeout(10)
        try:
            late = answered(extra)
        except OSError as e:
            late = f"(no answer: {e})"
        check("... and is answered once they close", late == "HTTP/1.1 200 OK", str(late))
        check("... and the dashboard serves new connections again", state(port) is not None)
    finally:
        for s in held + ([extra] if extra else []):
            s.close()


def stopped_rank_is_stalled(port, s):
    pid = next(r["pid"] for r in s["ranks"] if r["rank"] == 1)
    os.kill(pid, signal.SIGSTOP)
    t0 = time.time()
    got = wait_state(port, lambda s: any(r["rank"] == 1 and r["stalled"] for r in s["ranks"]), STALL_TIMEOUT + 10)
    took = time.time() - t0
    os.kill(pid, signal.SIGCONT)
    slack = bound("dashboard.stall_marked")
    check(f"5. a SIGSTOPped rank shows stalled within {STALL_TIMEOUT} + {slack} s", got is not None and took <= STALL_TIMEOUT + slack,
          f"{took:.1f} s")
    check("... with the console's headline", got is not None and "rank 1" in got["job"]["stall_headline"],
          got["job"]["stall_headline"] if got else "")
    check("... and the log panel opens on it (job.log_rank)", got is not None and got["job"]["log_rank"] == 1,
          str(got["job"]["log_rank"]) if got else "")


def rates_and_paths(port, tmp):
    s = wait_state(port, lambda n: all(r["samples_per_s"] is not None for r in n["ranks"]), 10)
    run = os.path.join(tmp, "run")
    check("7. job.run_dir is the run dir", s is not None and s["job"]["run_dir"] == run,
          s["job"]["run_dir"] if s else "")
    check("... job.metrics_path its metrics.jsonl", s is not None and s["job"]["metrics_path"] == run + "/metrics.jsonl")
    if s is None:
        return
    # The worker's lines: global_batch 8 x world, world_size 2 -> 8 samples a step and rank.
    per_step = [r["samples_per_s"] / r["steps_per_s"] for r in s["ranks"]]
    check("... each rank's samples/s = its steps/s x 8 (global_batch / world_size)",
          all(abs(v - 8) < 1e-9 for v in per_step), str(per_step))
    total = sum(r["samples_per_s"] for r in s["ranks"])
    check("... the job's samples/s is the ranks' sum", abs(s["job"]["samples_per_s"] - total) < 1e-6,
          f'{s["job"]["samples_per_s"]} vs {total}')
    check("... with both logs written, the log panel opens on rank 0", s["job"]["log_rank"] == 0,
          str(s["job"]["log_rank"]))


def main_job(tmp):
    port = free_port()
    t0 = time.time()
    job = start(port, tmp, [])
    try:
        s = wait_state(port, lambda s: len(s["ranks"]) == 2 and min(r["step"] for r in s["ranks"]) > 0, 20)
        check("2. /api/state shows both ranks", s is not None, f"steps after {time.time() - t0:.1f} s")
        if s is None:
            return
        later = wait_state(port, lambda n: all(r["step"] > p["step"] for r, p in zip(n["ranks"], s["ranks"])), 5)
        check("... with advancing steps", later is not None)
        # A browser accepts brotli; compressing every poll of /api/state once cost 89 % of the
        # launcher's CPU at 256 ranks (src/dashboard/dashboard.cpp, kJson): the answer is plain.
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/api/state", headers={"Accept-Encoding": "gzip, deflate, br"})
        r = c.getresponse()
        body = r.read()
        c.close()
        check("... /api/state is not compressed for a browser (no per-poll brotli)",
              r.status == 200 and r.getheader("Content-Encoding") is None and json.loads(body)["ranks"],
              f"{r.status} {r.getheader('Content-Encoding')}")
        status, page = get(port, "/")
        check("... / is the page", status == 200 and b"<title>trainbox run</title>" in page)
        c = wait_state(port, lambda n: "train/loss" in n["curves"], 10)
        check("... curves from rank 0's metrics.jsonl", c is not None)
        # a rank's rate is over its training time, so it comes a second after its first step
        k = wait_state(port, lambda n: n["ranks"][0]["samples_per_s"] is not None, 10)
        check("... samples/s known from it", c is not None and k is not None)
        rates_and_paths(port, tmp)
        status, text = get(port, "/metrics")
        with open(os.path.join(tmp, "metrics.txt"), "wb") as f:
            f.write(text)
        check("3. /metrics answers", status == 200, str(status))
        if shutil.which("promtool"):  # the rest of the test runs without it; check-skips counts the part
            p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
            check("... and passes promtool check metrics", p.returncode == 0, (p.stdout + p.stderr).decode()[:300])
        else:
            print("SKIP part promtool: promtool is not installed (Debian package prometheus; scripts/bootstrap)")
        check("... with every rank's trainbox_step", text.count(b"\ntrainbox_step{") == 2)
        check("... and the experts' load from metrics.jsonl's \"moe\" (docs/moe.md)",
              b'\ntrainbox_moe_load_imbalance{layer="0"} 3\n' in text and
              b'\ntrainbox_moe_expert_tokens{layer="0",expert="2"} 0\n' in text, text.decode()[-400:])
        idle_connections(port)
        refuses_bad_requests(port)
        stopped_rank_is_stalled(port, s)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def cap_job(tmp):
    """The connection cap on a job of its own (a few seconds; main_job's is busy with its own checks)."""
    port = free_port()
    job = start(port, tmp, [], seconds=30)
    try:
        s = wait_state(port, lambda s: len(s["ranks"]) == 2, 20)
        check("8. a job for the connection cap: the page answers", s is not None)
        if s is not None:
            connection_cap(port)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=40)


def token_job(tmp):
    port = free_port()
    job = start(port, tmp, ["--dashboard-token", "t0ken"], seconds=20, worker_args=["--quiet-rank", "0"])
    try:
        ok = wait_state(port, lambda s: len(s["ranks"]) == 2, 20, token="t0ken")
        check("6. with a token: the page answers with it", ok is not None)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/")
        r = c.getresponse()
        body = r.read().decode("utf-8")
        c.close()
        check("... 403 without it", r.status == 403)
        check("... as UTF-8 text", r.getheader("Content-Type") == "text/plain; charset=utf-8", r.getheader("Content-Type"))
        check("... naming the command that printed the URL", "trainbox run --dashboard printed" in body, body.strip())
        # rank 0 prints nothing here: the log panel opens on the first rank with a log
        got = wait_state(port, lambda s: s["job"]["log_rank"] == 1, 10, token="t0ken")
        check("7. rank 0's log empty: the log panel opens on rank 1", got is not None)
        check("... 403 with a wrong one", get(port, "/metrics?token=t0ke")[0] == 403)
        check("... 200 with Authorization: Bearer", get(port, "/metrics", {"Authorization": "Bearer t0ken"})[0] == 200)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=40)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([BIN, "run", "--dashboard", "0", "--", "true"], capture_output=True, text=True, cwd=tmp,
                           timeout=30)
        if "without cpp-httplib" in r.stderr:
            print("SKIP: this trainbox was built without cpp-httplib")
            return 77
        refused_without_token(tmp)
        os.makedirs(os.path.join(tmp, "a"))
        os.makedirs(os.path.join(tmp, "b"))
        main_job(os.path.join(tmp, "a"))
        token_job(os.path.join(tmp, "b"))
        os.makedirs(os.path.join(tmp, "c"))
        cap_job(os.path.join(tmp, "c"))
    print("FAILED: " + ", ".join(failed) if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
