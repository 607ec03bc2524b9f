"""trainbox dash RUN_DIR… (docs/dashboard.md): two real `trainbox train` runs that differ in optim.lr,
compared:
  1. /api/state has both runs, each with train/loss, train/lr and eval curves that have points;
  2. the config diff names optim.lr (with each run's value) and not the keys they share;
  3. read-only and bounded as trainbox run --dashboard (POST 405, /metrics 404, a non-loopback
     bind without a token refused with exit 2 naming dash's --addr and --token, a folder that is no
     run refused with exit 2; with --token, a request without it gets 403 as UTF-8 text naming
     trainbox dash);
  4. in headless chromium (Selenium; exit 77 without it) the page overlays both runs: the
     train/loss canvas has data-series=2, the legend has 2 runs, the diff table has optim.lr;
     a screenshot goes to $TRAINBOX_ARTIFACT_DIR (else the current folder) as dash_runs.png.
  TRAINBOX_BIN=build/bin/trainbox python3 tests/integration/dash_runs.py
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

BIN = os.environ["TRAINBOX_BIN"]
# The training runs need trainbox-torch: $TRAINBOX_TRAIN_BIN where the dash binary is torch-free.
TRAIN_BIN = os.environ.get("TRAINBOX_TRAIN_BIN", BIN)
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SMALL = ["--set", "data.dataset=synthetic", "--set", "data.synthetic_samples=512", "--set", "train.epochs=2",
         "--set", "train.batch_size=32", "--set", "model.hidden=[64]", "--set", "train.threads=1", "--set",
         "train.log_every=1", "--set", "output.progress=off", "--set", "checkpoint.every_epochs=0", "--set",
         "train.device=cpu", "--set", "train.deterministic=true"]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "python"))
from dashlib import check, failed  # noqa: E402


def request(port, path, method="GET"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def train(tmp, name, lr):
    run_dir = os.path.join(tmp, "runs", name)
    r = subprocess.run([TRAIN_BIN, "train", *SMALL, "--set", f"optim.lr={lr}", "--run-dir", run_dir], cwd=tmp,
                       capture_output=True, text=True, timeout=120)
    check(f"trainbox train {name} (lr {lr})", r.returncode == 0, r.stderr[-300:])
    return run_dir


def start_dash(tmp, dirs):
    p = subprocess.Popen([BIN, "dash", *dirs, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp, start_new_session=True)
    line = p.stdout.readline()  # "trainbox dash: http://127.0.0.1:PORT/ (2 runs; Ctrl-C stops)"
    url = next((w for w in line.split() if w.startswith("http://")), None)
    err = "" if url else p.stderr.read()
    if "without cpp-httplib" in err:
        return p, "skip"
    check("trainbox dash prints its URL on stdout", url is not None, line.strip() or err[-300:])
    return p, url


def wait_runs(port, n, limit=10):
    end = time.time() + limit
    while time.time() < end:
        try:
            status, body = request(port, "/api/state")
            s = json.loads(body)
            if s.get("mode") == "runs" and len(s["runs"]) == n and all(r["curves"] and r["config_found"]
                                                                       for r in s["runs"]):
                return s
        except (OSError, ValueError, http.client.HTTPException):
            pass
        time.sleep(0.2)
    return None


def api_checks(port, runs_dirs):
    s = wait_runs(port, 2)
    check("1. /api/state has both runs", s is not None)
    if s is None:
        return
    for r, d in zip(s["runs"], runs_dirs):
        pts = {k: len(v) for k, v in r["curves"].items()}
        check(f"... {r['name']}: train/loss, train/lr and eval/accuracy with points",
              r["dir"] == d and pts.get("train/loss", 0) >= 10 and pts.get("train/lr", 0) >= 10 and
              pts.get("eval/accuracy", 0) >= 1, str(pts))
        check(f"... {r['name']} finished", r["status"] == "finished", r["status"])
    diff = {d["key"]: d["values"] for d in s["config_diff"]}
    check("2. the config diff names optim.lr with both values", diff.get("optim.lr") == ["0.1", "0.01"],
          str(diff.get("optim.lr")))
    check("... and no key both runs share", "train.epochs" not in diff and "model.name" not in diff,
          ", ".join(sorted(diff)))
    check("3. POST gets 405", request(port, "/api/state", "POST")[0] == 405)
    check("... /metrics is 404 (no job)", request(port, "/metrics")[0] == 404)
    status, body = request(port, "/api/log?rank=x")
    check("... /api/log?rank=x is 400 naming the value (util/parse.h), not rank 0's log",
          status == 400 and body.startswith(b"rank=x: must be a whole number"), f"{status} {body[:80]!r}")
    status, page = request(port, "/")
    check("... / is the page", status == 200 and b"renderRuns" in page)


def refusals(tmp, dirs):
    env = {k: v for k, v in os.environ.items() if k != "TRAINBOX_DASHBOARD_TOKEN"}
    r = subprocess.run([BIN, "dash", *dirs, "--addr", "0.0.0.0", "--port", "0"], capture_output=True, text=True,
                       env=env, timeout=30)
    check("... a non-loopback bind without a token: exit 2", r.returncode == 2 and "needs a token" in r.stderr,
          r.stderr.strip()[:200])
    check("... naming trainbox dash's options (--addr, --token), not trainbox run's",
          "trainbox dash --addr 0.0.0.0" in r.stderr and "--token TOKEN" in r.stderr and "--dashboard" not in r.stderr,
          r.stderr.strip()[-300:])
    p = subprocess.Popen([BIN, "dash", *dirs, "--port", "0", "--token", "t0ken"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    try:
        line = p.stdout.readline()
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0]) if "http://127.0.0.1:" in line else 0
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/")
        res = c.getresponse()
        body = res.read().decode("utf-8")
        c.close()
        check("... with --token, 403 without it: UTF-8 text naming trainbox dash",
              res.status == 403 and res.getheader("Content-Type") == "text/plain; charset=utf-8" and
              "trainbox dash printed" in body, f"{res.status} {res.getheader('Content-Type')} {body.strip()}")
    except (OSError, ValueError, http.client.HTTPException) as e:
        check("... with --token, 403 without it", False, f"{e!r} after {line.strip()!r}")
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=10)
    r = subprocess.run([BIN, "dash", tmp + "/logs-none", "--port", "0"], capture_output=True, text=True, timeout=30)
    check("... a folder that is no run: exit 2 naming it", r.returncode == 2 and "logs-none" in r.stderr,
          r.stderr.strip()[:200])


def browser(url):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        return "selenium missing (pip install -r deps/requirements-tools.txt)"
    if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
        return "chromium or chromium-driver missing (apt-get install chromium chromium-driver)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1100"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        driver.get(url)
        series = None
        for _ in range(100):  # ≤ 10 s: the first poll draws it
            found = driver.find_elements(By.CSS_SELECTOR, '#curves canvas[data-name="train/loss"]')
            if found:
                series = int(found[0].get_attribute("data-series"))
                break
            time.sleep(0.1)
        check("4. the page overlays both runs on train/loss (data-series)", series == 2, f"{series}")
        check("... a legend row per run", len(driver.find_elements(By.CSS_SELECTOR, "#runs tr.run")) == 2)
        row = driver.find_elements(By.CSS_SELECTOR, '#diff tr[data-key="optim.lr"]')
        check("... the diff table has optim.lr", len(row) == 1 and "0.01" in row[0].text, row[0].text if row else "")
        check("... the job's sections hidden", not driver.find_element(By.CSS_SELECTOR, "section.job").is_displayed())
        out = os.environ.get("TRAINBOX_ARTIFACT_DIR") or os.getcwd()
        os.makedirs(out, exist_ok=True)
        shot = os.path.join(out, "dash_runs.png")
        driver.save_screenshot(shot)
        print(f"screenshot: {shot}")
    finally:
        driver.quit()
    return None


def main():
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([BIN, "dash", "--help"], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            print("FAIL: trainbox dash --help: " + r.stderr[-300:])
            return 1
        dirs = [train(tmp, "lr-0.1", "0.1"), train(tmp, "lr-0.01", "0.01")]
        if failed:
            return 1
        dash, url = start_dash(tmp, dirs)
        skipped = None
        try:
            if url == "skip":
                print("SKIP: this trainbox was built without cpp-httplib")
                return 77
            if url:
                port = int(url.split(":")[2].split("/")[0])
                api_checks(port, dirs)
                refusals(tmp, dirs)
                skipped = browser(url)
        finally:
            os.killpg(dash.pid, signal.SIGTERM)
            rc = dash.wait(timeout=10)
            check("trainbox dash stops on SIGTERM with exit 0", rc == 0, f"{rc}")
    if failed:
        print("FAILED: " + ", ".join(failed))
        return 1
    if skipped:
        print(f"SKIP (the browser part): {skipped}")
        return 77
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
