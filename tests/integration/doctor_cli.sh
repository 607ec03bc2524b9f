#!/usr/bin/env bash
# trainbox doctor / smi as a user runs them: exit codes, bad input, and a machine
# without any GPU library. Needs TRAINBOX_BIN and TRAINBOX_SOURCE_DIR (set by ctest).
set -uo pipefail
bin=${TRAINBOX_BIN:?}
fixtures=${TRAINBOX_SOURCE_DIR:?}/tests/fixtures
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect NAME WANTED_RC GREP_PATTERN -- command…
  local name=$1 want=$2 pattern=$3; shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [[ $rc != "$want" ]]; then echo "FAIL $name: exit $rc, wanted $want"; cat "$tmp/out" "$tmp/err"; fail=1; return; fi
  if [[ -n $pattern ]] && ! grep -qE -- "$pattern" "$tmp/out" "$tmp/err"; then
    echo "FAIL $name: output lacks /$pattern/"; cat "$tmp/out" "$tmp/err"; fail=1; return
  fi
  echo "ok   $name"
}

# This machine: exit 0. Without a GPU (CI): the CPU-fallback info finding; with one (the GPU
# test machine): no such finding, and the smoke test below runs on CUDA over NCCL.
if nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  expect doctor-here-gpu 0 'GPUs \(NVML\)' -- "$bin" doctor
  if grep -q 'no-gpu-cpu-fallback' "$tmp/out"; then echo "FAIL doctor-here-gpu: CPU fallback on a GPU machine"; fail=1; fi
  expect doctor-json 0 '"cuda_device_count": [1-9]' -- "$bin" doctor --json
else
  gpu=0
  expect doctor-here 0 'no-gpu-cpu-fallback' -- "$bin" doctor
  expect doctor-json 0 '"id": "no-gpu-cpu-fallback"' -- "$bin" doctor --json
fi
# No GPU library anywhere: still a full report, never a crash.
mkdir "$tmp/empty"
expect doctor-no-libs 0 'libcuda +no' -- "$bin" doctor --library-path "$tmp/empty"
# Saved reports: errors exit 1, warnings only with --strict.
expect from-sm61 1 'gpu-arch-not-in-build' -- "$bin" doctor --from "$fixtures/sm61-cu128.json"
expect from-535 0 'driver-too-old-for-runtime' -- "$bin" doctor --from "$fixtures/driver535-cu128.json"
expect from-535-strict 1 '' -- "$bin" doctor --strict --from "$fixtures/driver535-cu128.json"
expect from-healthy 0 'all checks passed' -- "$bin" doctor --from "$fixtures/healthy-h200.json"
expect from-h100-topology 0 'NV18' -- "$bin" doctor --from "$fixtures/h100x8-nvlink.json"
# The CPU's native bf16, which train.amp = "auto" depends on (issue 43), both ways and in --json.
expect cpu-bf16-native 0 'cpu bf16 +native \(TRAINBOX_CPU_FLAGS\): train.amp = "auto" trains in bf16' -- \
  env TRAINBOX_CPU_FLAGS="avx2 avx512_bf16" "$bin" doctor
expect cpu-bf16-emulated 0 'cpu bf16 +emulated, no avx512_bf16 or amx_bf16 in TRAINBOX_CPU_FLAGS: .*keeps fp32' -- \
  env TRAINBOX_CPU_FLAGS="avx2 fma" "$bin" doctor
expect cpu-bf16-json 0 '"cpu_native_bf16": true' -- env TRAINBOX_CPU_FLAGS="amx_bf16" "$bin" doctor --json
# Bad input: one line, exit 2.
expect unknown-flag 2 'error: .*--bogus' -- "$bin" doctor --bogus
echo '{"host": ' >"$tmp/broken.json"
expect broken-report 2 'not valid JSON' -- "$bin" doctor --from "$tmp/broken.json"
expect missing-report 2 'error' -- "$bin" doctor --from "$tmp/nope.json"
expect no-subcommand 2 'error' -- "$bin"
# --smoke: real work (CPU here: alloc, GEMM vs float64, copy, Gloo allreduce), each checked.
# A torch-free build (-DTRAINBOX_WITH_TORCH=OFF: ctest says so) has no trainbox-torch, by
# design; in any other a missing one is a broken build.
if [[ ${TRAINBOX_WITH_TORCH:-ON} == OFF ]]; then
  echo "n/a  smoke: a torch-free build (TRAINBOX_WITH_TORCH=OFF) has no trainbox-torch"
elif [[ -x $(dirname "$bin")/trainbox-torch ]]; then
  if ((gpu)); then expect smoke 0 'pass +allreduce +.*nccl world of 1' -- "$bin" doctor --smoke
  else expect smoke 0 'pass +allreduce +.*gloo world of 1' -- "$bin" doctor --smoke; fi
else
  echo "FAIL smoke: no trainbox-torch next to $bin in a build with torch"; fail=1
fi
# --smoke reads the helper's result file (TRAINBOX_RESULT_FILE), not its stdout, which may
# carry NCCL_DEBUG chatter: a copy of trainbox next to a fake trainbox-torch shows both paths.
mkdir "$tmp/fake"
cp "$bin" "$tmp/fake/trainbox"
cat >"$tmp/fake/trainbox-torch" <<'EOF'
#!/bin/sh
echo "vm:1:1 [0] NCCL INFO Bootstrap : Using eth0"
[ "$1 $2" = "smoke --json" ] && [ -n "$TRAINBOX_RESULT_FILE" ] || exit 9
printf '%s\n' '{"device":"fake:0","ok":true,"startup_ms":1.5,"checks":[{"name":"allreduce","ok":true,"ms":0.5,"detail":"fake world of 1"}]}' >"$TRAINBOX_RESULT_FILE"
EOF
chmod +x "$tmp/fake/trainbox-torch"
expect smoke-result-file 0 '"detail": "fake world of 1"' -- env TMPDIR="$tmp/fake" "$tmp/fake/trainbox" doctor --smoke --json
if grep -q 'NCCL INFO' "$tmp/out"; then echo "FAIL smoke-result-file: the helper's stdout reached doctor's"; fail=1; fi
if compgen -G "$tmp/fake/trainbox-result-*" >/dev/null; then echo "FAIL smoke-result-file: temporary folder left"; fail=1; fi
expect smoke-result-text 0 'pass +allreduce .*fake world of 1' -- "$tmp/fake/trainbox" doctor --smoke
cat >"$tmp/fake/trainbox-torch" <<'EOF'
#!/bin/sh
echo '{"ok": true}'
exit 1
EOF
expect smoke-no-result 1 'error: trainbox-torch smoke exited 1 without a result' -- "$tmp/fake/trainbox" doctor --smoke
# smi without NVML: one clear line, exit 1.
expect smi-no-nvml 1 'NVML is not available' -- "$bin" smi --library-path "$tmp/empty"
lines=$(wc -l <"$tmp/err")
if ((lines > 2)); then echo "FAIL smi-no-nvml: $lines lines on stderr"; fail=1; fi
exit $fail
