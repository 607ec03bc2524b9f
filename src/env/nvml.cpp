#include <trainbox/env/nvml.h>

#include <algorithm>
#include <cstring>
#include <strings.h>

#include <fmt/format.h>

#include <trainbox/env/dynlib.h>

namespace trainbox::env {

// --- the part of nvml.h trainbox uses (NVML API v11+; layouts unchanged since) ---
namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct nvmlProcessInfo_t {  // _v2/_v3 layout
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
constexpr unsigned kNvLinkMaxLinks = 18;
constexpr unsigned long long kNotAvailable = 0xFFFFFFFFFFFFFFFFULL;  // NVML_VALUE_NOT_AVAILABLE for usedGpuMemory
}  // namespace

struct Nvml::Impl {
  DynLib lib;
  std::string error;
  int init_status = -1;
  bool initialised = false;
#define TB_NVML_FN(name, ...) nvmlReturn_t (*name)(__VA_ARGS__) = nullptr;
  TB_NVML_FN(nvmlInit_v2, void)
  TB_NVML_FN(nvmlShutdown, void)
  TB_NVML_FN(nvmlSystemGetDriverVersion, char*, unsigned)
  TB_NVML_FN(nvmlSystemGetNVMLVersion, char*, unsigned)
  TB_NVML_FN(nvmlSystemGetCudaDriverVersion_v2, int*)
  TB_NVML_FN(nvmlSystemGetProcessName, unsigned, char*, unsigned)
  TB_NVML_FN(nvmlDeviceGetCount_v2, unsigned*)
  TB_NVML_FN(nvmlDeviceGetHandleByIndex_v2, unsigned, nvmlDevice_t*)
  TB_NVML_FN(nvmlDeviceGetName, nvmlDevice_t, char*, unsigned)
  TB_NVML_FN(nvmlDeviceGetUUID, nvmlDevice_t, char*, unsigned)
  TB_NVML_FN(nvmlDeviceGetBrand, nvmlDevice_t, int*)
  TB_NVML_FN(nvmlDeviceGetPciInfo_v3, nvmlDevice_t, nvmlPciInfo_t*)
  TB_NVML_FN(nvmlDeviceGetCudaComputeCapability, nvmlDevice_t, int*, int*)
  TB_NVML_FN(nvmlDeviceGetMemoryInfo, nvmlDevice_t, nvmlMemory_t*)
  TB_NVML_FN(nvmlDeviceGetUtilizationRates, nvmlDevice_t, nvmlUtilization_t*)
  TB_NVML_FN(nvmlDeviceGetComputeRunningProcesses_v3, nvmlDevice_t, unsigned*, nvmlProcessInfo_t*)
  TB_NVML_FN(nvmlDeviceGetTemperature, nvmlDevice_t, int, unsigned*)
  TB_NVML_FN(nvmlDeviceGetPowerUsage, nvmlDevice_t, unsigned*)
  TB_NVML_FN(nvmlDeviceGetEnforcedPowerLimit, nvmlDevice_t, unsigned*)
  TB_NVML_FN(nvmlDeviceGetClockInfo, nvmlDevice_t, int, unsigned*)
  TB_NVML_FN(nvmlDeviceGetCurrPcieLinkGeneration, nvmlDevice_t, unsigned*)
  TB_NVML_FN(nvmlDeviceGetCurrPcieLinkWidth, nvmlDevice_t, unsigned*)
  TB_NVML_FN(nvmlDeviceGetMigMode, nvmlDevice_t, unsigned*, unsigned*)
  TB_NVML_FN(nvmlDeviceGetPersistenceMode, nvmlDevice_t, int*)
  TB_NVML_FN(nvmlDeviceGetEccMode, nvmlDevice_t, int*, int*)
  TB_NVML_FN(nvmlDeviceGetTotalEccErrors, nvmlDevice_t, int, int, unsigned long long*)
  TB_NVML_FN(nvmlDeviceGetRetiredPagesPendingStatus, nvmlDevice_t, int*)
  TB_NVML_FN(nvmlDeviceGetRemappedRows, nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*)
  TB_NVML_FN(nvmlDeviceGetTopologyCommonAncestor, nvmlDevice_t, nvmlDevice_t, int*)
  TB_NVML_FN(nvmlDeviceGetNvLinkState, nvmlDevice_t, unsigned, int*)
  TB_NVML_FN(nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlDevice_t, unsigned, nvmlPciInfo_t*)
#undef TB_NVML_FN
  const char* (*nvmlErrorString)(nvmlReturn_t) = nullptr;

  std::string err(nvmlReturn_t r) const {
    return nvmlErrorString ? fmt::format("{} (NVML {})", nvmlErrorString(r), r) : fmt::format("NVML error {}", r);
  }
  std::vector<nvmlDevice_t> devices() const {
    std::vector<nvmlDevice_t> out;
    unsigned n = 0;
    if (!nvmlDeviceGetCount_v2 || nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS) return out;
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      out.push_back(nvmlDeviceGetHandleByIndex_v2 && nvmlDeviceGetHandleByIndex_v2(i, &d) == NVML_SUCCESS ? d
                                                                                                          : nullptr);
    }
    return out;
  }
};

Nvml::Nvml() : impl_(std::make_unique<Impl>()) {}
Nvml::Nvml(Nvml&&) noexcept = default;
Nvml& Nvml::operator=(Nvml&&) noexcept = default;
Nvml::~Nvml() {
  if (impl_ && impl_->initialised && impl_->nvmlShutdown) impl_->nvmlShutdown();
}

Nvml Nvml::open(const std::vector<std::string>& dirs, bool default_search) {
  Nvml n;
  Impl& m = *n.impl_;
  m.lib = DynLib::open({"libnvidia-ml.so.1"}, dirs, default_search);
  if (!m.lib) {
    m.error = m.lib.error();
    return n;
  }
#define TB_LOAD(name) m.name = m.lib.symbol<decltype(m.name)>(#name)
  TB_LOAD(nvmlInit_v2);
  TB_LOAD(nvmlShutdown);
  TB_LOAD(nvmlErrorString);
  TB_LOAD(nvmlSystemGetDriverVersion);
  TB_LOAD(nvmlSystemGetNVMLVersion);
  TB_LOAD(nvmlSystemGetCudaDriverVersion_v2);
  TB_LOAD(nvmlSystemGetProcessName);
  TB_LOAD(nvmlDeviceGetCount_v2);
  TB_LOAD(nvmlDeviceGetHandleByIndex_v2);
  TB_LOAD(nvmlDeviceGetName);
  TB_LOAD(nvmlDeviceGetUUID);
  TB_LOAD(nvmlDeviceGetBrand);
  TB_LOAD(nvmlDeviceGetPciInfo_v3);
  TB_LOAD(nvmlDeviceGetCudaComputeCapability);
  TB_LOAD(nvmlDeviceGetMemoryInfo);
  TB_LOAD(nvmlDeviceGetUtilizationRates);
  TB_LOAD(nvmlDeviceGetComputeRunningProcesses_v3);
  TB_LOAD(nvmlDeviceGetTemperature);
  TB_LOAD(nvmlDeviceGetPowerUsage);
  TB_LOAD(nvmlDeviceGetEnforcedPowerLimit);
  TB_LOAD(nvmlDeviceGetClockInfo);
  TB_LOAD(nvmlDeviceGetCurrPcieLinkGeneration);
  TB_LOAD(nvmlDeviceGetCurrPcieLinkWidth);
  TB_LOAD(nvmlDeviceGetMigMode);
  TB_LOAD(nvmlDeviceGetPersistenceMode);
  TB_LOAD(nvmlDeviceGetEccMode);
  TB_LOAD(nvmlDeviceGetTotalEccErrors);
  TB_LOAD(nvmlDeviceGetRetiredPagesPendingStatus);
  TB_LOAD(nvmlDeviceGetRemappedRows);
  TB_LOAD(nvmlDeviceGetTopologyCommonAncestor);
  TB_LOAD(nvmlDeviceGetNvLinkState);
  TB_LOAD(nvmlDeviceGetNvLinkRemotePciInfo_v2);
#undef TB_LOAD
  if (!m.nvmlInit_v2) {
    m.error = m.lib.path() + " has no nvmlInit_v2 (driver older than R450?)";
    return n;
  }
  m.init_status = m.nvmlInit_v2();
  if (m.init_status != NVML_SUCCESS) {
    m.error = "nvmlInit failed: " + m.err(m.init_status);
    return n;
  }
  m.initialised = true;
  return n;
}

Nvml::operator bool() const { return impl_ && impl_->initialised; }
const std::string& Nvml::error() const { return impl_->error; }
const std::string& Nvml::library_path() const { return impl_->lib.path(); }
int Nvml::init_status() const { return impl_->init_status; }

std::string Nvml::driver_version() const {
  char buf[96] = {};
  if (!*this || !impl_->nvmlSystemGetDriverVersion || impl_->nvmlSystemGetDriverVersion(buf, sizeof buf) != 0)
    return {};
  return buf;
}

std::string Nvml::nvml_version() const {
  char buf[96] = {};
  if (!*this || !impl_->nvmlSystemGetNVMLVersion || impl_->nvmlSystemGetNVMLVersion(buf, sizeof buf) != 0) return {};
  return buf;
}

int Nvml::cuda_driver_version() const {
  int v = -1;
  if (!*this || !impl_->nvmlSystemGetCudaDriverVersion_v2 || impl_->nvmlSystemGetCudaDriverVersion_v2(&v) != 0)
    return -1;
  return v;
}

std::vector<GpuInfo> Nvml::gpus(bool with_processes) const {
  std::vector<GpuInfo> out;
  if (!*this) return out;
  const Impl& m = *impl_;
  auto devs = m.devices();
  for (std::size_t i = 0; i < devs.size(); ++i) {
    GpuInfo g;
    g.index = static_cast<int>(i);
    nvmlDevice_t d = devs[i];
    if (!d) {
      out.push_back(g);
      continue;
    }
    // Each query is optional: NVML answers NOT_SUPPORTED for some on some boards (no ECC on
    // GeForce, no power on some vGPUs); unknown stays -1.
    auto ok = [](nvmlReturn_t r) { return r == NVML_SUCCESS; };
    char buf[128] = {};
    if (m.nvmlDeviceGetName && ok(m.nvmlDeviceGetName(d, buf, sizeof buf))) g.name = buf;
    if (m.nvmlDeviceGetUUID && ok(m.nvmlDeviceGetUUID(d, buf, sizeof buf))) g.uuid = buf;
    int brand = -1;
    if (m.nvmlDeviceGetBrand && ok(m.nvmlDeviceGetBrand(d, &brand)))
      g.brand = brand == 5 || brand == 6   ? "geforce"
                : brand == 1 || brand == 3 ? "quadro"
                : brand == 2               ? "datacenter"
                                           : "other";
    nvmlPciInfo_t pci{};
    if (m.nvmlDeviceGetPciInfo_v3 && ok(m.nvmlDeviceGetPciInfo_v3(d, &pci))) g.pci_bus_id = pci.busId;
    if (m.nvmlDeviceGetCudaComputeCapability) m.nvmlDeviceGetCudaComputeCapability(d, &g.cc_major, &g.cc_minor);
    nvmlMemory_t mem{};
    if (m.nvmlDeviceGetMemoryInfo && ok(m.nvmlDeviceGetMemoryInfo(d, &mem))) {
      g.mem_total_bytes = static_cast<std::int64_t>(mem.total);
      g.mem_used_bytes = static_cast<std::int64_t>(mem.used);
    }
    unsigned u = 0, u2 = 0, u3 = 0, u4 = 0;
    if (m.nvmlDeviceGetCurrPcieLinkGeneration && ok(m.nvmlDeviceGetCurrPcieLinkGeneration(d, &u))) g.pcie_gen = int(u);
    if (m.nvmlDeviceGetCurrPcieLinkWidth && ok(m.nvmlDeviceGetCurrPcieLinkWidth(d, &u))) g.pcie_width = int(u);
    if (m.nvmlDeviceGetMigMode && ok(m.nvmlDeviceGetMigMode(d, &u, &u2))) g.mig_mode = int(u);
    int e = 0, e2 = 0;
    if (m.nvmlDeviceGetPersistenceMode && ok(m.nvmlDeviceGetPersistenceMode(d, &e))) g.persistence_mode = e;
    if (m.nvmlDeviceGetEccMode && ok(m.nvmlDeviceGetEccMode(d, &e, &e2))) g.ecc_mode = e;
    unsigned long long cnt = 0;
    // error type 0 corrected / 1 uncorrected; counter 0 volatile (since driver load).
    if (g.ecc_mode == 1 && m.nvmlDeviceGetTotalEccErrors) {
      if (ok(m.nvmlDeviceGetTotalEccErrors(d, 0, 0, &cnt))) g.ecc_errors_corrected = std::int64_t(cnt);
      if (ok(m.nvmlDeviceGetTotalEccErrors(d, 1, 0, &cnt))) g.ecc_errors_uncorrected = std::int64_t(cnt);
    }
    if (m.nvmlDeviceGetRetiredPagesPendingStatus && ok(m.nvmlDeviceGetRetiredPagesPendingStatus(d, &e)))
      g.retired_pages_pending = e;
    if (m.nvmlDeviceGetRemappedRows && ok(m.nvmlDeviceGetRemappedRows(d, &u, &u2, &u3, &u4))) {
      g.remapped_rows_pending = int(u3 != 0);
      g.remapped_rows_failed = int(u4 != 0);
    }
    if (m.nvmlDeviceGetTemperature && ok(m.nvmlDeviceGetTemperature(d, 0, &u))) g.temperature_c = int(u);
    if (m.nvmlDeviceGetPowerUsage && ok(m.nvmlDeviceGetPowerUsage(d, &u))) g.power_w = u / 1000.0;
    if (m.nvmlDeviceGetEnforcedPowerLimit && ok(m.nvmlDeviceGetEnforcedPowerLimit(d, &u))) g.power_limit_w = u / 1000.0;
    nvmlUtilization_t util{};
    if (m.nvmlDeviceGetUtilizationRates && ok(m.nvmlDeviceGetUtilizationRates(d, &util))) {
      g.util_gpu_pct = int(util.gpu);
      g.util_mem_pct = int(util.memory);
    }
    if (m.nvmlDeviceGetClockInfo && ok(m.nvmlDeviceGetClockInfo(d, 1 /*SM*/, &u))) g.sm_clock_mhz = int(u);
    if (with_processes && m.nvmlDeviceGetComputeRunningProcesses_v3) {
      std::vector<nvmlProcessInfo_t> procs(64);
      unsigned n = static_cast<unsigned>(procs.size());
      nvmlReturn_t r = m.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs.data());
      if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        procs.resize(n + 16);
        n = static_cast<unsigned>(procs.size());
        r = m.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs.data());
      }
      if (ok(r)) {
        for (unsigned k = 0; k < n; ++k) {
          GpuProcess p;
          p.pid = procs[k].pid;
          p.used_bytes = procs[k].usedGpuMemory == kNotAvailable ? -1 : std::int64_t(procs[k].usedGpuMemory);
          char name[256] = {};
          if (m.nvmlSystemGetProcessName && ok(m.nvmlSystemGetProcessName(p.pid, name, sizeof name))) p.name = name;
          g.processes.push_back(std::move(p));
        }
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::vector<std::vector<std::string>> Nvml::topology() const {
  std::vector<std::vector<std::string>> t;
  if (!*this) return t;
  const Impl& m = *impl_;
  auto devs = m.devices();
  const std::size_t n = devs.size();
  t.assign(n, std::vector<std::string>(n, "?"));
  // NVLink: count active links from i whose remote end is GPU j's PCI address.
  std::vector<std::string> bus(n);
  for (std::size_t i = 0; i < n; ++i) {
    nvmlPciInfo_t pci{};
    if (devs[i] && m.nvmlDeviceGetPciInfo_v3 && m.nvmlDeviceGetPciInfo_v3(devs[i], &pci) == NVML_SUCCESS)
      bus[i] = pci.busId;
  }
  std::vector<std::vector<int>> links(n, std::vector<int>(n, 0));
  for (std::size_t i = 0; i < n; ++i) {
    if (!devs[i] || !m.nvmlDeviceGetNvLinkState || !m.nvmlDeviceGetNvLinkRemotePciInfo_v2) continue;
    for (unsigned l = 0; l < kNvLinkMaxLinks; ++l) {
      int active = 0;
      if (m.nvmlDeviceGetNvLinkState(devs[i], l, &active) != NVML_SUCCESS || !active) continue;
      nvmlPciInfo_t remote{};
      if (m.nvmlDeviceGetNvLinkRemotePciInfo_v2(devs[i], l, &remote) != NVML_SUCCESS) continue;
      for (std::size_t j = 0; j < n; ++j)
        if (j != i && !bus[j].empty() && strcasecmp(bus[j].c_str(), remote.busId) == 0) ++links[i][j];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      if (i == j) {
        t[i][j] = "X";
        continue;
      }
      if (links[i][j] > 0) {
        t[i][j] = "NV" + std::to_string(links[i][j]);
        continue;
      }
      int level = -1;
      if (devs[i] && devs[j] && m.nvmlDeviceGetTopologyCommonAncestor &&
          m.nvmlDeviceGetTopologyCommonAncestor(devs[i], devs[j], &level) == NVML_SUCCESS) {
        t[i][j] = level <= 10 ? "PIX" : level <= 20 ? "PXB" : level <= 30 ? "PHB" : level <= 40 ? "NODE" : "SYS";
      }
    }
  }
  return t;
}

}  // namespace trainbox::env
