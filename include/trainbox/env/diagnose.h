// trainbox/env/diagnose.h — verdicts on an EnvReport: a pure function, no I/O.
//
// Each Finding has a stable id (its long form is the section of the same name in
// docs/troubleshooting.md), a severity, one line saying what is wrong and one line
// saying how to fix it. Findings come sorted: errors, then warnings, then info.
// diagnose() runs a table of small rules, one per id (src/env/diagnose.cpp, kRules); the
// list of ids and the fabric ids are read off that table, so they cannot drift from it.
//
//   auto findings = trainbox::env::diagnose(report);
//   int rc = trainbox::env::exit_code(findings, /*strict=*/false);   // 0 / 1
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <trainbox/env/report.h>

namespace trainbox::env {

enum class Severity { kError = 0, kWarning = 1, kInfo = 2 };
std::string_view severity_name(Severity s);  // "error", "warning", "info"

struct Finding {
  Severity severity = Severity::kInfo;
  std::string id;       // stable, kebab-case: "driver-too-old-for-runtime"
  std::string message;  // what is wrong, with the facts that show it
  std::string fix;      // what to do
  int gpu = -1;         // the GPU it concerns, -1 for the whole machine
};

// Every id diagnose() can emit, in the table's order (docs/troubleshooting.md has a section
// for each).
const std::vector<std::string>& finding_ids();
// The fabric's ids (HCAs, RDMA devices, memlock, GPUDirect RDMA, NCCL's network variables):
// what `trainbox preflight` copies into each node's facts (env/preflight.h).
bool is_fabric_finding(std::string_view id);

std::vector<Finding> diagnose(const EnvReport& report);

// 1 if any error (or, with strict, any warning), else 0.
int exit_code(const std::vector<Finding>& findings, bool strict);

// --- facts diagnose() relies on, exposed for tests and other commands ---

// Minimum Linux driver for a CUDA toolkit/runtime version ("12.8" → "570.26"); empty if unknown.
std::string min_driver_for_cuda(std::string_view cuda_version);
// The driver floor for CUDA minor-version compatibility within a major ("12.x" → "525.60.13").
std::string minor_compat_floor(int cuda_major);
// Can device code in `arch_list` ("sm_90", "sm_90a", "compute_120") run on compute capability major.minor?
// SASS runs on the same major at an equal or higher minor ("a"/"f" variants only on the exact one);
// PTX is JIT-compiled for any equal or higher capability.
bool arch_list_supports(const std::vector<std::string>& arch_list, int cc_major, int cc_minor);
// Data center parts (the only ones forward compatibility supports): Tesla, A100, H100/H200, B200, L4/L40, ...
bool is_datacenter_gpu(const GpuInfo& gpu);

}  // namespace trainbox::env
