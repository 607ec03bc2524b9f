#include <trainbox/env/diagnose.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include <trainbox/env/fabric.h>
#include <trainbox/util/strings.h>

namespace trainbox::env {

std::string_view severity_name(Severity s) {
  switch (s) {
    case Severity::kError:
      return "error";
    case Severity::kWarning:
      return "warning";
    case Severity::kInfo:
      return "info";
  }
  return "?";
}

const std::vector<std::string>& finding_ids() {
  static const std::vector<std::string> kIds = {
      "no-driver", "libcuda-missing", "libcuda-stub-loaded", "driver-library-mismatch", "driver-too-old-for-runtime",
      "compat-package-on-unsupported-gpu", "gpu-arch-not-in-build", "cvd-empty", "cvd-invalid", "uvm-missing",
      "shm-too-small", "cudnn-missing", "cudnn-version-mismatch", "nccl-missing", "mig-enabled", "no-gpu-cpu-fallback",
      "persistence-off", "ecc-errors", "retired-pages-pending", "row-remap-failed", "nvml-unavailable",
      "cuda-init-failed", "torch-not-found", "torch-cpu-only", "suspicious-env",
      // the fabric (env/fabric.h)
      "rdma-port-down", "rdma-devices-missing", "memlock-too-small", "gdr-unavailable", "nccl-ib-disabled",
      "nccl-names-missing", "nccl-gdr-level-conflict", "fabric-probe-incomplete"};
  return kIds;
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
    case 11:
      return "450.80.02";
    case 12:
      return "525.60.13";
    case 13:
      return "580";
    default:
      return {};
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
  e.num = std::stoi(m[2]);
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

// --- the fabric: HCAs, device nodes, memlock, GPUDirect RDMA, NCCL's variables against them ---
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

void diagnose_fabric(const EnvReport& r, bool gpu_present, std::vector<Finding>& out) {
  auto add = [&](Severity s, std::string id, std::string message, std::string fix) {
    out.push_back(Finding{s, std::move(id), std::move(message), std::move(fix), -1});
  };
  const auto& f = r.fabric;
  const bool in_container = !r.host.container.empty();
  std::vector<std::string> active, down;
  std::vector<std::pair<std::string, std::vector<int>>> hca_ports;
  for (const auto& h : f.hcas) {
    std::vector<int> ports;
    for (const auto& p : h.ports) {
      ports.push_back(p.port);
      (p.state == "ACTIVE" ? active : down)
          .push_back(p.state == "ACTIVE" ? port_label(h, p)
                                         : fmt::format("{} is {}{}", port_label(h, p), p.state,
                                                       p.phys_state.empty() ? "" : " (physical " + p.phys_state + ")"));
    }
    hca_ports.emplace_back(h.name, ports);
  }
  const bool rdma_matters = gpu_present && !active.empty();  // NCCL would use these HCAs

  // --- ports ---
  if (!down.empty()) {
    const bool none = active.empty();
    add(none && gpu_present ? Severity::kError : Severity::kWarning, "rdma-port-down",
        fmt::format("{}; {} of {} RDMA port(s) active{}", fmt::join(down, "; "), active.size(),
                    active.size() + down.size(),
                    none ? ": NCCL finds no usable HCA and falls back to TCP sockets"
                         : ": NCCL leaves the down ports out, and "
                           "the node has that much less bandwidth"),
        "check the cable and the switch port (`ibstat`, `ibstatus`; for RoCE `ip link` on the netdev), and that the "
        "subnet "
        "manager runs (`sminfo`); `mlxlink -d <hca>` shows the physical link");
  }

  // --- device nodes ---
  if (rdma_matters && (f.uverbs.empty() || !f.uverbs_unopenable.empty())) {
    std::string what = !f.dev_infiniband  ? std::string("/dev/infiniband does not exist")
                       : f.uverbs.empty() ? std::string("/dev/infiniband has no uverbs* device")
                                          : fmt::format("/dev/infiniband/{} cannot be opened",
                                                        fmt::join(f.uverbs_unopenable, ", /dev/infiniband/"));
    add(Severity::kError, "rdma-devices-missing",
        fmt::format(
            "{} although {} HCA port(s) are active ({}): libibverbs cannot open the HCAs, so NCCL silently uses "
            "TCP sockets (\"NET/IB : No device found\")",
            what, active.size(), active.front()),
        in_container ? "pass the devices into the container: docker/podman run --device=/dev/infiniband (plus --ulimit "
                       "memlock=-1); Kubernetes: request them through the RDMA device plugin (e.g. resources "
                       "rdma/hca_shared_devices_a: 1, or the NVIDIA Network Operator's rdma/rdma_shared_device_a)"
                     : "load the verbs module (`sudo modprobe ib_uverbs`) and check the device permissions (the rdma "
                       "group, or `/etc/udev/rules.d/` for uverbs*)");
  }

  // --- memlock ---
  constexpr std::int64_t kMemlockFloor = 1LL << 30;  // NCCL pins host buffers per channel and peer: MiBs each
  if (rdma_matters && f.memlock_soft >= 0 && f.memlock_soft < kMemlockFloor) {
    add(Severity::kError, "memlock-too-small",
        fmt::format("RLIMIT_MEMLOCK is {} (hard {}): RDMA must pin its buffers, so NCCL's IB transport fails to "
                    "register memory (\"ibv_reg_mr failed: Cannot allocate memory\") or falls back to sockets",
                    human_limit(f.memlock_soft), human_limit(f.memlock_hard)),
        in_container ? "start the container with --ulimit memlock=-1 (Kubernetes: set the container runtime's default "
                       "memlock limit, e.g. LimitMEMLOCK=infinity for containerd)"
                     : "raise it: `* - memlock unlimited` in /etc/security/limits.conf (and LimitMEMLOCK=infinity for "
                       "systemd units such as slurmd), then log in again");
  }

  // --- GPUDirect RDMA ---
  const auto dmabuf_env = env_value(r, "NCCL_DMABUF_ENABLE");
  const bool dmabuf_off = dmabuf_env && trim(*dmabuf_env) == "0";
  const bool gdr = f.peermem_loaded == 1 || (f.dmabuf == 1 && !dmabuf_off);
  if (rdma_matters && !gdr && f.peermem_loaded == 0) {
    std::string why = f.dmabuf == 1 ? "dma-buf is possible but NCCL_DMABUF_ENABLE=0 turns it off"
                                    : "dma-buf is not possible: " + (f.dmabuf_why.empty() ? "unknown" : f.dmabuf_why);
    add(Severity::kWarning, "gdr-unavailable",
        fmt::format(
            "GPUDirect RDMA is unavailable: nvidia_peermem is not loaded and {}. NCCL copies through host memory "
            "(\"GPU Direct RDMA Disabled for HCA\"): more latency, less bandwidth, CPU memory traffic",
            why),
        f.dmabuf == 1
            ? "unset NCCL_DMABUF_ENABLE (dma-buf is NCCL's default when the system supports it)"
            : "load the peer-memory module: `sudo modprobe nvidia_peermem` (it ships with the driver; the GPU "
              "Operator sets driver.rdma.enabled=true), or move to the open GPU kernel module on Linux >= 5.12 "
              "for dma-buf");
  }

  // --- NCCL variables against this machine ---
  if (auto v = env_value(r, "NCCL_IB_DISABLE");
      v && trim(*v) != "0" && !trim(*v).empty() && gpu_present && !active.empty()) {
    add(Severity::kError, "nccl-ib-disabled",
        fmt::format("NCCL_IB_DISABLE={} while {} RDMA port(s) are active ({}): NCCL uses TCP sockets between nodes, "
                    "several times slower",
                    *v, active.size(), active.front()),
        "unset NCCL_IB_DISABLE (look for it in job scripts, /etc/nccl.conf and ~/.nccl.conf)");
  }
  struct ListVar {
    const char* name;
    const std::vector<std::pair<std::string, std::vector<int>>>* available;
    const char* what;
  };
  std::vector<std::pair<std::string, std::vector<int>>> netdevs;
  for (const auto& n : f.netdevs) netdevs.emplace_back(n, std::vector<int>{});
  for (const ListVar& lv :
       {ListVar{"NCCL_SOCKET_IFNAME", &netdevs, "network interface"}, ListVar{"NCCL_IB_HCA", &hca_ports, "HCA"}}) {
    auto v = env_value(r, lv.name);
    if (!v || lv.available->empty()) continue;  // nothing probed to compare with
    const NcclNameList list = parse_nccl_name_list(*v);
    const auto missing = nccl_names_missing(list, *lv.available);
    if (missing.empty()) continue;
    const auto selected = nccl_names_selected(list, *lv.available);
    std::vector<std::string> have;
    for (const auto& a : *lv.available) have.push_back(a.first);
    const bool none = !list.exclude && selected.empty();
    add(none ? Severity::kError : Severity::kWarning, "nccl-names-missing",
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
  if (auto v = env_value(r, "NCCL_NET_GDR_LEVEL"); v && rdma_matters) {
    const int level = gdr_level_rank(*v);
    int nearest = -1;  // the closest GPU↔HCA distance on this machine
    for (const auto& row : f.gpu_nic)
      for (const auto& d : row) {
        const int dr = distance_rank(d);
        if (dr >= 0 && (nearest < 0 || dr < nearest)) nearest = dr;
      }
    if (level < 0) {
      add(Severity::kWarning, "nccl-gdr-level-conflict",
          fmt::format("NCCL_NET_GDR_LEVEL=\"{}\" is not a level NCCL knows", *v),
          "use LOC, PIX, PXB, PHB or SYS (nvidia-smi topo -m shows the GPU-NIC distances), or unset it");
    } else if (level == 0 && gdr) {
      add(Severity::kWarning, "nccl-gdr-level-conflict",
          fmt::format("NCCL_NET_GDR_LEVEL={} turns GPUDirect RDMA off, though this machine supports it", *v),
          "unset NCCL_NET_GDR_LEVEL: NCCL picks GPUDirect RDMA by the GPU-NIC distance itself");
    } else if (!gdr) {
      add(Severity::kWarning, "nccl-gdr-level-conflict",
          fmt::format(
              "NCCL_NET_GDR_LEVEL={} asks for GPUDirect RDMA, which this machine cannot do (see gdr-unavailable)", *v),
          "make GPUDirect RDMA available (nvidia_peermem or dma-buf), or unset NCCL_NET_GDR_LEVEL");
    } else if (nearest > level) {
      add(Severity::kWarning, "nccl-gdr-level-conflict",
          fmt::format("NCCL_NET_GDR_LEVEL={} allows GPUDirect RDMA only up to that distance, but every GPU is further "
                      "from its nearest HCA: GPUDirect RDMA is never used",
                      *v),
          "unset NCCL_NET_GDR_LEVEL, or set it to the distance `trainbox doctor` shows in the GPU-HCA table");
    }
  }

  if (!f.notes.empty()) {
    add(Severity::kInfo, "fabric-probe-incomplete",
        fmt::format("the fabric could not be read completely: {}", fmt::join(f.notes, "; ")),
        "run the doctor where /sys/class/infiniband is readable (in a container: mount /sys read-only, the default); a "
        "device that vanished mid-probe shows here once");
  }
}

}  // namespace

std::vector<Finding> diagnose(const EnvReport& r) {
  std::vector<Finding> out;
  auto add = [&](Severity s, std::string id, std::string message, std::string fix, int gpu = -1) {
    out.push_back(Finding{s, std::move(id), std::move(message), std::move(fix), gpu});
  };
  const auto& d = r.driver;
  const LibraryInfo* libcuda = r.library("libcuda");
  const bool in_container = !r.host.container.empty();
  const bool driver_loaded = !d.kernel_module_version.empty() || has_node(r, "/dev/nvidiactl") ||
                             has_node(r, "/dev/dxg") || has_node(r, "/dev/nvgpu");
  const bool gpu_on_bus = !r.host.nvidia_pci_devices.empty() || !r.gpus.empty();
  const bool libcuda_loaded = libcuda && libcuda->loadable;
  const std::string driver_version = !d.driver_version.empty() ? d.driver_version : d.kernel_module_version;
  const bool torch_cuda = r.torch.found && !r.torch.cuda_version.empty();
  const std::string need_driver = min_driver_for_cuda(r.torch.cuda_version);
  const std::string need_text = need_driver.empty() ? std::string("a current driver")
                                                    : fmt::format("driver >= {} (CUDA {}, as torch {} needs)",
                                                                  need_driver, r.torch.cuda_version, r.torch.version);

  // --- driver presence ---
  if (!driver_loaded && gpu_on_bus) {
    std::string where = r.host.nvidia_pci_devices.empty() ? std::string("present")
                                                          : "on the PCI bus at " + r.host.nvidia_pci_devices.front();
    add(Severity::kError, "no-driver",
        fmt::format(
            "an NVIDIA GPU is {} but no NVIDIA driver is loaded (no /proc/driver/nvidia/version, no /dev/nvidiactl)",
            where),
        in_container ? "start the container with --gpus all (NVIDIA Container Toolkit installed on the host)"
                     : "install the NVIDIA driver (" + need_text + "), then reboot or `modprobe nvidia`");
  }
  if (driver_loaded && !libcuda_loaded) {
    add(Severity::kError, "libcuda-missing",
        "the NVIDIA kernel driver is loaded but libcuda.so.1 cannot be loaded: " +
            (libcuda ? libcuda->error : std::string("not probed")),
        in_container ? "start the container with --gpus all so the driver's user-space libraries are mounted"
                     : "install the driver's user-space part (e.g. libnvidia-compute-" +
                           (driver_version.empty() ? std::string("<version>") : split(driver_version, '.')[0]) +
                           ") matching kernel module " + d.kernel_module_version);
  }
  if (libcuda_loaded && libcuda->stub) {
    add(Severity::kError, "libcuda-stub-loaded",
        "libcuda.so.1 resolves to a link-time stub: " + libcuda->path +
            " (CUDA calls fail with CUDA_ERROR_STUB_LIBRARY)",
        "remove the stubs directory from LD_LIBRARY_PATH / ld.so.conf; stubs are for linking only");
  } else {
    for (const auto& p : r.env.ld_library_path)
      if (p.find("/stubs") != std::string::npos) {
        add(Severity::kWarning, "libcuda-stub-loaded",
            "LD_LIBRARY_PATH contains a stubs directory (" + p + "): a stub libcuda can shadow the driver's",
            "remove " + p + " from LD_LIBRARY_PATH; link against stubs at build time only");
        break;
      }
  }

  // --- driver vs user-space library versions ---
  bool mismatch = false;
  if (!d.kernel_module_version.empty()) {
    std::string lib_version, lib_name;
    if (!d.nvml_library_version.empty() && d.nvml_library_version != d.kernel_module_version) {
      lib_version = d.nvml_library_version;
      lib_name = "NVML library";
    } else if (!d.forward_compat && !d.libcuda_version.empty() && d.libcuda_version != d.kernel_module_version) {
      lib_version = d.libcuda_version;
      lib_name = "libcuda";
    }
    if (!lib_version.empty() || d.nvml_error.find("mismatch") != std::string::npos) {
      mismatch = true;
      add(Severity::kError, "driver-library-mismatch",
          fmt::format("kernel module {} but {} {} (\"Failed to initialize NVML: Driver/library version mismatch\")",
                      d.kernel_module_version, lib_name.empty() ? "user-space driver" : lib_name,
                      lib_version.empty() ? "differs" : lib_version),
          "reboot (or unload and reload the nvidia kernel modules) so the kernel module matches the installed "
          "libraries");
    }
  }
  if (driver_loaded && !d.nvml_error.empty() && !mismatch) {
    add(Severity::kWarning, "nvml-unavailable", "NVML cannot be used: " + d.nvml_error,
        "check that libnvidia-ml.so.1 from the driver is installed (in containers: --gpus all); GPU health facts and "
        "`trainbox smi` need it");
  }
  if (libcuda_loaded && !libcuda->stub && !d.cuda_init_error.empty() && !mismatch) {
    bool no_device = d.cuda_init_error.find("NO_DEVICE") != std::string::npos;
    if (!(no_device && r.env.cuda_visible_devices_set)) {
      add(Severity::kError, "cuda-init-failed", d.cuda_init_error,
          has_node(r, "/dev/nvidia-uvm") || !driver_loaded
              ? "reload the driver's modules (`sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`), check `dmesg` for "
                "NVRM errors, or reboot"
              : "load nvidia-uvm: `sudo modprobe nvidia_uvm` (or `nvidia-modprobe -u -c=0`)");
    }
  }

  // --- device nodes ---
  if (driver_loaded && gpu_on_bus && !has_node(r, "/dev/nvidia-uvm") && !has_node(r, "/dev/dxg") &&
      !has_node(r, "/dev/nvgpu")) {
    add(Severity::kError, "uvm-missing",
        "/dev/nvidia-uvm is missing: CUDA fails with \"CUDA unknown error - this may be due to an incorrectly set up "
        "environment\"",
        in_container ? "start the container with --gpus all (the toolkit mounts /dev/nvidia-uvm)"
                     : "`sudo modprobe nvidia_uvm` or `sudo nvidia-modprobe -u -c=0`");
  }

  // --- driver vs the CUDA torch was built with ---
  if (torch_cuda && d.cuda_driver_version > 0) {
    const int need = cuda_text_to_int(r.torch.cuda_version);
    if (need > 0 && d.cuda_driver_version < need) {
      const int torch_major = need / 1000;
      const std::string floor = minor_compat_floor(torch_major);
      const bool minor_compat = d.cuda_driver_version / 1000 == torch_major && !floor.empty() &&
                                !driver_version.empty() && compare_versions(driver_version, floor) >= 0;
      bool sass_everywhere = true;
      for (const auto& g : r.gpus) {
        std::vector<std::string> sass;
        for (const auto& a : r.torch.arch_list)
          if (starts_with(a, "sm_")) sass.push_back(a);
        if (g.cc_major >= 0 && !arch_list_supports(sass, g.cc_major, g.cc_minor)) sass_everywhere = false;
      }
      std::string have =
          fmt::format("driver {} supports CUDA up to {}.{}", driver_version.empty() ? "?" : driver_version,
                      d.cuda_driver_version / 1000, (d.cuda_driver_version % 1000) / 10);
      if (minor_compat && sass_everywhere) {
        add(Severity::kWarning, "driver-too-old-for-runtime",
            fmt::format("{}; torch {} is built for CUDA {}: runs through minor-version compatibility (driver >= {}), "
                        "but PTX JIT and APIs newer than the driver fail (cudaErrorUnsupportedPtxVersion, "
                        "cudaErrorCallRequiresNewerDriver)",
                        have, r.torch.version, r.torch.cuda_version, floor),
            "upgrade to " + need_text + ", or use a torch build for CUDA " +
                fmt::format("{}.{}", d.cuda_driver_version / 1000, (d.cuda_driver_version % 1000) / 10));
      } else {
        std::string why = minor_compat ? " and the GPU needs PTX JIT, which minor-version compatibility cannot do" : "";
        add(Severity::kError, "driver-too-old-for-runtime",
            fmt::format("{}; torch {} needs CUDA {}{} (\"The NVIDIA driver on your system is too old\")", have,
                        r.torch.version, r.torch.cuda_version, why),
            "upgrade to " + need_text +
                (r.gpus.empty() || std::all_of(r.gpus.begin(), r.gpus.end(), is_datacenter_gpu)
                     ? ", use the cuda-compat package (forward compatibility, data center GPUs only),"
                     : ",") +
                " or install a torch build for the driver's CUDA version");
      }
    }
  }
  if (d.forward_compat) {
    for (const auto& g : r.gpus)
      if (!is_datacenter_gpu(g))
        add(Severity::kError, "compat-package-on-unsupported-gpu",
            fmt::format("forward-compatibility libcuda {} (on kernel module {}) is in use, but {} is not a data center "
                        "GPU (error 804 \"forward compatibility was attempted on non supported HW\")",
                        d.libcuda_version, d.kernel_module_version, gpu_label(g)),
            "remove the cuda-compat libraries from the library path and upgrade the driver instead", g.index);
  }

  // --- GPU architecture vs the compiled arch list ---
  if (torch_cuda && !r.torch.arch_list.empty()) {
    for (const auto& g : r.gpus) {
      if (g.cc_major < 0 || arch_list_supports(r.torch.arch_list, g.cc_major, g.cc_minor)) continue;
      add(Severity::kError, "gpu-arch-not-in-build",
          fmt::format("{} has compute capability {}.{} (sm_{}{}), but torch {} carries no SASS or PTX that runs on it "
                      "(built for {}): \"no kernel image is available for execution on the device\"",
                      gpu_label(g), g.cc_major, g.cc_minor, g.cc_major, g.cc_minor, r.torch.version,
                      fmt::join(r.torch.arch_list, " ")),
          fmt::format("install a torch build that includes sm_{}{} (an older CUDA wheel, e.g. cu126 still ships "
                      "sm_50/sm_60), or build LibTorch with TORCH_CUDA_ARCH_LIST=\"{}.{}\"",
                      g.cc_major, g.cc_minor, g.cc_major, g.cc_minor),
          g.index);
    }
  }

  // --- CUDA_VISIBLE_DEVICES ---
  if (r.env.cuda_visible_devices_set) {
    const std::string cvd = trim(r.env.cuda_visible_devices);
    if (cvd.empty()) {
      add(r.gpus.empty() ? Severity::kWarning : Severity::kError, "cvd-empty",
          fmt::format("CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU{} (\"No CUDA GPUs are available\")",
                      r.gpus.empty()
                          ? ""
                          : fmt::format(" although {} {} present", r.gpus.size(), r.gpus.size() == 1 ? "is" : "are")),
          "unset CUDA_VISIBLE_DEVICES, or list the GPUs to use (e.g. CUDA_VISIBLE_DEVICES=0,1)");
    } else {
      for (const auto& raw : split(cvd, ',')) {
        std::string tok = trim(raw);
        bool valid = false;
        if (!tok.empty() &&
            std::all_of(tok.begin(), tok.end(), [](char c) { return std::isdigit((unsigned char)c); })) {
          long idx = std::stol(tok);
          valid = r.gpus.empty() ? true : idx < static_cast<long>(r.gpus.size());
        } else if (starts_with(tok, "GPU-") || starts_with(tok, "MIG-")) {
          valid = r.gpus.empty() || starts_with(tok, "MIG-") ||
                  std::any_of(r.gpus.begin(), r.gpus.end(), [&](const GpuInfo& g) { return starts_with(g.uuid, tok); });
        }
        if (!valid) {
          add(Severity::kError, "cvd-invalid",
              fmt::format(
                  "CUDA_VISIBLE_DEVICES=\"{}\" names \"{}\", which is not a GPU here ({} GPU{}: indices 0..{}); "
                  "CUDA ignores it and every entry after it",
                  r.env.cuda_visible_devices, tok, r.gpus.size(), r.gpus.size() == 1 ? "" : "s",
                  r.gpus.empty() ? 0 : r.gpus.size() - 1),
              "use indices or UUIDs that `trainbox smi` lists, or unset CUDA_VISIBLE_DEVICES");
          break;
        }
      }
    }
  }

  // --- shared memory ---
  constexpr std::int64_t kGiB = 1LL << 30, kDockerDefault = 64LL << 20;
  if (r.host.shm_bytes >= 0 && r.host.shm_bytes < kGiB) {
    std::string what = r.host.shm_bytes == kDockerDefault
                           ? "/dev/shm is 64 MiB, the container default: NCCL fails with \"failed to extend "
                             "/dev/shm\" / \"unhandled system error\" and data loader workers run out of shared memory"
                           : "/dev/shm is " + human_bytes(static_cast<std::uint64_t>(r.host.shm_bytes)) +
                                 " (< 1 GiB): NCCL and multi-process data loading need more";
    add(Severity::kWarning, "shm-too-small", what,
        "docker run --ipc=host (or --shm-size=16g); Kubernetes: mount an emptyDir with medium: Memory at /dev/shm");
  } else if (r.host.shm_bytes < 0) {
    add(Severity::kWarning, "shm-too-small", "/dev/shm is missing: NCCL's shared-memory transport cannot work",
        "mount a tmpfs at /dev/shm (docker: --ipc=host or --shm-size=16g)");
  }

  // --- cuDNN / NCCL, when torch would use the GPU ---
  const bool gpu_present = !r.gpus.empty() || d.cuda_device_count > 0;
  if (torch_cuda && gpu_present) {
    const LibraryInfo* cudnn = r.library("cudnn");
    if (cudnn && !cudnn->loadable) {
      add(Severity::kError, "cudnn-missing",
          "torch is built with cuDNN " + r.torch.cudnn_version + " but libcudnn cannot be loaded: " + cudnn->error,
          "reinstall the torch wheel with its dependencies (pip install --force-reinstall torch==" + r.torch.version +
              ") or put cuDNN " + r.torch.cudnn_version + " on the library path");
    } else if (cudnn && !cudnn->version.empty() && !r.torch.cudnn_version.empty()) {
      auto have = parse_version(cudnn->version), want = parse_version(r.torch.cudnn_version);
      if (!have.empty() && !want.empty() && have[0] != want[0]) {
        add(Severity::kError, "cudnn-version-mismatch",
            fmt::format("cuDNN {} is loaded ({}) but torch was built with cuDNN {}: a different major version",
                        cudnn->version, cudnn->path, r.torch.cudnn_version),
            "remove the other cuDNN from LD_LIBRARY_PATH so torch loads its own (" + r.torch.cudnn_version + ")");
      } else if (compare_versions(cudnn->version, r.torch.cudnn_version) < 0) {
        add(Severity::kWarning, "cudnn-version-mismatch",
            fmt::format("cuDNN {} is loaded ({}) but torch was built with cuDNN {}: older than the build",
                        cudnn->version, cudnn->path, r.torch.cudnn_version),
            "put cuDNN >= " + r.torch.cudnn_version + " first on the library path (the wheel's nvidia-cudnn package)");
      }
    }
    const LibraryInfo* nccl = r.library("nccl");
    if (nccl && !nccl->loadable) {
      add(Severity::kError, "nccl-missing", "libnccl.so.2 cannot be loaded: " + nccl->error,
          "reinstall the torch wheel with its dependencies (it brings nvidia-nccl " + r.torch.nccl_version +
              ") or install libnccl2");
    }
  }

  // --- torch itself ---
  if (!r.torch.found) {
    add(Severity::kWarning, "torch-not-found",
        "no LibTorch found" + (r.torch.error.empty() ? "" : ": " + r.torch.error),
        "run scripts/bootstrap (installs the pinned torch wheel) or set TRAINBOX_TORCH_DIR to a torch/LibTorch "
        "directory");
  } else if (!torch_cuda && gpu_present) {
    add(Severity::kWarning, "torch-cpu-only",
        "torch " + r.torch.version + " is a CPU-only build but GPUs are present: training will not use them",
        "install the CUDA build of torch (the default Linux wheel from PyPI)");
  }

  // --- per-GPU health ---
  for (const auto& g : r.gpus) {
    if (g.mig_mode == 1)
      add(Severity::kWarning, "mig-enabled",
          gpu_label(g) +
              " is in MIG mode: a process sees one MIG instance, and NCCL cannot span MIG instances, so "
              "multi-process data-parallel training across slices does not work",
          "for multi-GPU training disable MIG (`sudo nvidia-smi -i " + std::to_string(g.index) +
              " -mig 0`, then reset the GPU); to use one slice, set CUDA_VISIBLE_DEVICES=MIG-<uuid>",
          g.index);
    if (g.ecc_errors_uncorrected > 0)
      add(Severity::kError, "ecc-errors",
          fmt::format("{} has {} uncorrected ECC error(s) since the driver loaded", gpu_label(g),
                      g.ecc_errors_uncorrected),
          "drain the GPU, reset it (`sudo nvidia-smi -r -i " + std::to_string(g.index) +
              "`) and run `dcgmi diag -r 3`; repeated errors mean RMA",
          g.index);
    if (g.retired_pages_pending == 1 || g.remapped_rows_pending == 1)
      add(Severity::kWarning, "retired-pages-pending",
          gpu_label(g) +
              (g.remapped_rows_pending == 1 ? " has a row remapping pending" : " has a page retirement pending") +
              ": the faulty memory stays in use until the GPU is reset",
          "reset the GPU (`sudo nvidia-smi -r -i " + std::to_string(g.index) + "`) or reboot", g.index);
    if (g.remapped_rows_failed == 1)
      add(Severity::kError, "row-remap-failed",
          gpu_label(g) + " reports a failed row remapping: a memory hardware fault",
          "take the GPU out of service and RMA it", g.index);
    if (g.persistence_mode == 0)
      add(Severity::kInfo, "persistence-off",
          gpu_label(g) + " has persistence mode off: each first CUDA call re-initialises the GPU (seconds)",
          "`sudo nvidia-smi -pm 1` or run nvidia-persistenced", g.index);
  }

  // --- what trainbox will do ---
  if (d.cuda_device_count <= 0) {
    add(Severity::kInfo, "no-gpu-cpu-fallback", "no usable CUDA GPU: trainbox will train on CPU",
        gpu_on_bus ? "fix the errors above to train on the GPU"
                   : "nothing to do for CPU training; on a GPU machine check the driver");
  }

  // --- environment ---
  if (!r.env.suspicious.empty()) {
    add(Severity::kWarning, "suspicious-env",
        fmt::format("set in the environment and changing CUDA/NCCL/torch behaviour: {}",
                    fmt::join(r.env.suspicious, ", ")),
        "unset them unless you are debugging (`unset " + fmt::format("{}", fmt::join(r.env.suspicious, " ")) + "`)");
  }

  diagnose_fabric(r, gpu_present, out);

  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) { return a.severity < b.severity; });
  return out;
}

int exit_code(const std::vector<Finding>& findings, bool strict) {
  for (const auto& f : findings)
    if (f.severity == Severity::kError || (strict && f.severity == Severity::kWarning)) return 1;
  return 0;
}

}  // namespace trainbox::env
