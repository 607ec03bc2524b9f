#!/usr/bin/env bash
# trainbox under a real Slurm cluster (Debian's slurmctld + one slurmd per host + munge),
# on two network-namespace hosts with their own addresses and hostnames
# (scripts/slurm-cluster, scripts/netns-hosts):
#   - trainbox's Slurm hostlist expansion == `scontrol show hostnames`;
#   - `srun -N2 --ntasks-per-node=2 trainbox train` trains through the Slurm variables alone,
#     with the per-step losses of a 1-node, 4-rank run;
#   - `sbatch` of a script with one `trainbox run` per node (`srun --ntasks-per-node=1`) trains
#     to the same final weights;
#   - `scancel` of a running job leaves no process behind.
# Root only; skips (77) with the reason when Slurm or namespaces are unavailable.
#   slurm.sh HOSTLIST_EXPAND_BINARY
set -uo pipefail
source "$(dirname "$0")/train_lib.sh"
root=${TRAINBOX_SOURCE_DIR:?}
expand=${1:?usage: slurm.sh HOSTLIST_EXPAND_BINARY}
cluster=$root/scripts/slurm-cluster
p=tbsl$$
p=${p:0:8}
dir=$tmp/cluster
marker=trainbox-slurm-test-$$
cleanup() {
  [[ $BASHPID == "$$" ]] || return 0
  "$cluster" run "$p" "$dir" scancel --user=root >/dev/null 2>&1
  "$cluster" down "$p" "$dir" >/dev/null 2>&1
  pkill -KILL -f "$marker" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
why=$("$cluster" up "$p" 2 "$dir" 2>&1)
case $? in
  0) ;;
  77) echo "${why#SKIP: }" | tail -1 | sed 's/^/SKIPPED: /'; exit 77 ;;
  *) echo "FAIL: the Slurm cluster did not start: $why"; tail -20 "$dir"/log/*.log 2>/dev/null; exit 1 ;;
esac
run() { "$cluster" run "$p" "$dir" "$@"; }

# --- hostlists: trainbox's expansion vs Slurm's own ---
for list in 'n[1-2]-ib[3,4]' 'gpu[01-03,10]' 'a,b[1-2],c' 'x[007-009]' 'node1' 'r[1-2]n[01-02]' 'h[9-11]'; do
  want=$(run scontrol show hostnames "$list" 2>&1)
  got=$("$expand" "$list" 2>&1)
  check "hostlist $list expands as scontrol's ($(echo $want | tr ' ' ,))" test "$want" = "$got"
done

# --- srun: 2 nodes x 2 tasks, the Slurm variables alone ---
job=("${small[@]}" --set train.epochs=1 --set train.batch_size=16)
"$bin" run --standalone --nproc-per-node 4 -- "$bin" train "${job[@]}" --run-dir "$tmp/local4" --quiet \
  >"$tmp/local4.out" 2>&1 || { cat "$tmp/local4.out"; echo "FAIL reference 1-node x 4-rank run"; exit 1; }
timeout 180 "$cluster" run "$p" "$dir" srun -N2 --ntasks-per-node=2 --kill-on-bad-exit=1 \
  "$bin" train "${job[@]}" --run-dir "$tmp/srun" --json >"$tmp/srun.json" 2>"$tmp/srun.err"
check "srun -N2 --ntasks-per-node=2 trainbox train: exit 0" test $? = 0 || tail -20 "$tmp/srun.err"
check "... one summary (rank 0's) for 4 ranks on 2 hosts" "$py" -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if d["samples"] == 2000 and d["device"] == "cpu" else 1)' "$tmp/srun.json"
check "... rank 0 named the world: rank 0 of 4" grep -q 'rank 0 of 4' "$tmp/srun.err"
check "... per-step losses equal the 1-node x 4-rank run's (within 1e-5)" same_losses "$tmp/local4/metrics.jsonl" "$tmp/srun/metrics.jsonl" \
  "$("$(dirname "$0")/../claims.py" bound dist.slurm_vs_local)"

# --- sbatch: one trainbox run per node, 2 workers each (docs/distributed.md shows this script) ---
cat >"$tmp/train.sbatch" <<EOF
#!/bin/bash
#SBATCH --job-name=trainbox-ddp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=$tmp/sbatch.out
# One trainbox run per node; it reads SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST (first
# host = MASTER_ADDR) and SLURM_JOB_ID (MASTER_PORT = 10000 + id % 50000) by itself.
srun --ntasks-per-node=1 --kill-on-bad-exit=1 $bin run --nproc-per-node 2 -- \\
  $bin train ${job[*]} --run-dir $tmp/sbatch --quiet
EOF
timeout 180 "$cluster" run "$p" "$dir" sbatch --wait "$tmp/train.sbatch" >"$tmp/sbatch.submit" 2>&1
check "sbatch (srun --ntasks-per-node=1 trainbox run --nproc-per-node 2): job exits 0" test $? = 0 ||
  tail -20 "$tmp/sbatch.out" "$tmp/sbatch.submit"
check "... 2 nodes x 2 workers trained" grep -qx 'step_32' "$tmp/sbatch/checkpoints/latest"
export_latest() { "$bin" export "$1/checkpoints/$(cat "$1/checkpoints/latest")" "$2" >/dev/null; }
export_latest "$tmp/sbatch" "$tmp/sbatch.safetensors" && export_latest "$tmp/srun" "$tmp/srun.safetensors"
check "... to the srun job's final weights" cmp -s "$tmp/sbatch.safetensors" "$tmp/srun.safetensors"

# --- scancel: nothing left behind ---
cat >"$tmp/long.sbatch" <<EOF
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=$tmp/long.out
srun --ntasks-per-node=1 $bin run --nproc-per-node 2 -- $bin train ${small[*]} --set train.epochs=1000 \\
  --set data.path=$marker --run-dir $tmp/long --quiet
EOF
jobid=$(run sbatch --parsable "$tmp/long.sbatch" 2>/dev/null)
# ranks 1 and 3 write rank_N.log once training runs: workers are up on both hosts
for _ in $(seq 150); do [[ -e $tmp/long/rank_1.log && -e $tmp/long/rank_3.log ]] && break; sleep 0.2; done
check "long job $jobid: workers training on both hosts" test -e "$tmp/long/rank_1.log" -a -e "$tmp/long/rank_3.log"
check "... launchers and workers running ($(pgrep -f "$marker" | wc -l) processes)" test "$(pgrep -f "$marker" | wc -l)" -ge 6
run scancel "$jobid"
t=0
while pgrep -f "$marker" >/dev/null && ((t++ < 150)); do sleep 0.1; done
check "scancel: no process left (after $((t / 10)) s)" test -z "$(pgrep -f "$marker")"
exit $fail
