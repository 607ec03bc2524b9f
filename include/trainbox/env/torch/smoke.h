// trainbox/env/torch/smoke.h — `doctor --smoke`: real work on the device, each step checked.
//
// Where the probe only reads facts, the smoke test makes the stack do something:
// allocate device memory, run a GEMM and compare it with the CPU, copy host→device→host,
// and allreduce across a single-rank process group (NCCL on CUDA, Gloo on CPU).
// Without a GPU it says so and runs the CPU equivalents. Links torch. The device's start-up
// is timed on its own (startup_ms); each check's time and figures exclude it, and the GEMM
// and copy figures are taken after one untimed warm-up run.
//
//   SmokeResult r = trainbox::env::run_smoke();
//   for (auto& c : r.checks) printf("%s %s\n", c.ok ? "pass" : "FAIL", c.name.c_str());
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trainbox::env {

struct SmokeCheck {
  std::string name;  // "alloc", "gemm", "copy", "allreduce"
  bool ok = false;
  double ms = 0;       // wall time of the check, after start-up (see SmokeResult::startup_ms)
  std::string detail;  // what was measured, or why it failed
};

struct SmokeResult {
  std::string device;  // "cuda:0 (NVIDIA H200)" or "cpu"
  std::vector<SmokeCheck> checks;
  std::string note;  // e.g. "no CUDA device: ran the CPU equivalents"
  // Device start-up before any check: context creation, the allocator's first block and
  // the first kernel launch. Reported apart, so the checks' timings say what they measure.
  double startup_ms = 0;
  bool ok() const;
};

// device: "auto" (CUDA if available), "cpu", "cuda", "cuda:N".
SmokeResult run_smoke(const std::string& device = "auto");
nlohmann::json smoke_to_json(const SmokeResult& r);

}  // namespace trainbox::env
