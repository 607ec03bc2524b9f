"""The dashboard page in a real browser (Selenium + Debian's chromium/chromium-driver): during a
2-rank CPU run it shows both ranks with steps that advance, and "no GPUs" on a machine without
NVIDIA GPUs; rank 0 prints nothing, so the log panel opens on rank 1 (the first with a log) and
shows its lines; the header names the run dir. A screenshot goes to $TRAINBOX_ARTIFACT_DIR (else the current folder) as
dashboard.png. Exit 77 when chromium, chromedriver or selenium is missing.
  TRAINBOX_BIN=build/bin/trainbox python3 tests/integration/dashboard_browser.py
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BIN = os.environ["TRAINBOX_BIN"]
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "python", "heartbeat_worker.py")
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def main():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        print("SKIP: selenium missing (pip install -r deps/requirements-tools.txt)")
        return 77
    if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
        print("SKIP: chromium or chromium-driver missing (apt-get install chromium chromium-driver)")
        return 77
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    fail = []

    def check(name, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + name + (f" ({detail})" if detail else ""), flush=True)
        if not ok:
            fail.append(name)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        job = subprocess.Popen([BIN, "run", "--standalone", "--nproc-per-node", "2", "--no-instrument", "--dashboard",
                                f"127.0.0.1:{port}", "--log-dir", os.path.join(tmp, "logs"), "--", sys.executable,
                                WORKER, "--seconds", "40", "--run-dir", os.path.join(tmp, "run"), "--quiet-rank", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp, start_new_session=True)
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
        try:
            steps = None
            for _ in range(200):  # ≤ 20 s: the launcher starts, the page loads and polls
                try:
                    driver.get(f"http://127.0.0.1:{port}/") if steps is None and _ % 20 == 0 else None
                    rows = driver.find_elements(By.CSS_SELECTOR, "#ranks tr.rank")
                    if len(rows) == 2:
                        steps = {r.get_attribute("data-rank"): int(r.find_element(By.CSS_SELECTOR, "td.step").text)
                                 for r in rows}
                        break
                except Exception:  # not up yet: the connection is refused, the table not drawn
                    pass
                time.sleep(0.1)
            check("the page shows both ranks", steps is not None and set(steps) == {"0", "1"},
                  f"after {time.time() - t0:.1f} s")
            time.sleep(2.5)
            rows = driver.find_elements(By.CSS_SELECTOR, "#ranks tr.rank")
            later = {r.get_attribute("data-rank"): int(r.find_element(By.CSS_SELECTOR, "td.step").text) for r in rows}
            check("... with steps that advance", steps is not None and all(later.get(k, -1) > v for k, v in steps.items()),
                  f"{steps} -> {later}")
            gpus = driver.find_element(By.ID, "gpus").text
            has_gpu = os.path.exists("/dev/nvidia0")
            check("... the GPU section", ("no GPUs" in gpus) != has_gpu or (has_gpu and "GPU" in gpus), gpus[:120])
            time.sleep(1.5)  # the curves come from metrics.jsonl after the first 5 steps
            check("... curves drawn", len(driver.find_elements(By.CSS_SELECTOR, "#curves canvas")) >= 1)
            shown = driver.find_element(By.ID, "logrank").get_attribute("data-rank")
            log = driver.find_element(By.ID, "log").text
            check("... the log panel opens on rank 1 (rank 0's log is empty)", shown == "1" and "rank 1 step" in log,
                  f"rank {shown!r}: {log[-80:]!r}")
            line = driver.find_element(By.ID, "jobline").text
            check("... the header names the run dir", "run dir " + os.path.join(tmp, "run") in line and
                  "run none" not in line, line)
            out = os.environ.get("TRAINBOX_ARTIFACT_DIR") or os.getcwd()
            os.makedirs(out, exist_ok=True)
            shot = os.path.join(out, "dashboard.png")
            driver.save_screenshot(shot)
            print(f"screenshot: {shot}")
        finally:
            driver.quit()
            os.killpg(job.pid, signal.SIGTERM)
            job.wait(timeout=40)
    print("FAILED: " + ", ".join(fail) if fail else "all passed")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
