// trainbox/env/report.h — EnvReport: every fact `trainbox doctor` knows about a machine.
//
// A plain struct with a JSON round-trip. probe() (probe.h) is the only code that fills
// it from the real machine; diagnose() (diagnose.h) reads it and touches nothing, so a
// fixture JSON file is a complete stand-in for a machine in tests.
//
//   EnvReport r = trainbox::env::probe();
//   std::string j = trainbox::env::to_json_string(r);          // `doctor --json`
//   EnvReport back = trainbox::env::report_from_json(j);       // == r
//
// Conventions: unknown numbers are -1, unknown strings are empty, tri-state flags
// (enabled / disabled / unknown) are 1 / 0 / -1. Versions stay as the text the
// source gave ("580.95.05", "13.0"); CUDA driver API versions are integers (13000).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trainbox::env {

inline constexpr int kReportSchemaVersion = 1;

struct HostInfo {
  std::string hostname;
  std::string os;      // PRETTY_NAME from /etc/os-release
  std::string kernel;  // uname -r
  std::string arch;    // uname -m
  std::string cpu_model;
  // bf16 matrix products without a conversion to fp32 (util/cpu_features.h: avx512_bf16 or
  // amx_bf16, aarch64 bf16): train.amp = "auto" picks bf16 on the CPU only then.
  bool cpu_native_bf16 = false;
  std::string cpu_flags_source;  // where the flags came from: "/proc/cpuinfo", "TRAINBOX_CPU_FLAGS", "" (unknown)
  int cpu_cores = -1;            // online logical CPUs
  int cpu_affinity = -1;         // CPUs this process may run on (cgroups/taskset)
  std::int64_t mem_total_bytes = -1;
  std::string container;        // "docker", "podman", "kubernetes", "apptainer", "lxc", "" (none detected)
  std::int64_t shm_bytes = -1;  // size of /dev/shm; -1 when it is missing
  std::vector<std::string> nvidia_pci_devices;  // PCI addresses of NVIDIA display/3D controllers in sysfs
};

struct DriverInfo {
  std::string kernel_module_version;  // /proc/driver/nvidia/version ("580.95.05"), empty if not loaded
  std::string nvml_library_version;   // from the libnvidia-ml file that loaded (its versioned name)
  std::string nvml_library_path;
  std::string driver_version;    // nvmlSystemGetDriverVersion
  std::string nvml_version;      // nvmlSystemGetNVMLVersion
  std::string nvml_error;        // why NVML could not be used (empty when it works)
  int cuda_driver_version = -1;  // cuDriverGetVersion, e.g. 13000 = CUDA 13.0
  std::string libcuda_version;   // versioned file name of the libcuda that loaded ("580.95.05")
  std::string cuda_init_error;   // cuInit's error name and text when it failed
  int cuda_device_count = -1;    // cuDeviceGetCount after CUDA_VISIBLE_DEVICES
  bool forward_compat = false;   // libcuda comes from a cuda-compat package and is newer than the kernel module
  std::vector<std::string>
      device_nodes;  // present among /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidiaN, /dev/dxg, /dev/nvgpu
};

struct LibraryInfo {
  std::string name;    // "libcuda", "cudart", "cublas", "cudnn", "nccl", "nvml"
  std::string soname;  // what was asked for: "libcudnn.so.9"
  bool loadable = false;
  std::string path;     // the file it resolved to
  std::string version;  // as the library reports it ("9.19.0")
  std::string error;    // dlerror() text when not loadable
  bool stub = false;    // resolved to a .../stubs/ link-time stub
};

struct TorchInfo {
  bool found = false;
  std::string root;     // the torch package or LibTorch directory
  std::string version;  // "2.11.0+cu130"
  std::string git_version;
  std::string cuda_version;            // CUDA the build targets ("13.0"); empty for a CPU-only build
  std::string cudnn_version;           // cuDNN the build was made against
  std::string nccl_version;            // NCCL the build was made against
  std::vector<std::string> arch_list;  // device code in libtorch_cuda: "sm_90" (SASS), "compute_120" (PTX)
  std::string arch_source;             // the library file the arch list was read from
  int cxx11_abi = -1;                  // _GLIBCXX_USE_CXX11_ABI of the build
  std::string error;                   // why torch facts are incomplete
};

struct GpuProcess {
  std::uint32_t pid = 0;
  std::string name;
  std::int64_t used_bytes = -1;
};

struct GpuInfo {
  int index = -1;
  std::string name;
  std::string uuid;
  std::string pci_bus_id;
  std::string brand;  // "datacenter", "geforce", "quadro", "other"
  int cc_major = -1, cc_minor = -1;
  std::int64_t mem_total_bytes = -1, mem_used_bytes = -1;
  int pcie_gen = -1, pcie_width = -1;
  int mig_mode = -1;  // 1 enabled
  int persistence_mode = -1;
  int ecc_mode = -1;
  std::int64_t ecc_errors_corrected = -1;  // volatile (since driver load)
  std::int64_t ecc_errors_uncorrected = -1;
  int retired_pages_pending = -1;  // 1: a page retirement waits for a reboot
  int remapped_rows_pending = -1;  // 1: a row remap waits for a GPU reset
  int remapped_rows_failed = -1;   // 1: remapping failed (hardware fault)
  int temperature_c = -1;
  double power_w = -1, power_limit_w = -1;
  int util_gpu_pct = -1, util_mem_pct = -1;
  int sm_clock_mhz = -1;
  std::vector<GpuProcess> processes;
};

struct EnvVar {
  std::string name;
  std::string value;  // "<redacted>" for names that look like secrets
  bool redacted = false;
};

struct EnvironmentInfo {
  bool cuda_visible_devices_set = false;
  std::string cuda_visible_devices;
  bool nvidia_visible_devices_set = false;
  std::string nvidia_visible_devices;
  std::vector<std::string> ld_library_path;
  std::vector<EnvVar> vars;             // NCCL_*, TORCH_*, CUDA_*, PYTORCH_*, OMP_*, ... (sorted by name)
  std::vector<std::string> suspicious;  // names of set variables that change CUDA's behaviour
};

// --- the fabric: RDMA NICs (InfiniBand / RoCE), their device nodes, memlock, GPUDirect RDMA ---
struct HcaPort {
  int port = -1;           // 1-based, as /sys/class/infiniband/<hca>/ports/<n>
  std::string state;       // "ACTIVE", "DOWN", "INIT", "ARMED" (from "4: ACTIVE")
  std::string phys_state;  // "LinkUp", "Disabled", "Polling", ...
  std::string rate;        // "400 Gb/sec (4X NDR)" as sysfs gives it
  double rate_gbps = -1;   // the number in `rate`
  std::string link_layer;  // "InfiniBand" or "Ethernet" (= RoCE)
  std::string netdev;      // the network interface of this port ("ib0", "ens1f0np0"; "" if none)
};

struct HcaInfo {
  std::string name;         // "mlx5_0"
  std::string pci_address;  // "0000:18:00.0" (the device link), "" when not on PCI
  std::string firmware;     // fw_ver
  std::vector<HcaPort> ports;
};

struct FabricInfo {
  bool sysfs_present = false;                         // /sys/class/infiniband exists
  std::vector<HcaInfo> hcas;                          // sorted by name
  std::vector<std::string> netdevs;                   // /sys/class/net names (for NCCL_SOCKET_IFNAME)
  bool dev_infiniband = false;                        // /dev/infiniband exists
  std::vector<std::string> uverbs;                    // /dev/infiniband/uverbsN present
  std::vector<std::string> uverbs_unopenable;         // "uverbs0 (Permission denied)": open(O_RDWR) failed
  std::int64_t memlock_soft = -2, memlock_hard = -2;  // RLIMIT_MEMLOCK bytes; -1 unlimited; -2 unknown
  int peermem_loaded = -1;                            // nvidia_peermem (or nv_peer_mem) kernel module
  int open_kernel_module = -1;                        // NVIDIA open GPU kernel module (dma-buf needs it)
  std::string kernel;                                 // kernel release the dma-buf verdict used
  int dmabuf = -1;                                    // GPU memory export as dma-buf is possible (kernel + driver)
  std::string dmabuf_why;                             // the reason for `dmabuf`
  // gpu_nic[g][h]: PCIe distance from GPU g to HCA h, NCCL's words: "PIX", "PXB", "PHB", "NODE", "SYS" ("" unknown).
  std::vector<std::vector<std::string>> gpu_nic;
  std::vector<std::string> notes;  // what could not be read, and why (never fatal)
};

struct EnvReport {
  int schema_version = kReportSchemaVersion;
  std::string trainbox_version;
  HostInfo host;
  DriverInfo driver;
  std::vector<LibraryInfo> libraries;
  TorchInfo torch;
  std::vector<GpuInfo> gpus;
  // topology[i][j] for i != j: "NV18" (NVLink count), "PIX", "PXB", "PHB", "NODE", "SYS", "X" on the diagonal.
  std::vector<std::vector<std::string>> topology;
  EnvironmentInfo env;
  FabricInfo fabric;
  double probe_ms = -1;

  // The library entry with that name, or nullptr.
  const LibraryInfo* library(const std::string& name) const;
};

void to_json(nlohmann::json& j, const EnvReport& r);
void from_json(const nlohmann::json& j, EnvReport& r);
std::string to_json_string(const EnvReport& r, int indent = 2);
// The GPU rows alone, in the report's JSON form (`trainbox smi --json`).
nlohmann::json gpus_to_json(const std::vector<GpuInfo>& gpus);
// Throws DataError naming the problem when `text` is not a valid report.
EnvReport report_from_json(const std::string& text);
// A report saved to a file: a bare report or `trainbox doctor --json` output (the report
// under "report"). Throws DataError naming the file when it cannot be read or parsed.
EnvReport read_report_file(const std::string& path);

}  // namespace trainbox::env
