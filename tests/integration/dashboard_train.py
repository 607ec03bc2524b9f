"""The dashboard's figures against the console's, on a real 2-rank `trainbox train` under
`trainbox run --dashboard` (CPU, Gloo; issue 34 item 5: the page showed half the real samples/s):
  1. each rank's samples/s on /api/state is its steps/s x the samples a rank trains a step
     (train.batch_size, the config's figure), and the job's is their sum;
  2. the job's samples/s on /api/state, polled during the run, is the console's progress rate
     (the `[rank 0] epoch … N samples/s` line printed at that time): the median ratio within
     [0.67, 1.5] (the old bug read 0.5; the two are averaged over different windows);
  3. metrics.jsonl says what the console says: each `train` line's samples_per_s is the console
     line's at that step (to its printed digits), the summary's is the `done:` line's, the job's
     samples are global_batch x steps, and global_batch / world_size is the config's batch;
  3b. the communication figures (docs/distributed.md, "Reading the communication figures"): the
     summary's and every train line's bytes sent per step per rank are the gradient bytes (plain
     fp32 DDP at 2 ranks: 2(N-1)/N = 1x), ratio 1, and /metrics has each rank's bytes, ratio
     and time waiting as metrics.jsonl says;
  4. /api/state's job.run_dir is the run dir and job.metrics_path its metrics.jsonl.
Everything lives in a temporary folder (the launcher's --log-dir too).
  TRAINBOX_BIN=build/bin/trainbox python3 tests/integration/dashboard_train.py
"""
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.environ["TRAINBOX_BIN"]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from dashlib import check, failed, free_port  # noqa: E402
sys.path.insert(0, os.path.join(os.environ["TRAINBOX_SOURCE_DIR"], "tests"))
from claims import bound  # noqa: E402  (tests/claims.toml)

BATCH = 32
# Two 256-wide layers on 1 thread a rank: a step takes about 4 ms, so 6 epochs (1200 steps) last
# about 5 s (the dashboard's rate needs over 1 s of steps); 12800 samples are 200 full batches a rank, so
# every step trains the whole global batch.
JOB = ["--set", "data.dataset=synthetic", "--set", "data.synthetic_samples=12800", "--set", "train.epochs=6",
       "--set", f"train.batch_size={BATCH}", "--set", "model.hidden=[256,256]", "--set", "train.threads=1",
       "--set", "train.log_every=25", "--set", "output.progress=lines", "--set", "checkpoint.every_epochs=0",
       "--set", "train.device=cpu", "--set", "output.tensorboard=false"]
PROGRESS = re.compile(r"^\[rank 0\] epoch \S+ batch \S+ step (\d+)\S* loss \S+ lr \S+ (\d+) samples/s")
DONE = re.compile(r"^\[rank 0\]\s+\S+ s wall, (\d+) samples/s")


def state(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/api/state")
        r = c.getresponse()
        return json.loads(r.read()) if r.status == 200 else None
    finally:
        c.close()


def prometheus(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        return r.read().decode() if r.status == 200 else ""
    finally:
        c.close()


COMM = re.compile(r'^(trainbox_comm_sent_bytes_per_step|trainbox_compression_ratio|trainbox_comm_wait_seconds_per_step)'
                  r'\{rank="(\d+)".*compression="([^"]*)"\} (\S+)$')


def console_lines(path):
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def last_console_rate(path):
    rates = [int(m.group(2)) for m in map(PROGRESS.match, console_lines(path)) if m]
    return rates[-1] if rates else None


def main():
    with tempfile.TemporaryDirectory() as tmp:
        port, run_dir, out_path = free_port(), os.path.join(tmp, "run"), os.path.join(tmp, "console.txt")
        cmd = [BIN, "run", "--standalone", "--nproc-per-node", "2", "--no-instrument", "--dashboard",
               f"127.0.0.1:{port}", "--log-dir", os.path.join(tmp, "logs"), "--", BIN, "train", *JOB, "--run-dir",
               run_dir]
        with open(out_path, "w") as out:
            job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)
        pairs, identity, seen, comm_text = [], [], None, ""
        try:
            end = time.time() + 90
            while time.time() < end and job.poll() is None:
                time.sleep(0.5)
                try:
                    s = state(port)
                except (OSError, ValueError, http.client.HTTPException):
                    continue
                if not s or len(s["ranks"]) != 2 or s["job"]["samples_per_s"] is None:
                    continue
                seen = s
                if not comm_text and all(r.get("comm_sent_bytes_per_step") is not None for r in s["ranks"]):
                    try:
                        comm_text = prometheus(port)
                    except (OSError, http.client.HTTPException):
                        pass
                console = last_console_rate(out_path)
                if console and all(r["samples_per_s"] is not None for r in s["ranks"]):
                    pairs.append((s["job"]["samples_per_s"], console))
                    identity.append(s)
            rc = job.wait(timeout=max(1, end - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            rc = job.wait()
        lines = console_lines(out_path)
        check("the 2-rank trainbox train under trainbox run --dashboard succeeds", rc == 0,
              f"exit {rc}: " + " | ".join(lines[-5:]))
        check("/api/state had both ranks' rates and the console its rate", len(pairs) >= 2, f"{len(pairs)} polls")
        if rc != 0 or len(pairs) < 2:
            print("FAILED: " + ", ".join(failed))
            return 1

        # --- 1. per rank: steps/s x the config's batch; the job: the ranks' sum ---
        worst = max(abs(r["samples_per_s"] / r["steps_per_s"] - BATCH) for s in identity for r in s["ranks"])
        check(f"1. each rank's samples/s = its steps/s x train.batch_size ({BATCH})", worst < 1e-6,
              f"worst difference {worst:.3g}")
        worst = max(abs(s["job"]["samples_per_s"] - sum(r["samples_per_s"] for r in s["ranks"])) for s in identity)
        check("... the job's samples/s = the sum of the ranks'", worst < 1e-6, f"worst difference {worst:.3g}")

        # --- 2. the page's job rate against the console's at the same time ---
        ratio = statistics.median(page / console for page, console in pairs)
        lo, hi = bound("dashboard.train_rate_ratio")
        check(f"2. the page's job samples/s is the console's (median ratio in [{lo}, {hi}])", lo <= ratio <= hi,
              f"median ratio {ratio:.3f} over {len(pairs)} polls, last {pairs[-1][0]:.0f} vs {pairs[-1][1]}")

        # --- 3. metrics.jsonl against the console ---
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f if line.strip()]
        train = [r for r in records if r["event"] == "train"]
        summary = next((r for r in records if r["event"] == "summary"), None)
        console = {int(m.group(1)): int(m.group(2)) for m in map(PROGRESS.match, lines) if m}
        mismatched = [(t["step"], t["samples_per_s"], console.get(t["step"])) for t in train
                      if console.get(t["step"]) is None or abs(t["samples_per_s"] - console[t["step"]]) > 0.5]
        check("3. every train line's samples_per_s is the console's at that step", train and not mismatched,
              f"{len(train)} lines; mismatched (step, jsonl, console): {mismatched[:3]}")
        scoped = all(t["global_batch"] == 2 * BATCH and t["world_size"] == 2 and
                     t["samples"] == t["global_batch"] * t["step"] for t in train)
        check("... each says the job's global batch and world (global_batch / world_size = the batch), "
              "and counts the job's samples", scoped, json.dumps(train[-1]))
        done = next((int(m.group(1)) for m in map(DONE.match, lines) if m), None)
        check("... the summary's samples_per_s is the console's done: line",
              summary is not None and done is not None and abs(summary["samples_per_s"] - done) <= 0.5,
              f"{summary and summary['samples_per_s']} vs {done}")
        check("... the summary counts the job's samples as the train lines do",
              summary is not None and summary["samples"] == train[-1]["samples"] == summary["steps"] * 2 * BATCH and
              summary["world_size"] == 2 and summary["global_batch"] == 2 * BATCH,
              f"{summary and summary['samples']} vs {train[-1]['samples']}")

        # --- 3b. the communication figures: summary, train lines and /metrics (plain fp32 DDP at 2 ranks sends
        # 2(N-1)/N = 1 x the gradient bytes a step from each rank: ratio 1; docs/distributed.md) ---
        grad = summary["model_state"]["params"] if summary else -1
        comms = ([summary["comm"]] if summary and "comm" in summary else []) + [t.get("comm", {}) for t in train]
        consistent = bool(comms) and all(
            c.get("fp32_bytes_per_step") == grad and len(c.get("sent_bytes_per_step", [])) == 2 and
            all(abs(b - grad) <= 1 for b in c["sent_bytes_per_step"]) for c in comms)
        check("3b. summary and every train line: bytes sent per step per rank = the gradient bytes (ratio 1)",
              consistent, json.dumps(comms[:2]))
        scraped = {(m.group(1), int(m.group(2))): (m.group(3), float(m.group(4)))
                   for m in map(COMM.match, comm_text.splitlines()) if m}
        want = {("trainbox_comm_sent_bytes_per_step", r): grad for r in (0, 1)}
        want.update({("trainbox_compression_ratio", r): 1.0 for r in (0, 1)})
        got_ok = all(k in scraped and scraped[k][0] == "none" and abs(scraped[k][1] - v) <= 1e-6 * max(1, v)
                     for k, v in want.items())
        got_ok &= all(("trainbox_comm_wait_seconds_per_step", r) in scraped for r in (0, 1))
        check("... /metrics has each rank's bytes sent per step, ratio and time waiting, as metrics.jsonl says",
              got_ok, str(scraped) or "no trainbox_comm_* lines")

        # --- 4. where the run is ---
        check("4. job.run_dir is the run dir", seen["job"]["run_dir"] == run_dir, seen["job"]["run_dir"])
        check("... job.metrics_path its metrics.jsonl", seen["job"]["metrics_path"] == run_dir + "/metrics.jsonl",
              seen["job"]["metrics_path"])
    print("FAILED: " + ", ".join(failed) if failed else "all passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
