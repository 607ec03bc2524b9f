#!/usr/bin/env bash
# Benchmark: the cost of trainbox run's zero-code instrumentation of Python workers
# (docs/python.md). Prints, with a #json line:
#   - per step, two ways, the seeds' MLP training loop as a torchrun script (bench/peers/ddp_peer.py:
#     Net 784-128-10, Adam, DDP over Gloo, 2 ranks on CPU, 1 thread each) under trainbox run:
#     * paired (the figure for the goal, <= 1 %): AB_RUNS jobs, each AB_BLOCKS blocks of
#       AB_STEPS steps with the instrumentation taken back and put again in ABBA order in the
#       same processes (--ab-blocks); per block the median step; per job the median of the
#       paired on/off ratios; the median over jobs and a bootstrap 95 % interval of all pairs.
#       Separate processes differ by +-5 % a run on this 2-core VM (memory layout, scheduling),
#       more than the effect; pairs in one process do not;
#     * end to end: REPEAT interleaved jobs with and without --no-instrument, median samples/s
#       (start-up excluded; noisy, given for completeness);
#   - per call: trainbox.heartbeat(step, phase) with a heartbeat file mapped (ns);
#   - start-up: the wall time of `python -c pass` and of `python -c "import torch"` with the
#     launcher's two variables set vs without (median of RUNS; goal <= 30 ms added).
#   bench/python_instrument.sh [BUILD_DIR]
#     (AB_RUNS=5 AB_BLOCKS=120 AB_STEPS=40 REPEAT=5 STEPS=400 RUNS=20)
set -euo pipefail
source "$(dirname "$0")/common.sh" "${1:-}"
repeat=${REPEAT:-5}; steps=${STEPS:-400}; runs=${RUNS:-20}
ab_runs=${AB_RUNS:-5}; ab_blocks=${AB_BLOCKS:-120}; ab_steps=${AB_STEPS:-40}
fashion=${TRAINBOX_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
boot=$root/python/trainbox/_boot

# --- per step, paired ---
: >"$tmp/ab.jsonl"
for ((r = 0; r < ab_runs; r++)); do
  TRAINBOX_PYTHON=$py "$build/bin/trainbox" run --standalone -n 2 --no-prefix -- \
    "$root/bench/peers/ddp_peer.py" --ab-blocks "$ab_blocks" --steps "$ab_steps" --data "$fashion" >"$tmp/run.out" 2>&1 || true
  grep '"pytorch-ddp-gloo-ab"' "$tmp/run.out" >>"$tmp/ab.jsonl" || { echo "# paired run $r failed:"; tail -5 "$tmp/run.out" | sed 's/^/#   /'; }
done

# --- per step, end to end ---
on=(); off=()
for ((r = 0; r < repeat; r++)); do
  for mode in on off; do
    flag=(); [[ $mode == off ]] && flag=(--no-instrument)
    TRAINBOX_PYTHON=$py "$build/bin/trainbox" run --standalone -n 2 "${flag[@]}" --no-prefix -- \
      "$root/bench/peers/ddp_peer.py" --steps "$steps" --data "$fashion" >"$tmp/run.out" 2>&1 || true
    if ! s=$(grep '"pytorch-ddp-gloo"' "$tmp/run.out" | "$py" -c 'import json,sys; print(json.loads(sys.stdin.readlines()[-1])["samples_per_s"])'); then
      echo "# run $r ($mode) failed:"; tail -5 "$tmp/run.out" | sed 's/^/#   /'; continue
    fi
    if [[ $mode == on ]]; then on+=("$s"); else off+=("$s"); fi
  done
done

# --- per call ---
call_ns=$(TRAINBOX_HEARTBEAT_FILE=$tmp/hb "$py" -c '
import sys, time; sys.path.insert(0, sys.argv[1])
import trainbox
n = 200000; best = 1e9
for _ in range(5):
    t = time.perf_counter_ns()
    for i in range(n): trainbox.heartbeat(i, "data")
    best = min(best, (time.perf_counter_ns() - t) / n)
print(f"{best:.0f}")' "$root/python")

# --- start-up ---
hookenv=(env PYTHONPATH="$boot" TRAINBOX_INSTRUMENT=1 TRAINBOX_HEARTBEAT_FILE="$tmp/hb2")
median() { "$@" | cut -d' ' -f1; }  # wall_ms_stats prints "median min max" (no newline)
pass_off=$(median wall_ms_stats "$runs" "$py" -c pass)
pass_on=$(median wall_ms_stats "$runs" "${hookenv[@]}" "$py" -c pass)
torch_off=$(median wall_ms_stats "$((runs / 4 + 1))" "$py" -c 'import torch')
torch_on=$(median wall_ms_stats "$((runs / 4 + 1))" "${hookenv[@]}" "$py" -c 'import torch')

"$py" - "${on[*]}" "${off[*]}" "$call_ns" "$pass_off" "$pass_on" "$torch_off" "$torch_on" "$steps" "$tmp/ab.jsonl" <<'PY'
import json, random, statistics, sys
jobs = [json.loads(line) for line in open(sys.argv[9])]
per_job, pairs, step_on, step_off = [], [], [], []
for j in jobs:
    a, b = j["median_step_us"]["on"], j["median_step_us"]["off"]
    r = [x / y - 1 for x, y in zip(a, b)]
    pairs += r
    per_job.append(statistics.median(r) * 100)
    step_on.append(statistics.median(a)); step_off.append(statistics.median(b))
print(f"# paired: {len(jobs)} jobs x {len(pairs)// max(1, len(jobs))} on/off pairs of "
      f"{jobs[0]['steps_per_block'] if jobs else 0}-step blocks, 2 ranks, median step per block")
if jobs:
    rnd = random.Random(0)
    boot = sorted(statistics.median(rnd.choices(pairs, k=len(pairs))) * 100 for _ in range(2000))
    paired = statistics.median(per_job)
    print("per job (median of pairs): " + ", ".join(f"{x:+.2f} %" for x in per_job))
    print(f"median step: {statistics.median(step_on):.1f} us instrumented, {statistics.median(step_off):.1f} us not")
    print(f"PAIRED per-step slowdown: {paired:+.2f} % (median over jobs; all pairs' median 95 % interval "
          f"{boot[50]:+.2f} .. {boot[1949]:+.2f} %; goal <= 1 %)")
else:
    paired, boot = float("nan"), [float("nan")] * 2000
on = [float(x) for x in sys.argv[1].split()]
off = [float(x) for x in sys.argv[2].split()]
call_ns = float(sys.argv[3]); p0, p1, t0, t1 = map(float, sys.argv[4:8]); steps = int(sys.argv[8])
a, b = statistics.median(on), statistics.median(off)
slow = (b / a - 1) * 100
print(f"# python_instrument — bench/peers/ddp_peer.py (Net 784-128-10, Adam, DDP Gloo), 2 ranks x batch 64 on CPU, "
      f"{steps} steps, median of {len(on)} interleaved runs")
print(f"{'run':<34} {'samples/s':>10} {'ms/step':>9}")
for name, v in (("trainbox run (instrumented)", a), ("trainbox run --no-instrument", b)):
    print(f"{name:<34} {v:10.0f} {2 * 64 / v * 1e3:9.3f}")
print(f"end-to-end per-step slowdown: {slow:+.2f} % (single jobs spread {min(on + off):.0f}-{max(on + off):.0f} "
      f"samples/s); added per step: {(2 * 64 / a - 2 * 64 / b) * 1e6:+.1f} us")
print(f"trainbox.heartbeat(step, phase): {call_ns:.0f} ns per call (best of 5 x 200000)")
print(f"start-up, python -c pass:        {p0:7.1f} ms -> {p1:7.1f} ms ({p1 - p0:+.1f} ms; goal <= 30 ms)")
print(f"start-up, python -c 'import torch': {t0:7.1f} ms -> {t1:7.1f} ms ({t1 - t0:+.1f} ms, patching included)")
print("#json " + json.dumps({"bench": "python_instrument", "samples_per_s_instrumented": on,
                             "samples_per_s_plain": off, "slowdown_pct": slow,
                             "paired_slowdown_pct": paired, "paired_per_job_pct": per_job,
                             "paired_ci95_pct": [boot[50], boot[1949]], "heartbeat_ns": call_ns,
                             "startup_ms": {"pass": [p0, p1], "import_torch": [t0, t1]}}))
PY
