#!/usr/bin/env bash
# Elastic jobs (--nnodes MIN:MAX, docs/distributed.md "Elastic jobs") with two launchers on
# loopback, each one node of one rank:
#   1. 2 -> 1 -> 2: node 1's launcher is SIGKILLed mid-epoch; node 0 goes on at world 1 from
#      the latest checkpoint; node 1 is started again, waits, and is admitted by a restart.
#      Every step's loss equals an uninterrupted single-process run's with the same global
#      batch (train.global_batch_size) within 1e-6 (measured 1.6e-7), and every sample of every epoch is
#      trained exactly once (debug.sample_log). Both nodes print each change of the world in
#      one line; membership.jsonl and metrics.jsonl record them.
#   2. Below MIN (--nnodes 2:3, one of two lost): the other stops with 125, naming the lost node.
#      2b. Default keys (no train.global_batch_size): the job keeps its first start's global
#      batch (2 x 64), so node 0 goes on after node 1's loss; a range the kept batch cannot split
#      (1:3 started with 1 rank: 64) is refused at start-up (exit 2, a batch that splits named).
#   3. A node whose config file differs in optim.lr is refused (exit 2, the key named); the job goes on.
#   4. A checkpoint from another global batch is refused (exit 2, both named); a global batch
#      that does not split over the world stops with exit 2; bad --nnodes ranges exit 2.
# The netns_elastic test runs the 3-host version on namespace hosts.
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
source "$(dirname "$0")/launcher_lib.sh"
check_py="$(dirname "$0")/python/elastic_check.py"
marker=trainbox-elastic-test-$$
trap 'pkill -KILL -f "$marker" 2>/dev/null; rm -rf "$tmp"' EXIT
# 6000 samples, a global batch of 40: 150 steps an epoch; 1024-wide layers make a step take
# long enough (~10 ms) to kill a node mid-epoch.
job=(--set data.dataset=synthetic --set data.synthetic_samples=6000 --set train.global_batch_size=40
     --set model.hidden=[1024,1024] --set train.deterministic=true --set train.threads=1 --set train.log_every=1
     --set output.progress=off --set checkpoint.every_epochs=0 --set checkpoint.every_steps=10
     --set train.device=cpu --set debug.sample_log=true --set train.epochs=4 --set data.path="$marker")
# run NNODES TAG LOG EXTRA-TRAIN-OPTS…: one launcher (node), one rank, c10d on loopback
run() {
  local nnodes=$1 tag=$2 log=$3; shift 3
  (exec timeout 240 "$bin" run --nnodes "$nnodes" --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "el$port" --max-restarts 5 --grace-period 5 \
    --rdzv-conf heartbeat_timeout=3,last_call=1,admit_backoff=1,join_timeout=60 --log-dir "$tmp/logs-$tag" \
    -- "$bin" train "${job[@]}" "$@" >"$log" 2>&1)
}
steps_in() { grep -c '"event": *"train"' "$1/metrics.jsonl" 2>/dev/null || echo 0; }
wait_for() {  # wait_for SECONDS COMMAND…
  local n=$(($1 * 10)); shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
at_least() { (($(steps_in "$1") >= $2)); }

# --- 1. 2 -> 1 -> 2 ---
"$bin" train "${job[@]}" --run-dir "$tmp/ref" --quiet >"$tmp/ref.out" 2>&1 || { cat "$tmp/ref.out"; echo "FAIL reference run"; exit 1; }
port=$(free_port)
run 1:2 a "$tmp/a.log" --run-dir "$tmp/run" & pa=$!
sleep 0.3  # node 0 hosts: it binds the endpoint first
run 1:2 b "$tmp/b.log" --run-dir "$tmp/run" & pb=$!
wait_for 60 at_least "$tmp/run" 40 || { echo "FAIL the 2-node job never trained 40 steps"; tail "$tmp/a.log" "$tmp/b.log"; exit 1; }
pkill -KILL -f "trainbox run.*logs-b" && wait $pb 2>/dev/null
wait_for 30 grep -q 'world 2 → 1' "$tmp/a.log" || { echo "FAIL node 0 did not go on at world 1"; tail "$tmp/a.log"; exit 1; }
run 1:2 b2 "$tmp/b2.log" --run-dir "$tmp/run" & pb2=$!
wait $pa; ra=$?
wait $pb2; rb=$?
check "1. 2 -> 1 -> 2: both launchers exit 0 ($ra, $rb)" test "$ra$rb" = 00 || tail -n 20 "$tmp/a.log" "$tmp/b2.log"
check "... node 0: 'world 2 → 1: lost node 1 (…); resuming from step_N'" \
  grep -qE 'world 2 → 1: lost node 1 \([^)]*its launcher closed the connection\); resuming from step_[0-9]+' "$tmp/a.log"
check "... node 0: 'world 1 → 2: admitted …'" grep -qE 'world 1 → 2: admitted .*; resuming from step_[0-9]+' "$tmp/a.log"
check "... the restarted node waited, then joined the world of 2" \
  grep -qE 'waits to be admitted' "$tmp/b2.log" && grep -qE 'world 1 → 2|node rank 1 of 2' "$tmp/b2.log"
check "... membership.jsonl: two records on node 0" test "$(wc -l <"$tmp/logs-a/membership.jsonl" 2>/dev/null)" = 2
check "... metrics.jsonl: two resize events (2 -> 1, 1 -> 2)" \
  test "$(grep -cE '"event": *"resize"' "$tmp/run/metrics.jsonl")" = 2
check "... every step's loss equals the uninterrupted run's" "$py" "$check_py" losses "$tmp/ref" "$tmp/run" \
  "$("$(dirname "$0")/../claims.py" bound elastic.losses)"
check "... every sample of every epoch trained exactly once" "$py" "$check_py" samples "$tmp/run" 6000

# --- 2. below MIN: every node stops with the root cause ---
port=$(free_port)
run 2:3 c "$tmp/c.log" --run-dir "$tmp/run2" --set train.epochs=50 & pc=$!
sleep 0.3
run 2:3 d "$tmp/d.log" --run-dir "$tmp/run2" --set train.epochs=50 & pd=$!
wait_for 60 at_least "$tmp/run2" 20 || { echo "FAIL the 2:3 job never trained"; tail "$tmp/c.log" "$tmp/d.log"; exit 1; }
pkill -KILL -f "trainbox run.*logs-d" && wait $pd 2>/dev/null
wait $pc; rc=$?
check "2. below MIN: node 0 exits 125 ($rc)" test "$rc" = 125
check "... naming the lost node and that fewer than MIN remain" \
  grep -q 'lost node 1' "$tmp/c.log" && grep -q '1 of at least 2 nodes remain' "$tmp/c.log"

# --- 2b. default keys (no train.global_batch_size): the job keeps its first start's global batch ---
# 2 nodes x train.batch_size 64 = 128 samples a step; node 1 is lost after a checkpoint and node 0
# goes on at world 1 with a micro-batch of 128 (before, it stopped: 128 != 1 x 64).
plain=()
for a in "${job[@]}"; do [[ $a == train.global_batch_size=* ]] && plain=("${plain[@]:0:${#plain[@]}-1}") || plain+=("$a"); done
job_saved=("${job[@]}")
job=("${plain[@]}" --set train.max_steps=60)
port=$(free_port)
run 1:2 g "$tmp/g.log" --run-dir "$tmp/run5" & pg=$!
sleep 0.3
run 1:2 h "$tmp/h.log" --run-dir "$tmp/run5" & ph=$!
if wait_for 60 at_least "$tmp/run5" 15; then
  pkill -KILL -f "trainbox run.*logs-h" && wait $ph 2>/dev/null
  wait $pg; rg=$?
  check "2b. default keys: node 0 survives the loss of node 1 and exits 0 ($rg)" test "$rg" = 0 ||
    tail -n 20 "$tmp/g.log"
  check "... it kept the job's global batch: 128 samples a step (2 ranks x 64)" \
    grep -q 'elastic job: 128 samples per optimizer step at every world size' "$tmp/g.log"
  check "... metrics.jsonl: a resize 2 -> 1 at a global batch of 128" \
    grep -qE '"event": *"resize".*"global_batch": *128.*"world_after": *1|"event": *"resize".*"world_after": *1.*"global_batch": *128' \
    "$tmp/run5/metrics.jsonl"
else
  check "2b. the default-keys job trained 15 steps" false; tail -n 20 "$tmp/g.log" "$tmp/h.log"
fi
job=("${job_saved[@]}")

# --- 3. a node with another config is refused, the job goes on ---
port=$(free_port)
printf '[optim]\nlr = 0.001\n' >"$tmp/cfg.toml"
job=("$tmp/cfg.toml" "${job[@]}")  # the config file first: --set takes every value after it
run 1:2 e "$tmp/e.log" --run-dir "$tmp/run3" --set train.epochs=50 & pe=$!
wait_for 60 at_least "$tmp/run3" 5 || { echo "FAIL the job never trained"; tail "$tmp/e.log"; exit 1; }
printf '[optim]\nlr = 0.002\n' >"$tmp/cfg.toml"  # (its --set keys are the same)
run 1:2 f "$tmp/f.log" --run-dir "$tmp/run3" --set train.epochs=50; rf=$?
check "3. another config: refused with exit 2 ($rf)" test "$rf" = 2
check "... naming the key that differs" \
  grep -qE "optim.lr differs between nodes: optim.lr = 0.002 on [^ ]+, but optim.lr = 0.001 on" "$tmp/f.log"
check "... the job goes on" kill -0 "$pe"
pkill -TERM -f "trainbox run.*logs-e"; wait $pe 2>/dev/null
job=("${job[@]:1}")

# --- 4. bad input ---
expect "4. a checkpoint from another global batch is refused" 2 'global batch of 40 samples per step.*this job.s is 80' -- \
  "$bin" train "${job[@]}" --set train.global_batch_size=80 --run-dir "$tmp/run" --resume auto
expect "... a global batch that does not split over the world" 2 'does not split over this job: 3 ranks' -- \
  "$bin" run --standalone --nproc-per-node 3 -- "$bin" train "${job[@]}" --run-dir "$tmp/run4"
# An elastic range whose world sizes the kept global batch does not split: refused at start-up,
# with a global batch that does (1 node of 1:3 started: 64 samples a step; 3 ranks cannot split it).
expect "... default keys whose global batch a world of the range cannot split: refused at start-up" 2 \
  'keeps its global batch of 64 samples per step .*does not split over 3 ranks' -- \
  env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
  TRAINBOX_ELASTIC_NNODES=1:3 "$bin" train "${plain[@]}" --run-dir "$tmp/run6"
check "... naming a global batch every world size splits" grep -q 'multiple of 6 (e.g. 66)' "$tmp/err"
check "... and writes nothing" test ! -e "$tmp/run6"
expect "... --nnodes 2:4 with the static backend" 2 'elastic node range needs --rdzv-backend c10d' -- \
  "$bin" run --nnodes 2:4 --master-addr 127.0.0.1 -- true
expect "... --nnodes 3:2" 2 'MIN 3 is larger than MAX 2' -- \
  "$bin" run --nnodes 3:2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:1 -- true
expect "... --nnodes 0:2" 2 'nnodes 0' -- "$bin" run --nnodes 0:2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:1 -- true
exit $fail
