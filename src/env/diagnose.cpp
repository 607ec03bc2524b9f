#include <trainbox/env/diagnose.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <string_view>

#include <fmt/format.h>

#include <trainbox/env/fabric.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox::env {

std::string_view severity_name(Severity s) {
  static constexpr std::string_view kNames[] = {"error", "warning", "info"};  // by Severity's value
  const auto i = static_cast<std::size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
}

// CUDA Toolkit Release Notes, Table 3 (Linux x86_64): toolkit → minimum driver.
std::string min_driver_for_cuda(std::string_view cuda_version) {
  static const std::map<std::string, std::string> kTable = {
      {"11.8", "520.61.05"}, {"12.0", "525.60.13"}, {"12.1", "530.30.02"}, {"12.2", "535.54.03"},
      {"12.3", "545.23.06"}, {"12.4", "550.54.14"}, {"12.5", "555.42.02"}, {"12.6", "560.28.03"},
      {"12.8", "570.26"},    {"12.9", "575.51.03"}, {"13.0", "580.65.06"}, {"13.1", "590.44.01"}};
  auto v = parse_version(cuda_version);
  if (v.size() < 2) return {};
  auto it = kTable.find(fmt::format("{}.{}", v[0], v[1]));
  return it == kTable.end() ? std::string{} : it->second;
}

// Minor-version compatibility: any runtime of a major runs on a driver at or above this floor.
std::string minor_compat_floor(int cuda_major) {
  switch (cuda_major) {
    case 11: return "450.80.02";
    case 12: return "525.60.13";
    case 13: return "580";
    default: return {};
  }
}

namespace {
struct ArchEntry {
  int num = 0;  // 90, 120, ...
  bool ptx = false;
  char suffix = 0;  // 'a' (arch-specific), 'f' (family) or 0
};
bool parse_arch(const std::string& s, ArchEntry& e) {
  std::smatch m;
  if (!std::regex_match(s, m, std::regex(R"((sm|compute)_(\d+)([af]?))"))) return false;
  e.ptx = m[1] == "compute";
  const auto num = parse_integer(m[2].str());  // 18 digits at most, then a range an int holds
  if (!num || *num > 10000) return false;
  e.num = static_cast<int>(*num);
  e.suffix = m[3].length() ? m[3].str()[0] : 0;
  return true;
}
}  // namespace

bool arch_list_supports(const std::vector<std::string>& arch_list, int cc_major, int cc_minor) {
  const int cc = cc_major * 10 + cc_minor;
  for (const auto& a : arch_list) {
    ArchEntry e;
    if (!parse_arch(a, e)) continue;
    if (e.suffix == 'a') {
      if (e.num == cc) return true;
      continue;
    }
    if (e.ptx) {
      if (e.num <= cc) return true;  // PTX is JIT-compiled forward
    } else if (e.num / 10 == cc_major && e.num % 10 <= cc_minor) {
      return true;  // SASS: same major, equal or higher minor
    }
  }
  return false;
}

bool is_datacenter_gpu(const GpuInfo& g) {
  if (g.brand == "datacenter") return true;
  static const std::regex kDatacenter(
      R"((Tesla|\b(A100|A800|A30|A40|A10|A16|A2|H100|H200|H800|H20|GH200|B100|B200|B300|GB200|GB300|L4|L40S?|L20|V100|T4|P100|P40)\b))");
  return std::regex_search(g.name, kDatacenter);
}

namespace {

bool has_node(const EnvReport& r, const std::string& n) {
  return std::find(r.driver.device_nodes.begin(), r.driver.device_nodes.end(), n) != r.driver.device_nodes.end();
}

std::string gpu_label(const GpuInfo& g) { return fmt::format("GPU {} ({})", g.index, g.name.empty() ? "?" : g.name); }

// "13.0" → 13000 (CUDA API integer).
int cuda_text_to_int(const std::string& v) {
  auto p = parse_version(v);
  return p.size() >= 2 ? p[0] * 1000 + p[1] * 10 : -1;
}

std::optional<std::string> env_value(const EnvReport& r, const std::string& name) {
  for (const auto& v : r.env.vars)
    if (v.name == name) return v.value;
  return std::nullopt;
}

std::string port_label(const HcaInfo& h, const HcaPort& p) {
  const std::string layer = p.link_layer == "Ethernet" ? "RoCE" : p.link_layer.empty() ? "?" : p.link_layer;
  return fmt::format("{} port {} ({}{})", h.name, p.port, layer, p.netdev.empty() ? "" : ", " + p.netdev);
}

std::string human_limit(std::int64_t v) {
  return v == -1 ? std::string("unlimited")
         : v < 0 ? std::string("unknown")
                 : human_bytes(static_cast<std::uint64_t>(v));
}

using HcaPorts = std::vector<std::pair<std::string, std::vector<int>>>;  // name → port numbers

// What several rules ask of a report, worked out once (facts_of).
struct Facts {
  explicit Facts(const EnvReport& report) : r(report), d(report.driver), libcuda(report.library("libcuda")) {}
  const EnvReport& r;
  const DriverInfo& d;
  const LibraryInfo* libcuda;
  bool in_container = false, driver_loaded = false, gpu_on_bus = false, libcuda_loaded = false, torch_cuda = false;
  bool gpu_present = false;    // a GPU CUDA or NVML sees: cuDNN, NCCL and the fabric matter
  std::string driver_version;  // the user-space driver's, else the kernel module's
  std::string need_text;       // "driver >= 570.26 (CUDA 12.8, as torch 2.7.0 needs)"
  // The kernel module against NVML's or libcuda's version (or NVML's own "mismatch" error);
  // the other driver rules stay quiet about a mismatch.
  bool mismatch = false;
  std::string mismatch_lib_name, mismatch_lib_version;
  // --- the fabric ---
  std::vector<std::string> active_ports, down_ports;  // labels; down ones say their state
  HcaPorts hca_ports;
  bool rdma_matters = false;  // a GPU and an active port: NCCL would use these HCAs
  bool gdr = false;           // GPUDirect RDMA possible: nvidia_peermem, or dma-buf not turned off
};

void find_library_mismatch(Facts& f) {
  const auto& d = f.d;
  if (d.kernel_module_version.empty()) return;
  if (!d.nvml_library_version.empty() && d.nvml_library_version != d.kernel_module_version) {
    f.mismatch_lib_version = d.nvml_library_version;
    f.mismatch_lib_name = "NVML library";
  } else if (!d.forward_compat && !d.libcuda_version.empty() && d.libcuda_version != d.kernel_module_version) {
    f.mismatch_lib_version = d.libcuda_version;
    f.mismatch_lib_name = "libcuda";
  }
  f.mismatch = !f.mismatch_lib_version.empty() || d.nvml_error.find("mismatch") != std::string::npos;
}

void find_fabric_facts(Facts& f) {
  for (const auto& h : f.r.fabric.hcas) {
    std::vector<int> ports;
    for (const auto& p : h.ports) {
      ports.push_back(p.port);
      if (p.state == "ACTIVE")
        f.active_ports.push_back(port_label(h, p));
      else
        f.down_ports.push_back(fmt::format("{} is {}{}", port_label(h, p), p.state,
                                           p.phys_state.empty() ? "" : " (physical " + p.phys_state + ")"));
    }
    f.hca_ports.emplace_back(h.name, ports);
  }
  f.rdma_matters = f.gpu_present && !f.active_ports.empty();
  const auto dmabuf_env = env_value(f.r, "NCCL_DMABUF_ENABLE");
  const bool dmabuf_off = dmabuf_env && trim(*dmabuf_env) == "0";
  f.gdr = f.r.fabric.peermem_loaded == 1 || (f.r.fabric.dmabuf == 1 && !dmabuf_off);
}

Facts facts_of(const EnvReport& r) {
  Facts f(r);
  const auto& d = r.driver;
  f.in_container = !r.host.container.empty();
  f.driver_loaded = !d.kernel_module_version.empty() || has_node(r, "/dev/nvidiactl") || has_node(r, "/dev/dxg") ||
                    has_node(r, "/dev/nvgpu");
  f.gpu_on_bus = !r.host.nvidia_pci_devices.empty() || !r.gpus.empty();
  f.libcuda_loaded = f.libcuda && f.libcuda->loadable;
  f.torch_cuda = r.torch.found && !r.torch.cuda_version.empty();
  f.gpu_present = !r.gpus.empty() || d.cuda_device_count > 0;
  f.driver_version = !d.driver_version.empty() ? d.driver_version : d.kernel_module_version;
  const std::string need_driver = min_driver_for_cuda(r.torch.cuda_version);
  f.need_text = need_driver.empty() ? std::string("a current driver")
                                    : fmt::format("driver >= {} (CUDA {}, as torch {} needs)", need_driver,
                                                  r.torch.cuda_version, r.torch.version);
  find_library_mismatch(f);
  find_fabric_facts(f);
  return f;
}

// Where a rule's findings go. The id is the rule's own: a rule cannot emit another's id, so the
// table's ids are every id diagnose() can emit.
class Out {
 public:
  Out(std::string_view id, std::vector<Finding>& findings) : id_(id), findings_(findings) {}
  void add(Severity s, std::string message, std::string fix, int gpu = -1) {
    findings_.push_back(Finding{s, std::string(id_), std::move(message), std::move(fix), gpu});
  }

 private:
  std::string_view id_;
  std::vector<Finding>& findings_;
};

// ============================== the driver ==============================
void no_driver(const Facts& f, Out& out) {
  if (f.driver_loaded || !f.gpu_on_bus) return;
  const auto& r = f.r;
  std::string where = r.host.nvidia_pci_devices.empty() ? std::string("present")
                                                        : "on the PCI bus at " + r.host.nvidia_pci_devices.front();
  out.add(Severity::kError,
          fmt::format(
              "an NVIDIA GPU is {} but no NVIDIA driver is loaded (no /proc/driver/nvidia/version, no /dev/nvidiactl)",
              where),
          f.in_container ? "start the container with --gpus all (NVIDIA Container Toolkit installed on the host)"
                         : "install the NVIDIA driver (" + f.need_text + "), then reboot or `modprobe nvidia`");
}

void libcuda_missing(const Facts& f, Out& out) {
  if (!f.driver_loaded || f.libcuda_loaded) return;
  out.add(Severity::kError,
          "the NVIDIA kernel driver is loaded but libcuda.so.1 cannot be loaded: " +
              (f.libcuda ? f.libcuda->error : std::string("not probed")),
          f.in_container ? "start the container with --gpus all so the driver's user-space libraries are mounted"
                         : "install the driver's user-space part (e.g. libnvidia-compute-" +
                               (f.driver_version.empty() ? std::string("<version>") : split(f.driver_version, '.')[0]) +
                               ") matching kernel module " + f.d.kernel_module_version);
}

void libcuda_stub_loaded(const Facts& f, Out& out) {
  if (f.libcuda_loaded && f.libcuda->stub) {
    out.add(Severity::kError,
            "libcuda.so.1 resolves to a link-time stub: " + f.libcuda->path +
                " (CUDA calls fail with CUDA_ERROR_STUB_LIBRARY)",
            "remove the stubs directory from LD_LIBRARY_PATH / ld.so.conf; stubs are for linking only");
    return;
  }
  for (const auto& p : f.r.env.ld_library_path)
    if (p.find("/stubs") != std::string::npos) {
      out.add(Severity::kWarning,
              "LD_LIBRARY_PATH contains a stubs directory (" + p + "): a stub libcuda can shadow the driver's",
              "remove " + p + " from LD_LIBRARY_PATH; link against stubs at build time only");
      return;
    }
}

void driver_library_mismatch(const Facts& f, Out& out) {
  if (!f.mismatch) return;
  out.add(
      Severity::kError,
      fmt::format("kernel module {} but {} {} (\"Failed to initialize NVML: Driver/library version mismatch\")",
                  f.d.kernel_module_version, f.mismatch_lib_name.empty() ? "user-space driver" : f.mismatch_lib_name,
                  f.mismatch_lib_version.empty() ? "differs" : f.mismatch_lib_version),
      "reboot (or unload and reload the nvidia kernel modules) so the kernel module matches the installed "
      "libraries");
}

void nvml_unavailable(const Facts& f, Out& out) {
  if (!f.driver_loaded || f.d.nvml_error.empty() || f.mismatch) return;
  out.add(Severity::kWarning, "NVML cannot be used: " + f.d.nvml_error,
          "check that libnvidia-ml.so.1 from the driver is installed (in containers: --gpus all); GPU health facts and "
          "`trainbox smi` need it");
}

void cuda_init_failed(const Facts& f, Out& out) {
  const auto& d = f.d;
  if (!f.libcuda_loaded || f.libcuda->stub || d.cuda_init_error.empty() || f.mismatch) return;
  const bool no_device = d.cuda_init_error.find("NO_DEVICE") != std::string::npos;
  if (no_device && f.r.env.cuda_visible_devices_set) return;  // cvd-empty / cvd-invalid say why
  out.add(Severity::kError, d.cuda_init_error,
          has_node(f.r, "/dev/nvidia-uvm") || !f.driver_loaded
              ? "reload the driver's modules (`sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`), check `dmesg` for "
                "NVRM errors, or reboot"
              : "load nvidia-uvm: `sudo modprobe nvidia_uvm` (or `nvidia-modprobe -u -c=0`)");
}

void uvm_missing(const Facts& f, Out& out) {
  const auto& r = f.r;
  if (!f.driver_loaded || !f.gpu_on_bus || has_node(r, "/dev/nvidia-uvm") || has_node(r, "/dev/dxg") ||
      has_node(r, "/dev/nvgpu"))
    return;
  out.add(Severity::kError,
          "/dev/nvidia-uvm is missing: CUDA fails with \"CUDA unknown error - this may be due to an incorrectly set up "
          "environment\"",
          f.in_container ? "start the container with --gpus all (the toolkit mounts /dev/nvidia-uvm)"
                         : "`sudo modprobe nvidia_uvm` or `sudo nvidia-modprobe -u -c=0`");
}

// ============================== the driver against torch's build ==============================
void driver_too_old_for_runtime(const Facts& f, Out& out) {
  const auto& r = f.r;
  const auto& d = f.d;
  if (!f.torch_cuda || d.cuda_driver_version <= 0) return;
  const int need = cuda_text_to_int(r.torch.cuda_version);
  if (need <= 0 || d.cuda_driver_version >= need) return;
  const int torch_major = need / 1000;
  const std::string floor = minor_compat_floor(torch_major);
  const bool minor_compat = d.cuda_driver_version / 1000 == torch_major && !floor.empty() &&
                            !f.driver_version.empty() && compare_versions(f.driver_version, floor) >= 0;
  bool sass_everywhere = true;
  for (const auto& g : r.gpus) {
    std::vector<std::string> sass;
    for (const auto& a : r.torch.arch_list)
      if (starts_with(a, "sm_")) sass.push_back(a);
    if (g.cc_major >= 0 && !arch_list_supports(sass, g.cc_major, g.cc_minor)) sass_everywhere = false;
  }
  const std::string have =
      fmt::format("driver {} supports CUDA up to {}.{}", f.driver_version.empty() ? "?" : f.driver_version,
                  d.cuda_driver_version / 1000, (d.cuda_driver_version % 1000) / 10);
  if (minor_compat && sass_everywhere) {
    out.add(Severity::kWarning,
            fmt::format("{}; torch {} is built for CUDA {}: runs through minor-version compatibility (driver >= {}), "
                        "but PTX JIT and APIs newer than the driver fail (cudaErrorUnsupportedPtxVersion, "
                        "cudaErrorCallRequiresNewerDriver)",
                        have, r.torch.version, r.torch.cuda_version, floor),
            "upgrade to " + f.need_text + ", or use a torch build for CUDA " +
                fmt::format("{}.{}", d.cuda_driver_version / 1000, (d.cuda_driver_version % 1000) / 10));
    return;
  }
  std::string why = minor_compat ? " and the GPU needs PTX JIT, which minor-version compatibility cannot do" : "";
  out.add(Severity::kError,
          fmt::format("{}; torch {} needs CUDA {}{} (\"The NVIDIA driver on your system is too old\")", have,
                      r.torch.version, r.torch.cuda_version, why),
          "upgrade to " + f.need_text +
              (r.gpus.empty() || std::all_of(r.gpus.begin(), r.gpus.end(), is_datacenter_gpu)
                   ? ", use the cuda-compat package (forward compatibility, data center GPUs only),"
                   : ",") +
              " or install a torch build for the driver's CUDA version");
}

void compat_package_on_unsupported_gpu(const Facts& f, Out& out) {
  if (!f.d.forward_compat) return;
  for (const auto& g : f.r.gpus)
    if (!is_datacenter_gpu(g))
      out.add(Severity::kError,
              fmt::format("forward-compatibility libcuda {} (on kernel module {}) is in use, but {} is not a data "
                          "center GPU (error 804 \"forward compatibility was attempted on non supported HW\")",
                          f.d.libcuda_version, f.d.kernel_module_version, gpu_label(g)),
              "remove the cuda-compat libraries from the library path and upgrade the driver instead", g.index);
}

void gpu_arch_not_in_build(const Facts& f, Out& out) {
  const auto& t = f.r.torch;
  if (!f.torch_cuda || t.arch_list.empty()) return;
  for (const auto& g : f.r.gpus) {
    if (g.cc_major < 0 || arch_list_supports(t.arch_list, g.cc_major, g.cc_minor)) continue;
    out.add(Severity::kError,
            fmt::format("{} has compute capability {}.{} (sm_{}{}), but torch {} carries no SASS or PTX that runs on "
                        "it (built for {}): \"no kernel image is available for execution on the device\"",
                        gpu_label(g), g.cc_major, g.cc_minor, g.cc_major, g.cc_minor, t.version,
                        fmt::join(t.arch_list, " ")),
            fmt::format("install a torch build that includes sm_{}{} (an older CUDA wheel, e.g. cu126 still ships "
                        "sm_50/sm_60), or build LibTorch with TORCH_CUDA_ARCH_LIST=\"{}.{}\"",
                        g.cc_major, g.cc_minor, g.cc_major, g.cc_minor),
            g.index);
  }
}

// ============================== the process's environment ==============================
void cvd_empty(const Facts& f, Out& out) {
  const auto& r = f.r;
  if (!r.env.cuda_visible_devices_set || !trim(r.env.cuda_visible_devices).empty()) return;
  out.add(r.gpus.empty() ? Severity::kWarning : Severity::kError,
          fmt::format("CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU{} (\"No CUDA GPUs are available\")",
                      r.gpus.empty()
                          ? ""
                          : fmt::format(" although {} {} present", r.gpus.size(), r.gpus.size() == 1 ? "is" : "are")),
          "unset CUDA_VISIBLE_DEVICES, or list the GPUs to use (e.g. CUDA_VISIBLE_DEVICES=0,1)");
}

// Does one CUDA_VISIBLE_DEVICES entry name a GPU of this report? (None probed: any index or UUID.)
bool names_a_gpu(const std::vector<GpuInfo>& gpus, const std::string& tok) {
  if (auto idx = parse_integer(tok); idx && !tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0])))
    return gpus.empty() || *idx < static_cast<long long>(gpus.size());
  if (starts_with(tok, "GPU-") || starts_with(tok, "MIG-"))
    return gpus.empty() || starts_with(tok, "MIG-") ||
           std::any_of(gpus.begin(), gpus.end(), [&](const GpuInfo& g) { return starts_with(g.uuid, tok); });
  return false;
}

void cvd_invalid(const Facts& f, Out& out) {
  const auto& r = f.r;
  if (!r.env.cuda_visible_devices_set) return;
  for (const auto& raw : split(trim(r.env.cuda_visible_devices), ',')) {
    const std::string tok = trim(raw);
    if (names_a_gpu(r.gpus, tok)) continue;
    out.add(Severity::kError,
            fmt::format("CUDA_VISIBLE_DEVICES=\"{}\" names \"{}\", which is not a GPU here ({} GPU{}: indices 0..{}); "
                        "CUDA ignores it and every entry after it",
                        r.env.cuda_visible_devices, tok, r.gpus.size(), r.gpus.size() == 1 ? "" : "s",
                        r.gpus.empty() ? 0 : r.gpus.size() - 1),
            "use indices or UUIDs that `trainbox smi` lists, or unset CUDA_VISIBLE_DEVICES");
    return;  // CUDA stops at the first bad entry: so does the report
  }
}

void shm_too_small(const Facts& f, Out& out) {
  constexpr std::int64_t kGiB = 1LL << 30, kDockerDefault = 64LL << 20;
  const std::int64_t shm = f.r.host.shm_bytes;
  if (shm >= 0 && shm < kGiB) {
    std::string what = shm == kDockerDefault
                           ? "/dev/shm is 64 MiB, the container default: NCCL fails with \"failed to extend "
                             "/dev/shm\" / \"unhandled system error\" and data loader workers run out of shared memory"
                           : "/dev/shm is " + human_bytes(static_cast<std::uint64_t>(shm)) +
                                 " (< 1 GiB): NCCL and multi-process data loading need more";
    out.add(Severity::kWarning, what,
            "docker run --ipc=host (or --shm-size=16g); Kubernetes: mount an emptyDir with medium: Memory at /dev/shm");
  } else if (shm < 0) {
    out.add(Severity::kWarning, "/dev/shm is missing: NCCL's shared-memory transport cannot work",
            "mount a tmpfs at /dev/shm (docker: --ipc=host or --shm-size=16g)");
  }
}

// ============================== cuDNN and NCCL, when torch would use the GPU ==============================
void cudnn_missing(const Facts& f, Out& out) {
  const LibraryInfo* cudnn = f.r.library("cudnn");
  if (!f.torch_cuda || !f.gpu_present || !cudnn || cudnn->loadable) return;
  const auto& t = f.r.torch;
  out.add(Severity::kError,
          "torch is built with cuDNN " + t.cudnn_version + " but libcudnn cannot be loaded: " + cudnn->error,
          "reinstall the torch wheel with its dependencies (pip install --force-reinstall torch==" + t.version +
              ") or put cuDNN " + t.cudnn_version + " on the library path");
}

void cudnn_version_mismatch(const Facts& f, Out& out) {
  const LibraryInfo* cudnn = f.r.library("cudnn");
  const auto& t = f.r.torch;
  if (!f.torch_cuda || !f.gpu_present || !cudnn || !cudnn->loadable || cudnn->version.empty() ||
      t.cudnn_version.empty())
    return;
  auto have = parse_version(cudnn->version), want = parse_version(t.cudnn_version);
  if (!have.empty() && !want.empty() && have[0] != want[0]) {
    out.add(Severity::kError,
            fmt::format("cuDNN {} is loaded ({}) but torch was built with cuDNN {}: a different major version",
                        cudnn->version, cudnn->path, t.cudnn_version),
            "remove the other cuDNN from LD_LIBRARY_PATH so torch loads its own (" + t.cudnn_version + ")");
  } else if (compare_versions(cudnn->version, t.cudnn_version) < 0) {
    out.add(Severity::kWarning,
            fmt::format("cuDNN {} is loaded ({}) but torch was built with cuDNN {}: older than the build",
                        cudnn->version, cudnn->path, t.cudnn_version),
            "put cuDNN >= " + t.cudnn_version + " first on the library path (the wheel's nvidia-cudnn package)");
  }
}

void nccl_missing(const Facts& f, Out& out) {
  const LibraryInfo* nccl = f.r.library("nccl");
  if (!f.torch_cuda || !f.gpu_present || !nccl || nccl->loadable) return;
  out.add(Severity::kError, "libnccl.so.2 cannot be loaded: " + nccl->error,
          "reinstall the torch wheel with its dependencies (it brings nvidia-nccl " + f.r.torch.nccl_version +
              ") or install libnccl2");
}

// ============================== torch itself ==============================
void torch_not_found(const Facts& f, Out& out) {
  const auto& t = f.r.torch;
  if (t.found) return;
  out.add(Severity::kWarning, "no LibTorch found" + (t.error.empty() ? "" : ": " + t.error),
          "run scripts/bootstrap (installs the pinned torch wheel) or set TRAINBOX_TORCH_DIR to a torch/LibTorch "
          "directory");
}

void torch_cpu_only(const Facts& f, Out& out) {
  if (!f.r.torch.found || f.torch_cuda || !f.gpu_present) return;
  out.add(Severity::kWarning,
          "torch " + f.r.torch.version + " is a CPU-only build but GPUs are present: training will not use them",
          "install the CUDA build of torch (the default Linux wheel from PyPI)");
}

// ============================== each GPU's health ==============================
void mig_enabled(const Facts&, const GpuInfo& g, Out& out) {
  if (g.mig_mode != 1) return;
  out.add(Severity::kWarning,
          gpu_label(g) +
              " is in MIG mode: a process sees one MIG instance, and NCCL cannot span MIG instances, so "
              "multi-process data-parallel training across slices does not work",
          "for multi-GPU training disable MIG (`sudo nvidia-smi -i " + std::to_string(g.index) +
              " -mig 0`, then reset the GPU); to use one slice, set CUDA_VISIBLE_DEVICES=MIG-<uuid>",
          g.index);
}

void ecc_errors(const Facts&, const GpuInfo& g, Out& out) {
  if (g.ecc_errors_uncorrected <= 0) return;
  out.add(
      Severity::kError,
      fmt::format("{} has {} uncorrected ECC error(s) since the driver loaded", gpu_label(g), g.ecc_errors_uncorrected),
      "drain the GPU, reset it (`sudo nvidia-smi -r -i " + std::to_string(g.index) +
          "`) and run `dcgmi diag -r 3`; repeated errors mean RMA",
      g.index);
}

void retired_pages_pending(const Facts&, const GpuInfo& g, Out& out) {
  if (g.retired_pages_pending != 1 && g.remapped_rows_pending != 1) return;
  out.add(Severity::kWarning,
          gpu_label(g) +
              (g.remapped_rows_pending == 1 ? " has a row remapping pending" : " has a page retirement pending") +
              ": the faulty memory stays in use until the GPU is reset",
          "reset the GPU (`sudo nvidia-smi -r -i " + std::to_string(g.index) + "`) or reboot", g.index);
}

void row_remap_failed(const Facts&, const GpuInfo& g, Out& out) {
  if (g.remapped_rows_failed != 1) return;
  out.add(Severity::kError, gpu_label(g) + " reports a failed row remapping: a memory hardware fault",
          "take the GPU out of service and RMA it", g.index);
}

void persistence_off(const Facts&, const GpuInfo& g, Out& out) {
  if (g.persistence_mode != 0) return;
  out.add(Severity::kInfo,
          gpu_label(g) + " has persistence mode off: each first CUDA call re-initialises the GPU (seconds)",
          "`sudo nvidia-smi -pm 1` or run nvidia-persistenced", g.index);
}

// ============================== what trainbox will do ==============================
void no_gpu_cpu_fallback(const Facts& f, Out& out) {
  if (f.d.cuda_device_count > 0) return;
  out.add(Severity::kInfo, "no usable CUDA GPU: trainbox will train on CPU",
          f.gpu_on_bus ? "fix the errors above to train on the GPU"
                       : "nothing to do for CPU training; on a GPU machine check the driver");
}

void suspicious_env(const Facts& f, Out& out) {
  const auto& s = f.r.env.suspicious;
  if (s.empty()) return;
  out.add(Severity::kWarning,
          fmt::format("set in the environment and changing CUDA/NCCL/torch behaviour: {}", fmt::join(s, ", ")),
          "unset them unless you are debugging (`unset " + fmt::format("{}", fmt::join(s, " ")) + "`)");
}

// ============================== the fabric: HCAs, device nodes, memlock, GPUDirect RDMA ==============================
void rdma_port_down(const Facts& f, Out& out) {
  if (f.down_ports.empty()) return;
  const bool none = f.active_ports.empty();
  out.add(none && f.gpu_present ? Severity::kError : Severity::kWarning,
          fmt::format("{}; {} of {} RDMA port(s) active{}", fmt::join(f.down_ports, "; "), f.active_ports.size(),
                      f.active_ports.size() + f.down_ports.size(),
                      none ? ": NCCL finds no usable HCA and falls back to TCP sockets"
                           : ": NCCL leaves the down ports out, and "
                             "the node has that much less bandwidth"),
          "check the cable and the switch port (`ibstat`, `ibstatus`; for RoCE `ip link` on the netdev), and that the "
          "subnet "
          "manager runs (`sminfo`); `mlxlink -d <hca>` shows the physical link");
}

void rdma_devices_missing(const Facts& f, Out& out) {
  const auto& fab = f.r.fabric;
  if (!f.rdma_matters || (!fab.uverbs.empty() && fab.uverbs_unopenable.empty())) return;
  std::string what = !fab.dev_infiniband  ? std::string("/dev/infiniband does not exist")
                     : fab.uverbs.empty() ? std::string("/dev/infiniband has no uverbs* device")
                                          : fmt::format("/dev/infiniband/{} cannot be opened",
                                                        fmt::join(fab.uverbs_unopenable, ", /dev/infiniband/"));
  out.add(
      Severity::kError,
      fmt::format("{} although {} HCA port(s) are active ({}): libibverbs cannot open the HCAs, so NCCL silently uses "
                  "TCP sockets (\"NET/IB : No device found\")",
                  what, f.active_ports.size(), f.active_ports.front()),
      f.in_container ? "pass the devices into the container: docker/podman run --device=/dev/infiniband (plus --ulimit "
                       "memlock=-1); Kubernetes: request them through the RDMA device plugin (e.g. resources "
                       "rdma/hca_shared_devices_a: 1, or the NVIDIA Network Operator's rdma/rdma_shared_device_a)"
                     : "load the verbs module (`sudo modprobe ib_uverbs`) and check the device permissions (the rdma "
                       "group, or `/etc/udev/rules.d/` for uverbs*)");
}

void memlock_too_small(const Facts& f, Out& out) {
  constexpr std::int64_t kMemlockFloor = 1LL << 30;  // NCCL pins host buffers per channel and peer: MiBs each
  const auto& fab = f.r.fabric;
  if (!f.rdma_matters || fab.memlock_soft < 0 || fab.memlock_soft >= kMemlockFloor) return;
  out.add(Severity::kError,
          fmt::format("RLIMIT_MEMLOCK is {} (hard {}): RDMA must pin its buffers, so NCCL's IB transport fails to "
                      "register memory (\"ibv_reg_mr failed: Cannot allocate memory\") or falls back to sockets",
                      human_limit(fab.memlock_soft), human_limit(fab.memlock_hard)),
          f.in_container
              ? "start the container with --ulimit memlock=-1 (Kubernetes: set the container runtime's default "
                "memlock limit, e.g. LimitMEMLOCK=infinity for containerd)"
              : "raise it: `* - memlock unlimited` in /etc/security/limits.conf (and LimitMEMLOCK=infinity for "
                "systemd units such as slurmd), then log in again");
}

void gdr_unavailable(const Facts& f, Out& out) {
  const auto& fab = f.r.fabric;
  if (!f.rdma_matters || f.gdr || fab.peermem_loaded != 0) return;
  std::string why = fab.dmabuf == 1
                        ? "dma-buf is possible but NCCL_DMABUF_ENABLE=0 turns it off"
                        : "dma-buf is not possible: " + (fab.dmabuf_why.empty() ? "unknown" : fab.dmabuf_why);
  out.add(
      Severity::kWarning,
      fmt::format("GPUDirect RDMA is unavailable: nvidia_peermem is not loaded and {}. NCCL copies through host memory "
                  "(\"GPU Direct RDMA Disabled for HCA\"): more latency, less bandwidth, CPU memory traffic",
                  why),
      fab.dmabuf == 1
          ? "unset NCCL_DMABUF_ENABLE (dma-buf is NCCL's default when the system supports it)"
          : "load the peer-memory module: `sudo modprobe nvidia_peermem` (it ships with the driver; the GPU "
            "Operator sets driver.rdma.enabled=true), or move to the open GPU kernel module on Linux >= 5.12 "
            "for dma-buf");
}

// ============================== NCCL's variables against this machine ==============================
void nccl_ib_disabled(const Facts& f, Out& out) {
  const auto v = env_value(f.r, "NCCL_IB_DISABLE");
  if (!v || trim(*v) == "0" || trim(*v).empty() || !f.gpu_present || f.active_ports.empty()) return;
  out.add(Severity::kError,
          fmt::format("NCCL_IB_DISABLE={} while {} RDMA port(s) are active ({}): NCCL uses TCP sockets between "
                      "nodes, several times slower",
                      *v, f.active_ports.size(), f.active_ports.front()),
          "unset NCCL_IB_DISABLE (look for it in job scripts, /etc/nccl.conf and ~/.nccl.conf)");
}

void nccl_names_not_here(const Facts& f, Out& out) {
  struct ListVar {
    const char* name;
    const HcaPorts* available;
    const char* what;
  };
  HcaPorts netdevs;
  for (const auto& n : f.r.fabric.netdevs) netdevs.emplace_back(n, std::vector<int>{});
  for (const ListVar& lv :
       {ListVar{"NCCL_SOCKET_IFNAME", &netdevs, "network interface"}, ListVar{"NCCL_IB_HCA", &f.hca_ports, "HCA"}}) {
    auto v = env_value(f.r, lv.name);
    if (!v || lv.available->empty()) continue;  // nothing probed to compare with
    const NcclNameList list = parse_nccl_name_list(*v);
    const auto missing = nccl_names_missing(list, *lv.available);
    if (missing.empty()) continue;
    const auto selected = nccl_names_selected(list, *lv.available);
    std::vector<std::string> have;
    for (const auto& a : *lv.available) have.push_back(a.first);
    const bool none = !list.exclude && selected.empty();
    out.add(none ? Severity::kError : Severity::kWarning,
            fmt::format("{}=\"{}\" names {} that {} not here ({}{}); this machine has: {}{}", lv.name, *v,
                        fmt::join(missing, ", "), missing.size() == 1 ? "is" : "are",
                        list.exclude ? "excluded" : "selected", list.exact ? ", exact names" : ", as prefixes",
                        fmt::join(have, " "),
                        none ? std::string(lv.name) == "NCCL_IB_HCA" ? ": no HCA is left, NCCL falls back to sockets"
                                                                     : ": no interface is left, NCCL cannot bootstrap"
                             : fmt::format(": NCCL uses {}", fmt::join(selected, " "))),
            fmt::format("name {}s that exist (NCCL syntax: a prefix \"mlx5\", exact \"=mlx5_0\", excluded \"^mlx5_1\", "
                        "ports \"mlx5_0:1\"), or unset {}",
                        lv.what, lv.name));
  }
}

void nccl_gdr_level_conflict(const Facts& f, Out& out) {
  const auto v = env_value(f.r, "NCCL_NET_GDR_LEVEL");
  if (!v || !f.rdma_matters) return;
  const int level = gdr_level_rank(*v);
  int nearest = -1;  // the closest GPU↔HCA distance on this machine
  for (const auto& row : f.r.fabric.gpu_nic)
    for (const auto& d : row) {
      const int dr = distance_rank(d);
      if (dr >= 0 && (nearest < 0 || dr < nearest)) nearest = dr;
    }
  if (level < 0) {
    out.add(Severity::kWarning, fmt::format("NCCL_NET_GDR_LEVEL=\"{}\" is not a level NCCL knows", *v),
            "use LOC, PIX, PXB, PHB or SYS (nvidia-smi topo -m shows the GPU-NIC distances), or unset it");
  } else if (level == 0 && f.gdr) {
    out.add(Severity::kWarning,
            fmt::format("NCCL_NET_GDR_LEVEL={} turns GPUDirect RDMA off, though this machine supports it", *v),
            "unset NCCL_NET_GDR_LEVEL: NCCL picks GPUDirect RDMA by the GPU-NIC distance itself");
  } else if (!f.gdr) {
    out.add(
        Severity::kWarning,
        fmt::format("NCCL_NET_GDR_LEVEL={} asks for GPUDirect RDMA, which this machine cannot do (see gdr-unavailable)",
                    *v),
        "make GPUDirect RDMA available (nvidia_peermem or dma-buf), or unset NCCL_NET_GDR_LEVEL");
  } else if (nearest > level) {
    out.add(Severity::kWarning,
            fmt::format("NCCL_NET_GDR_LEVEL={} allows GPUDirect RDMA only up to that distance, but every GPU is "
                        "further from its nearest HCA: GPUDirect RDMA is never used",
                        *v),
            "unset NCCL_NET_GDR_LEVEL, or set it to the distance `trainbox doctor` shows in the GPU-HCA table");
  }
}

void fabric_probe_incomplete(const Facts& f, Out& out) {
  const auto& notes = f.r.fabric.notes;
  if (notes.empty()) return;
  out.add(Severity::kInfo, fmt::format("the fabric could not be read completely: {}", fmt::join(notes, "; ")),
          "run the doctor where /sys/class/infiniband is readable (in a container: mount /sys read-only, the "
          "default); a device that vanished mid-probe shows here once");
}

// ============================== the table ==============================
// One rule per finding id, in the order diagnose() reports them within a severity (nccl-tests
// keeps one entry per collective the same way). A rule looks at the whole report (machine) or
// at one GPU (per_gpu); adjacent per-GPU rules run as a block, GPU by GPU, so one GPU's health
// findings stand together. fabric: the rule is about the network fabric (env/fabric.h), and
// `trainbox preflight` copies its findings into each node's facts (is_fabric_finding).
struct Rule {
  std::string_view id;  // stable, kebab-case; docs/troubleshooting.md has a section "## <id>"
  void (*machine)(const Facts&, Out&) = nullptr;
  void (*per_gpu)(const Facts&, const GpuInfo&, Out&) = nullptr;
  bool fabric = false;
};

constexpr Rule kRules[] = {
    // the driver
    {.id = "no-driver", .machine = no_driver},
    {.id = "libcuda-missing", .machine = libcuda_missing},
    {.id = "libcuda-stub-loaded", .machine = libcuda_stub_loaded},
    {.id = "driver-library-mismatch", .machine = driver_library_mismatch},
    {.id = "nvml-unavailable", .machine = nvml_unavailable},
    {.id = "cuda-init-failed", .machine = cuda_init_failed},
    {.id = "uvm-missing", .machine = uvm_missing},
    // the driver against torch's build
    {.id = "driver-too-old-for-runtime", .machine = driver_too_old_for_runtime},
    {.id = "compat-package-on-unsupported-gpu", .machine = compat_package_on_unsupported_gpu},
    {.id = "gpu-arch-not-in-build", .machine = gpu_arch_not_in_build},
    // the process's environment
    {.id = "cvd-empty", .machine = cvd_empty},
    {.id = "cvd-invalid", .machine = cvd_invalid},
    {.id = "shm-too-small", .machine = shm_too_small},
    // libraries torch loads, and torch itself
    {.id = "cudnn-missing", .machine = cudnn_missing},
    {.id = "cudnn-version-mismatch", .machine = cudnn_version_mismatch},
    {.id = "nccl-missing", .machine = nccl_missing},
    {.id = "torch-not-found", .machine = torch_not_found},
    {.id = "torch-cpu-only", .machine = torch_cpu_only},
    // each GPU's health
    {.id = "mig-enabled", .per_gpu = mig_enabled},
    {.id = "ecc-errors", .per_gpu = ecc_errors},
    {.id = "retired-pages-pending", .per_gpu = retired_pages_pending},
    {.id = "row-remap-failed", .per_gpu = row_remap_failed},
    {.id = "persistence-off", .per_gpu = persistence_off},
    // what trainbox will do, and the environment's variables
    {.id = "no-gpu-cpu-fallback", .machine = no_gpu_cpu_fallback},
    {.id = "suspicious-env", .machine = suspicious_env},
    // the fabric
    {.id = "rdma-port-down", .machine = rdma_port_down, .fabric = true},
    {.id = "rdma-devices-missing", .machine = rdma_devices_missing, .fabric = true},
    {.id = "memlock-too-small", .machine = memlock_too_small, .fabric = true},
    {.id = "gdr-unavailable", .machine = gdr_unavailable, .fabric = true},
    {.id = "nccl-ib-disabled", .machine = nccl_ib_disabled, .fabric = true},
    {.id = "nccl-names-missing", .machine = nccl_names_not_here, .fabric = true},
    {.id = "nccl-gdr-level-conflict", .machine = nccl_gdr_level_conflict, .fabric = true},
    {.id = "fabric-probe-incomplete", .machine = fabric_probe_incomplete, .fabric = true},
};

}  // namespace

const std::vector<std::string>& finding_ids() {
  static const std::vector<std::string> kIds = [] {
    std::vector<std::string> ids;
    for (const Rule& rule : kRules) ids.emplace_back(rule.id);
    return ids;
  }();
  return kIds;
}

bool is_fabric_finding(std::string_view id) {
  return std::any_of(std::begin(kRules), std::end(kRules),
                     [&](const Rule& rule) { return rule.fabric && rule.id == id; });
}

std::vector<Finding> diagnose(const EnvReport& r) {
  const Facts facts = facts_of(r);
  std::vector<Finding> out;
  const Rule* const end = std::end(kRules);
  for (const Rule* rule = std::begin(kRules); rule != end;) {
    if (rule->machine) {
      Out to(rule->id, out);
      rule->machine(facts, to);
      ++rule;
      continue;
    }
    const Rule* block_end = std::find_if(rule, end, [](const Rule& x) { return x.per_gpu == nullptr; });
    for (const auto& g : r.gpus)
      for (const Rule* gpu_rule = rule; gpu_rule != block_end; ++gpu_rule) {
        Out to(gpu_rule->id, out);
        gpu_rule->per_gpu(facts, g, to);
      }
    rule = block_end;
  }
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) { return a.severity < b.severity; });
  return out;
}

int exit_code(const std::vector<Finding>& findings, bool strict) {
  for (const auto& f : findings)
    if (f.severity == Severity::kError || (strict && f.severity == Severity::kWarning)) return 1;
  return 0;
}

}  // namespace trainbox::env
