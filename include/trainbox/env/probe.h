// trainbox/env/probe.h — fill an EnvReport from the real machine.
//
// The only code in trainbox that looks at the machine for the doctor: /proc, /sys,
// /dev, the environment, the GPU libraries (dlopen'ed, never linked) and the torch
// build's files (read as files, never loaded, so a broken LibTorch is still described).
// Never throws for a missing or broken component: that is a fact for the report.
//
//   trainbox::env::ProbeOptions o;
//   o.library_path = {"/tmp/empty"}; o.library_path_only = true;   // pretend nothing is installed
//   EnvReport r = trainbox::env::probe(o);
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <trainbox/env/report.h>

namespace trainbox::env {

struct ProbeOptions {
  // Directories searched first for the GPU libraries (libcuda, NVML, cudart, cuBLAS, cuDNN, NCCL).
  std::vector<std::string> library_path;
  // Search only `library_path`: no torch RUNPATH, no default dynamic-linker search.
  bool library_path_only = false;
  // Torch package or LibTorch directory (holding lib/libtorch_cpu.so). Empty: $TRAINBOX_TORCH_DIR,
  // else the torch trainbox was built against.
  std::string torch_dir;
  // Prefix for /proc, /sys, /dev and /etc, for tests on a fake file tree ("" = the real one).
  std::string root;
  // List the processes on each GPU (smi wants them; costs a little).
  bool gpu_processes = true;
};

EnvReport probe(const ProbeOptions& options = {});

// The torch directory probe() uses when ProbeOptions::torch_dir is empty ("" if none is known).
std::string default_torch_dir();

// Reads the torch build's facts from its files (version.py / build-version, wheel METADATA,
// libtorch_cuda.so's fatbin, libc10.so's symbols). `found` is false when `dir` holds no LibTorch.
TorchInfo probe_torch(const std::string& dir);

// The doctor's redaction rule: a variable (or option) name containing TOKEN, KEY, PASSWORD,
// PASSWD, SECRET or CREDENTIAL (any case) holds a secret; its value is shown as <redacted>.
// Also used by `trainbox run --dashboard` (dashboard/dashboard.h) for the command and log lines.
bool looks_secret(std::string_view name);

}  // namespace trainbox::env
