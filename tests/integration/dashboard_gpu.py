"""trainbox run --dashboard's GPU rows, on a CPU machine: a stand-in libnvidia-ml.so.1
(tests/tools/nvml_standin.cpp: two H200s with fixed readings) on LD_LIBRARY_PATH.
  1. /api/state has both GPUs with the stand-in's name, uuid, utilisation, memory, temperature
     and power (NVML's milliwatts as watts);
  2. /metrics has dcgm-exporter's series for both (FB_USED in MiB) and passes
     `promtool check metrics` (exit 77 without promtool);
  3. the page shows both in its GPU table (headless chromium; skipped without it);
  4. `trainbox smi --json` reads the same two GPUs.
The real-GPU path is scripts/gpu-check.sh's dashboard-gpu step.
  TRAINBOX_BIN=build/bin/trainbox python3 tests/integration/dashboard_gpu.py STANDIN_DIR
"""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BIN = os.environ["TRAINBOX_BIN"]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "python"))
from dashlib import check, failed, free_port  # noqa: E402

STANDIN = os.path.abspath(sys.argv[1])
GIB = 1024 ** 3
WANT = [  # as nvml_standin.cpp reports them
    {"uuid": "GPU-00000000-0000-0000-0000-000000000000", "util": 37, "mem_util": 21, "temp": 51, "power": 312.5,
     "total": 150754820096, "used": 12 * GIB},
    {"uuid": "GPU-11111111-1111-1111-1111-111111111111", "util": 88, "mem_util": 64, "temp": 67, "power": 655.0,
     "total": 150754820096, "used": 96 * GIB},
]


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def page_gpus(port):
    """The page's GPU table in headless chromium (skipped without selenium or chromium)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        print("SKIP part page: no selenium (pip install -r deps/requirements-tools.txt)")
        return
    if not (os.access("/usr/bin/chromium", os.X_OK) and os.access("/usr/bin/chromedriver", os.X_OK)):
        print("SKIP part page: no /usr/bin/chromium or /usr/bin/chromedriver (scripts/bootstrap installs them)")
        return
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        text, end = "", time.time() + 10
        while time.time() < end and text.count("NVIDIA H200 (stand-in)") < 2:
            time.sleep(0.2)
            text = driver.find_element(By.ID, "gpus").text
        check("... the page's GPU table shows both, with their utilisation",
              text.count("NVIDIA H200 (stand-in)") == 2 and "37" in text and "88" in text and "no GPUs" not in text,
              "" if text.count("NVIDIA H200 (stand-in)") == 2 else text[:200])
        out = os.environ.get("TRAINBOX_ARTIFACT_DIR") or os.getcwd()
        os.makedirs(out, exist_ok=True)
        driver.save_screenshot(os.path.join(out, "dashboard_gpu.png"))
    finally:
        driver.quit()


def main():
    if not os.path.exists(os.path.join(STANDIN, "libnvidia-ml.so.1")):
        print(f"FAIL no libnvidia-ml.so.1 in {STANDIN} (ctest builds it: nvml_standin)")
        return 1
    env = dict(os.environ, LD_LIBRARY_PATH=STANDIN + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    tmp = tempfile.mkdtemp()
    port = free_port()
    worker = os.path.join(HERE, "python", "heartbeat_worker.py")
    job = subprocess.Popen([BIN, "run", "--standalone", "--nproc-per-node", "2", "--no-instrument", "--dashboard",
                            f"127.0.0.1:{port}", "--", sys.executable, worker, "--seconds", "20"],
                           stdout=open(os.path.join(tmp, "launcher.out"), "w"), stderr=subprocess.STDOUT, cwd=tmp,
                           env=env, start_new_session=True)
    try:
        s, end = None, time.time() + 15
        while time.time() < end:
            try:
                status, body = get(port, "/api/state")
                s = json.loads(body) if status == 200 else None
                if s and len(s["gpus"]) == 2:
                    break
            except (OSError, ValueError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        gpus = s["gpus"] if s else []
        check("1. /api/state lists the stand-in's two GPUs", len(gpus) == 2 and s["gpus_known"],
              "" if len(gpus) == 2 else json.dumps(s["gpus"] if s else None)[:300])
        for g, w in zip(gpus, WANT):
            got = (g["name"], g["uuid"], g["util_pct"], g["mem_util_pct"], g["mem_used_bytes"], g["mem_total_bytes"],
                   g["temperature_c"], g["power_w"])
            want = ("NVIDIA H200 (stand-in)", w["uuid"], w["util"], w["mem_util"], w["used"], w["total"], w["temp"],
                    w["power"])
            check(f"... GPU {g['index']}: name, uuid, utilisation, memory, temperature, power", got == want,
                  "" if got == want else f"{got} != {want}")
        status, text = get(port, "/metrics")
        text = text.decode()
        series = {}
        for m in re.finditer(r'^(DCGM_FI_DEV_[A-Z_]+)\{([^}]*)\} (\S+)$', text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            series[(m.group(1), labels.get("gpu"), labels.get("uuid"))] = float(m.group(3))
        for i, w in enumerate(WANT):
            want = {"DCGM_FI_DEV_GPU_UTIL": w["util"], "DCGM_FI_DEV_MEM_COPY_UTIL": w["mem_util"],
                    "DCGM_FI_DEV_FB_USED": w["used"] // 2**20, "DCGM_FI_DEV_FB_FREE": (w["total"] - w["used"]) // 2**20,
                    "DCGM_FI_DEV_GPU_TEMP": w["temp"], "DCGM_FI_DEV_POWER_USAGE": w["power"]}
            got = {k: series.get((k, str(i), w["uuid"])) for k in want}
            check(f"2. /metrics: GPU {i}'s dcgm-exporter series (gpu, uuid labels)", got == want,
                  "" if got == want else f"{got} != {want}")
        if shutil.which("promtool"):
            p = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30)
            check("... promtool check metrics passes with GPU series", p.returncode == 0,
                  (p.stdout + p.stderr).decode()[:300])
        else:
            print("SKIP part promtool: promtool is not installed (Debian package prometheus)")
        page_gpus(port)
        smi = subprocess.run([BIN, "smi", "--json"], capture_output=True, env=env, timeout=30)
        try:
            rows = json.loads(smi.stdout)
            rows = rows.get("gpus", rows) if isinstance(rows, dict) else rows
            uuids = [r.get("uuid") for r in rows]
        except (ValueError, AttributeError):
            uuids = None
        check("4. trainbox smi --json reads the same two GPUs", uuids == [w["uuid"] for w in WANT],
              "" if uuids == [w["uuid"] for w in WANT] else f"exit {smi.returncode}: {smi.stdout[:200]!r}")
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
