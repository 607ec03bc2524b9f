#!/usr/bin/env bash
# Benchmark: what trainbox run --dashboard costs, and how it scales (docs/dashboard.md). Prints a
# table and a #json line:
#   - training speed: `trainbox train`'s default model (the seeds' MLP on Fashion-MNIST), 2 ranks
#     on CPU (1 thread each) under trainbox run, with and without --dashboard, one client
#     polling /api/state every second during the dashboard runs; REPEAT interleaved runs,
#     median samples/s (rank 0's metrics.jsonl summary), the slowdown (goal <= 1 %);
#   - scale: 256 ranks of bench/peers/heartbeat_rank.py (a heartbeat a second, no torch) under
#     one launcher: /api/state's latency and size (median of 20), the page in headless chromium
#     (load until the ranks table has 256 rows; one render of the ranks table, median of 20),
#     and the launcher's CPU (utime+stime from /proc over SECONDS s) with the page open vs
#     without --dashboard. The scale part needs selenium + chromium for the page figures.
#   bench/dashboard.sh [BUILD_DIR]      (REPEAT=5 EPOCHS=1 RANKS=256 CPU_SECONDS=30)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
repeat=${REPEAT:-5}; epochs=${EPOCHS:-1}; ranks=${RANKS:-256}; seconds=${CPU_SECONDS:-30}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- training speed ---
on=(); off=()
for ((r = 0; r < repeat; r++)); do
  for mode in on off; do
    dash=(); poller=""
    if [[ $mode == on ]]; then
      port=$(free_port); dash=(--dashboard "127.0.0.1:$port")
      "$py" -c '
import sys, time, urllib.request
while True:
    try: urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/state", timeout=2).read()
    except OSError: pass
    time.sleep(1)' "$port" &
      poller=$!
    fi
    "$bin" run --standalone -n 2 --no-prefix "${dash[@]}" -- "$bin" train --set train.device=cpu \
      --set train.threads=1 --set train.epochs="$epochs" --set output.progress=off --set checkpoint.every_epochs=0 \
      --run-dir "$tmp/run-$r-$mode" >"$tmp/train.out" 2>&1 || true
    [[ -n $poller ]] && { kill "$poller" 2>/dev/null; wait "$poller" 2>/dev/null || true; }
    if ! s=$("$py" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["samples_per_s"])' \
          "$tmp/run-$r-$mode/metrics.jsonl" 2>/dev/null); then
      echo "# run $r ($mode) failed:"; tail -5 "$tmp/train.out" | sed 's/^/#   /'; continue
    fi
    if [[ $mode == on ]]; then on+=("$s"); else off+=("$s"); fi
  done
done

# --- scale: RANKS heartbeat ranks under one launcher ---
# launcher_cpu PID SECONDS: the launcher's own CPU seconds (utime+stime, all its threads) over SECONDS
launcher_cpu() {
  "$py" - "$1" "$2" <<'PY'
import os, sys, time
pid, secs = sys.argv[1], float(sys.argv[2])
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
a, t = cpu(), time.time(); time.sleep(secs); b = cpu()
print(f"{(b - a) / (time.time() - t) * 100:.2f}")
PY
}
start_ranks() {  # start_ranks LOG EXTRA…: the launcher's pid
  setsid "$bin" run --standalone -n "$ranks" --no-instrument --no-prefix "${@:2}" -- "$py" \
    "$root/bench/peers/heartbeat_rank.py" --seconds $((seconds + 120)) >"$1" 2>&1 &
  echo $!
}
wait_beats() {  # until every rank's heartbeat has a step > 0 (the launcher's logs)
  for _ in $(seq 600); do
    (($(find "$1" -name heartbeat -newer "$tmp/t0" 2>/dev/null | wc -l) >= ranks)) && return 0
    sleep 0.2
  done
  return 1
}
port=$(free_port)
touch "$tmp/t0"
lp=$(start_ranks "$tmp/scale-on.out" --dashboard "127.0.0.1:$port" --log-dir "$tmp/logs-on")
pids+=("$lp")
wait_beats "$tmp/logs-on" || echo "# not every rank beat within 120 s"
"$py" - "$port" "$ranks" "$seconds" "$lp" >"$tmp/scale.json" <<'PY' &
import json, statistics, subprocess, sys, time, urllib.request
port, ranks, secs, lp = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
url = f"http://127.0.0.1:{port}/"
out = {}
lat, size = [], 0
for _ in range(20):
    t = time.perf_counter(); body = urllib.request.urlopen(url + "api/state", timeout=5).read()
    lat.append((time.perf_counter() - t) * 1e3); size = len(body); time.sleep(0.05)
out["api_state_ms"], out["api_state_bytes"] = statistics.median(lat), size
out["ranks_seen"] = len(json.loads(body)["ranks"])
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions(); opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    t = time.perf_counter(); d.get(url)
    while d.execute_script('return document.querySelectorAll("#ranks tr.rank").length') < ranks:
        if time.perf_counter() - t > 30: break
        time.sleep(0.005)
    out["page_ready_ms"] = (time.perf_counter() - t) * 1e3
    r = [d.execute_script("const t = performance.now(); renderRanks(last); return performance.now() - t")
         for _ in range(20)]
    out["render_ranks_ms"] = statistics.median(r)
    print(json.dumps(out), flush=True)
    time.sleep(secs + 1)  # the page stays open (polling every second) through the CPU window
    d.quit()
except Exception as e:  # no selenium or chromium: the page figures are missing
    out["page_error"] = str(e)[:200]
    print(json.dumps(out), flush=True)
PY
pagep=$!
for _ in $(seq 300); do [[ -s $tmp/scale.json ]] && break; sleep 0.2; done
cpu_on=$(launcher_cpu "$lp" "$seconds")
wait "$pagep" || true
kill -TERM -- "-$lp" 2>/dev/null || true; wait "$lp" 2>/dev/null || true

touch "$tmp/t0"
lp=$(start_ranks "$tmp/scale-off.out" --log-dir "$tmp/logs-off")
pids+=("$lp")
wait_beats "$tmp/logs-off" || echo "# not every rank beat within 120 s"
cpu_off=$(launcher_cpu "$lp" "$seconds")
kill -TERM -- "-$lp" 2>/dev/null || true; wait "$lp" 2>/dev/null || true

"$py" - "${on[*]}" "${off[*]}" "$(cat "$tmp/scale.json")" "$cpu_on" "$cpu_off" "$ranks" "$seconds" "$epochs" <<'PY'
import json, statistics, sys
on = [float(x) for x in sys.argv[1].split()]
off = [float(x) for x in sys.argv[2].split()]
scale = json.loads(sys.argv[3] or "{}")
cpu_on, cpu_off, ranks, secs, epochs = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), sys.argv[7], sys.argv[8]
a, b = (statistics.median(on) if on else float("nan")), (statistics.median(off) if off else float("nan"))
slow = (b / a - 1) * 100
print(f"# dashboard — trainbox train (default MLP, Fashion-MNIST, {epochs} epoch), 2 ranks on CPU x 1 thread, "
      f"median of {len(on)}/{len(off)} interleaved runs; /api/state polled every 1 s with --dashboard")
print(f"{'run':<40} {'samples/s':>10}")
print(f"{'trainbox run --dashboard (polled)':<40} {a:10.0f}")
print(f"{'trainbox run':<40} {b:10.0f}")
print(f"training slowdown: {slow:+.2f} % (goal <= 1 %)")
print(f"# scale — {ranks} ranks of bench/peers/heartbeat_rank.py (1 beat/s) under one launcher")
def f(k, unit, d=1):
    v = scale.get(k)
    return "n/a" if v is None else f"{v:.{d}f} {unit}"
print(f"{'/api/state latency (median of 20)':<40} {f('api_state_ms', 'ms', 2):>14}   {scale.get('api_state_bytes', 0) / 1024:.0f} KiB, {scale.get('ranks_seen')} ranks")
print(f"{'page load until 256 rows':<40} {f('page_ready_ms', 'ms', 0):>14}")
print(f"{'one render of the ranks table':<40} {f('render_ranks_ms', 'ms', 2):>14}")
print(f"{'launcher CPU, --dashboard + page open':<40} {cpu_on:>11.2f} %   (of one core, over {secs} s)")
print(f"{'launcher CPU, no dashboard':<40} {cpu_off:>11.2f} %")
if "page_error" in scale:
    print("# page figures missing: " + scale["page_error"])
print("#json " + json.dumps({"bench": "dashboard", "samples_per_s_dashboard": on, "samples_per_s_plain": off,
                             "slowdown_pct": slow, "ranks": ranks, **{k: v for k, v in scale.items()},
                             "launcher_cpu_pct_dashboard": cpu_on, "launcher_cpu_pct_plain": cpu_off}))
PY
