// trainbox/env/suspicious_env.h — the environment variables the doctor calls suspicious.
//
// Set to anything, each changes what CUDA, NCCL or torch do, and is usually left over from
// debugging or another machine. The probe flags the ones that are set (finding
// `suspicious-env`); docs/troubleshooting.md's table lists exactly these names (a unit test
// compares the two). NCCL_DEBUG is deliberately absent: NCCL_DEBUG=WARN/INFO is a common,
// deliberate setting, and a warning on every run would teach users to ignore the doctor.
#pragma once

namespace trainbox::env {

struct SuspiciousEnvVar {
  const char* name;
  const char* effect;
};

inline constexpr SuspiciousEnvVar kSuspiciousEnv[] = {
    {"CUDA_LAUNCH_BLOCKING", "every kernel launch waits for completion: much slower (for debugging only)"},
    {"CUDA_INJECTION64_PATH", "loads a tool library (profiler, tracer) into every CUDA process"},
    {"CUDA_PROFILE", "enables the legacy CUDA profiler; adds overhead"},
    {"CUDA_CACHE_DISABLE", "no JIT cache: PTX is recompiled at every start"},
    {"CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "a GPU exception writes a (large, slow) GPU core dump"},
    {"NCCL_P2P_DISABLE", "no NVLink / PCIe peer-to-peer: GPU-to-GPU traffic goes through host memory"},
    {"NCCL_IB_DISABLE", "no InfiniBand/RoCE: inter-node traffic falls back to TCP sockets"},
    {"NCCL_SHM_DISABLE", "no shared-memory transport between processes on a node"},
    {"NCCL_BLOCKING_WAIT", "the old name of TORCH_NCCL_BLOCKING_WAIT"},
    {"TORCH_NCCL_BLOCKING_WAIT", "collectives block the CPU until they finish; changes timeout and error behaviour"},
    {"PYTORCH_NO_CUDA_MEMORY_CACHING", "torch's caching allocator is off: every allocation is a cudaMalloc"},
    {"LD_PRELOAD", "a library loaded into every process before all others (can replace malloc, CUDA calls)"},
};

}  // namespace trainbox::env
