// trainbox/env/nvml.h — NVML (libnvidia-ml.so.1), loaded at run time.
//
// trainbox does not link NVML: the library ships with the driver, so it is absent on
// CPU machines and mismatched after a half-finished driver upgrade — both cases the
// doctor must explain rather than fail to start. The few C entry points used are
// declared in nvml.cpp (NVML's ABI is stable across drivers).
//
//   Nvml nvml = Nvml::open();
//   if (!nvml) { puts(nvml.error().c_str()); return; }     // "libnvidia-ml.so.1: cannot open …"
//   for (const GpuInfo& g : nvml.gpus()) …
// Not thread-safe; one Nvml per thread. nvmlShutdown runs in the destructor.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <trainbox/env/report.h>

namespace trainbox::env {

class Nvml {
 public:
  // Loads NVML from `dirs` (then the default search, if `default_search`) and calls nvmlInit.
  static Nvml open(const std::vector<std::string>& dirs = {}, bool default_search = true);
  Nvml(Nvml&&) noexcept;
  Nvml& operator=(Nvml&&) noexcept;
  ~Nvml();

  explicit operator bool() const;
  const std::string& error() const;         // why NVML is unusable ("" when usable)
  const std::string& library_path() const;  // the libnvidia-ml file that loaded ("" if none)
  int init_status() const;                  // nvmlInit's return code (18 = driver/library mismatch)

  std::string driver_version() const;
  std::string nvml_version() const;
  int cuda_driver_version() const;  // e.g. 13000; -1 unknown
  // One entry per GPU NVML sees (ignores CUDA_VISIBLE_DEVICES, like nvidia-smi).
  std::vector<GpuInfo> gpus(bool with_processes = true) const;
  // topology[i][j]: "X", "NV<links>", "PIX", "PXB", "PHB", "NODE", "SYS" (nvidia-smi topo -m's legend).
  std::vector<std::vector<std::string>> topology() const;

 private:
  struct Impl;
  Nvml();
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainbox::env
