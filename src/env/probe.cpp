#include <trainbox/env/probe.h>

#include <dirent.h>
#include <sched.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include <trainbox/env/dynlib.h>
#include <trainbox/env/elf.h>
#include <trainbox/env/fabric.h>
#include <trainbox/env/nvml.h>
#include <trainbox/env/suspicious_env.h>
#include <trainbox/util/cpu_features.h>
#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>

extern char** environ;

namespace trainbox::env {
namespace fs = std::filesystem;

namespace {

// std::filesystem::exists without exceptions (EACCES on a path is "not there" to the probe).
bool exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// "libnvidia-ml.so.580.95.05" → "580.95.05"; "" when the file name carries no version.
std::string version_from_soname_path(const std::string& path) {
  auto base = path.substr(path.rfind('/') + 1);
  auto pos = base.find(".so.");
  if (pos == std::string::npos) return {};
  auto v = base.substr(pos + 4);
  return parse_version(v).size() >= 2 ? v : std::string{};
}

// A "12.8"-style text from a CUDA API integer (12080 → "12.8").
std::string cuda_int_to_text(int v) { return v > 0 ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : ""; }

// --- host ---
HostInfo probe_host(const std::string& root) {
  HostInfo h;
  h.hostname = host_name();
  if (auto os = read_file(root + "/etc/os-release")) {
    std::smatch m;
    if (std::regex_search(*os, m, std::regex(R"re(PRETTY_NAME="?([^"\n]*)"?)re"))) h.os = m[1];
  }
  struct utsname u {};
  if (uname(&u) == 0) {
    h.kernel = u.release;
    h.arch = u.machine;
  }
  if (auto cpu = read_file(root + "/proc/cpuinfo")) {
    std::smatch m;
    if (std::regex_search(*cpu, m, std::regex(R"(model name\s*:\s*([^\n]*))"))) h.cpu_model = trim(m[1].str());
  }
  const CpuFeatures features = cpu_features(process_env(), root + "/proc/cpuinfo");  // TRAINBOX_CPU_FLAGS wins
  h.cpu_native_bf16 = features.known() && features.native_bf16();
  h.cpu_flags_source = features.source;
  h.cpu_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) h.cpu_affinity = CPU_COUNT(&set);
  if (auto mem = read_file(root + "/proc/meminfo")) {
    std::smatch m;
    if (std::regex_search(*mem, m, std::regex(R"(MemTotal:\s*(\d+) kB)"))) h.mem_total_bytes = std::stoll(m[1]) * 1024;
  }
  // Container: the runtimes' own markers first, then cgroup names.
  if (!getenv_str("APPTAINER_CONTAINER").empty() || !getenv_str("SINGULARITY_CONTAINER").empty())
    h.container = "apptainer";
  else if (!getenv_str("KUBERNETES_SERVICE_HOST").empty())
    h.container = "kubernetes";
  else if (exists(root + "/.dockerenv"))
    h.container = "docker";
  else if (exists(root + "/run/.containerenv"))
    h.container = "podman";
  else if (auto cg = read_file(root + "/proc/1/cgroup")) {
    if (cg->find("kubepods") != std::string::npos)
      h.container = "kubernetes";
    else if (cg->find("docker") != std::string::npos)
      h.container = "docker";
    else if (cg->find("lxc") != std::string::npos)
      h.container = "lxc";
  }
  struct statvfs sv {};
  if (statvfs((root + "/dev/shm").c_str(), &sv) == 0)
    h.shm_bytes = static_cast<std::int64_t>(sv.f_blocks) * sv.f_frsize;
  // NVIDIA display / 3D controllers on the PCI bus, whether or not a driver is bound.
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(root + "/sys/bus/pci/devices", ec)) {
    auto vendor = read_file(d.path().string() + "/vendor");
    auto cls = read_file(d.path().string() + "/class");
    if (vendor && cls && trim(*vendor) == "0x10de" && starts_with(trim(*cls), "0x03"))
      h.nvidia_pci_devices.push_back(d.path().filename().string());
  }
  std::sort(h.nvidia_pci_devices.begin(), h.nvidia_pci_devices.end());
  return h;
}

// --- driver: kernel module, device nodes, libcuda ---
struct CudaDriverApi {
  int (*cuInit)(unsigned) = nullptr;
  int (*cuDriverGetVersion)(int*) = nullptr;
  int (*cuDeviceGetCount)(int*) = nullptr;
  int (*cuGetErrorName)(int, const char**) = nullptr;
  int (*cuGetErrorString)(int, const char**) = nullptr;
};

void probe_kernel_module(const std::string& root, DriverInfo& d) {
  if (auto v = read_file(root + "/proc/driver/nvidia/version")) {
    // "NVRM version: NVIDIA UNIX [Open Kernel Module for ]x86_64 Kernel Module  580.95.05  Release Build …"
    std::smatch m;
    std::string first = v->substr(0, v->find('\n'));
    if (std::regex_search(first, m, std::regex(R"(Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?))")))
      d.kernel_module_version = m[1];
  }
  for (const char* n : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/dxg", "/dev/nvgpu"})
    if (exists(root + n)) d.device_nodes.push_back(n);
  std::vector<std::string> gpus;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root + "/dev", ec)) {
    auto name = e.path().filename().string();
    if (std::regex_match(name, std::regex(R"(nvidia\d+)"))) gpus.push_back("/dev/" + name);
  }
  std::sort(gpus.begin(), gpus.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  d.device_nodes.insert(d.device_nodes.end(), gpus.begin(), gpus.end());
}

LibraryInfo probe_libcuda(const std::vector<std::string>& dirs, bool default_search, DriverInfo& d) {
  LibraryInfo li;
  li.name = "libcuda";
  li.soname = "libcuda.so.1";
  DynLib lib = DynLib::open({"libcuda.so.1"}, dirs, default_search);
  if (!lib) {
    li.error = lib.error();
    return li;
  }
  li.loadable = true;
  li.path = lib.path();
  li.stub = li.path.find("/stubs/") != std::string::npos;
  d.libcuda_version = version_from_soname_path(li.path);
  CudaDriverApi api;
  api.cuInit = lib.symbol<decltype(api.cuInit)>("cuInit");
  api.cuDriverGetVersion = lib.symbol<decltype(api.cuDriverGetVersion)>("cuDriverGetVersion");
  api.cuDeviceGetCount = lib.symbol<decltype(api.cuDeviceGetCount)>("cuDeviceGetCount");
  api.cuGetErrorName = lib.symbol<decltype(api.cuGetErrorName)>("cuGetErrorName");
  api.cuGetErrorString = lib.symbol<decltype(api.cuGetErrorString)>("cuGetErrorString");
  int v = -1;
  if (api.cuDriverGetVersion && api.cuDriverGetVersion(&v) == 0) d.cuda_driver_version = v;
  li.version = cuda_int_to_text(d.cuda_driver_version);
  if (api.cuInit) {
    int rc = api.cuInit(0);
    if (rc != 0) {
      const char *name = nullptr, *text = nullptr;
      if (api.cuGetErrorName) api.cuGetErrorName(rc, &name);
      if (api.cuGetErrorString) api.cuGetErrorString(rc, &text);
      d.cuda_init_error = fmt::format("cuInit: {} ({}): {}", name ? name : "CUDA_ERROR", rc, text ? text : "");
    } else if (api.cuDeviceGetCount) {
      int n = -1;
      if (api.cuDeviceGetCount(&n) == 0) d.cuda_device_count = n;
    }
  }
  // Forward compatibility: a libcuda from a cuda-compat package, newer than the kernel module.
  d.forward_compat = li.path.find("compat") != std::string::npos && !d.kernel_module_version.empty() &&
                     !d.libcuda_version.empty() && compare_versions(d.libcuda_version, d.kernel_module_version) > 0;
  return li;
}

// --- user-space CUDA libraries, resolved the way torch resolves them ---
LibraryInfo probe_library(const std::string& name, const std::vector<std::string>& sonames,
                          const std::vector<std::string>& dirs, bool default_search) {
  LibraryInfo li;
  li.name = name;
  li.soname = sonames.front();
  DynLib lib = DynLib::open(sonames, dirs, default_search);
  if (!lib) {
    li.error = lib.error();
    return li;
  }
  li.loadable = true;
  li.soname = lib.soname();
  li.path = lib.path();
  li.stub = li.path.find("/stubs/") != std::string::npos;
  if (name == "cudart") {
    int v = 0;
    if (auto f = lib.symbol<int (*)(int*)>("cudaRuntimeGetVersion"); f && f(&v) == 0) li.version = cuda_int_to_text(v);
  } else if (name == "cublas") {
    int ma = -1, mi = -1, pa = -1;  // libraryPropertyType: 0 major, 1 minor, 2 patch
    if (auto f = lib.symbol<int (*)(int, int*)>("cublasGetProperty");
        f && f(0, &ma) == 0 && f(1, &mi) == 0 && f(2, &pa) == 0)
      li.version = fmt::format("{}.{}.{}", ma, mi, pa);
  } else if (name == "cudnn") {
    if (auto f = lib.symbol<std::size_t (*)()>("cudnnGetVersion")) {
      std::size_t v = f();  // cuDNN 9: major*10000 + minor*100 + patch; 8: major*1000 + minor*100 + patch
      li.version = v >= 90000 ? fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
                              : fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
    }
  } else if (name == "nccl") {
    int v = 0;
    if (auto f = lib.symbol<int (*)(int*)>("ncclGetVersion"); f && f(&v) == 0)
      li.version = v >= 10000 ? fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
                              : fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
  }
  if (li.version.empty()) li.version = version_from_soname_path(li.path);
  return li;
}

// --- environment variables ---

// envp: the process's environ, or a fake tree's proc/self/environ (tests).
EnvironmentInfo probe_environment(char** envp) {
  EnvironmentInfo e;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    e.cuda_visible_devices_set = true;
    e.cuda_visible_devices = v;
  }
  if (const char* v = std::getenv("NVIDIA_VISIBLE_DEVICES")) {
    e.nvidia_visible_devices_set = true;
    e.nvidia_visible_devices = v;
  }
  e.ld_library_path = split(getenv_str("LD_LIBRARY_PATH"), ':');
  static const char* kPrefixes[] = {"NCCL_",   "TORCH_",    "CUDA_",      "PYTORCH_",   "NVIDIA_",    "OMP_",
                                    "MKL_",    "GLOO_",     "CUBLAS_",    "CUDNN_",     "PET_",       "TORCHELASTIC_",
                                    "MASTER_", "TRAINBOX_", "LD_PRELOAD", "WORLD_SIZE", "LOCAL_RANK", "RANK"};
  for (char** p = envp; p && *p; ++p) {
    std::string kv = *p;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    bool wanted = std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                              [&](const char* pre) { return starts_with(name, pre); });
    if (!wanted) continue;
    EnvVar v;
    v.name = name;
    v.redacted = looks_secret(name);
    v.value = v.redacted ? "<redacted>" : kv.substr(eq + 1);
    e.vars.push_back(std::move(v));
    // env/suspicious_env.h: set to anything, these change what CUDA / NCCL / torch do
    if (std::any_of(std::begin(kSuspiciousEnv), std::end(kSuspiciousEnv),
                    [&](const auto& s) { return name == s.name; }))
      e.suspicious.push_back(name);
  }
  std::sort(e.vars.begin(), e.vars.end(), [](const EnvVar& a, const EnvVar& b) { return a.name < b.name; });
  std::sort(e.suspicious.begin(), e.suspicious.end());
  return e;
}

}  // namespace

bool looks_secret(std::string_view name) {
  for (const char* s : {"TOKEN", "KEY", "PASSWORD", "PASSWD", "SECRET", "CREDENTIAL"})
    if (contains_icase(name, s)) return true;
  return false;
}

// --- torch ---
std::string default_torch_dir() {
  if (auto v = getenv_str("TRAINBOX_TORCH_DIR"); !v.empty()) return v;
#ifdef TRAINBOX_DEFAULT_TORCH_DIR
  return TRAINBOX_DEFAULT_TORCH_DIR;
#else
  return {};
#endif
}

TorchInfo probe_torch(const std::string& dir) {
  TorchInfo t;
  if (dir.empty()) {
    t.error = "no LibTorch location known (set TRAINBOX_TORCH_DIR)";
    return t;
  }
  std::error_code ec;
  t.root = fs::weakly_canonical(dir, ec).string();
  if (t.root.empty()) t.root = dir;
  if (!exists(t.root + "/lib/libtorch_cpu.so")) {
    t.error = "no lib/libtorch_cpu.so under " + t.root;
    return t;
  }
  t.found = true;
  // Version: the wheel's version.py, or LibTorch's build-version file.
  if (auto py = read_file(t.root + "/version.py")) {
    auto field = [&](const char* key) {
      std::smatch m;
      std::regex re(std::string(key) + R"(\s*(?::[^=]*)?=\s*'([^']*)')");
      return std::regex_search(*py, m, re) ? m[1].str() : std::string{};
    };
    t.version = field("__version__");
    t.cuda_version = field("cuda");
    t.git_version = field("git_version");
  } else if (auto bv = read_file(t.root + "/build-version")) {
    t.version = trim(*bv);
    auto plus = t.version.find("+cu");
    if (plus != std::string::npos) {  // "2.11.0+cu130" → "13.0"
      std::string d = t.version.substr(plus + 3);
      if (d.size() >= 3) t.cuda_version = d.substr(0, d.size() - 1) + "." + d.substr(d.size() - 1);
    }
  }
  // cuDNN / NCCL the build was made against: the wheel pins the exact versions it was built with.
  for (const auto& e : fs::directory_iterator(fs::path(t.root).parent_path(), ec)) {
    auto name = e.path().filename().string();
    if (!starts_with(name, "torch-") || name.find(".dist-info") == std::string::npos) continue;
    if (auto meta = read_file(e.path().string() + "/METADATA")) {
      std::smatch m;
      if (std::regex_search(*meta, m, std::regex(R"(Requires-Dist: nvidia-cudnn-cu\d+==(\d+\.\d+\.\d+))")))
        t.cudnn_version = m[1];
      if (std::regex_search(*meta, m, std::regex(R"(Requires-Dist: nvidia-nccl-cu\d+==(\d+\.\d+\.\d+))")))
        t.nccl_version = m[1];
    }
  }
  // Compiled architectures: the device code actually inside libtorch_cuda.so.
  std::string cuda_lib = t.root + "/lib/libtorch_cuda.so";
  if (exists(cuda_lib)) {
    try {
      t.arch_list = ElfFile::open(cuda_lib).cuda_arch_list();
      t.arch_source = cuda_lib;
    } catch (const std::exception& e) {
      t.error = e.what();
    }
  }
  try {
    ElfFile c10 = ElfFile::open(t.root + "/lib/libc10.so");
    t.cxx11_abi = c10.dynstr_contains("St7__cxx11") ? 1 : 0;
  } catch (const std::exception& e) {
    if (t.error.empty()) t.error = e.what();
  }
  return t;
}

EnvReport probe(const ProbeOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  EnvReport r;
#ifdef TRAINBOX_VERSION
  r.trainbox_version = TRAINBOX_VERSION;
#endif
  r.host = probe_host(o.root);
  // A fake tree may carry its own environment (NUL-separated, as Linux writes proc/self/environ).
  std::optional<std::string> fake_env = o.root.empty() ? std::nullopt : read_file(o.root + "/proc/self/environ");
  if (fake_env) {
    std::vector<std::string> kvs = split(*fake_env, '\0');
    std::vector<char*> envp;
    for (auto& kv : kvs) envp.push_back(kv.data());
    envp.push_back(nullptr);
    r.env = probe_environment(envp.data());
  } else {
    r.env = probe_environment(environ);
  }
  r.torch = probe_torch(o.torch_dir.empty() ? default_torch_dir() : o.torch_dir);

  // Search order for the CUDA user-space libraries: explicit dirs, then torch's own RUNPATH
  // (the wheel's nvidia/* packages — what torch really loads), then the system search.
  std::vector<std::string> dirs = o.library_path;
  const bool default_search = !o.library_path_only;
  if (!o.library_path_only && r.torch.found && exists(r.torch.root + "/lib/libtorch_cuda.so")) {
    try {
      for (auto& d : ElfFile::open(r.torch.root + "/lib/libtorch_cuda.so").runpath()) dirs.push_back(d);
    } catch (const std::exception&) {
    }
  }
  std::vector<std::string> driver_dirs = o.library_path;  // libcuda and NVML come with the driver, not the wheel

  probe_kernel_module(o.root, r.driver);
  Nvml nvml = Nvml::open(driver_dirs, default_search);
  r.driver.nvml_library_path = nvml.library_path();
  r.driver.nvml_library_version = version_from_soname_path(nvml.library_path());
  if (nvml) {
    r.driver.driver_version = nvml.driver_version();
    r.driver.nvml_version = nvml.nvml_version();
    r.gpus = nvml.gpus(o.gpu_processes);
    if (r.gpus.size() > 1)
      r.topology = nvml.topology();
    else if (r.gpus.size() == 1)
      r.topology = {{"X"}};
  } else {
    r.driver.nvml_error = nvml.error();
  }
  r.libraries.push_back(probe_libcuda(driver_dirs, default_search, r.driver));
  if (r.driver.cuda_driver_version < 0 && nvml) r.driver.cuda_driver_version = nvml.cuda_driver_version();

  int major = 0;
  if (auto v = parse_version(r.torch.cuda_version); !v.empty()) major = v[0];
  auto versions = [&](const std::string& stem, std::vector<int> majors) {
    std::vector<std::string> names;
    if (major) names.push_back(stem + std::to_string(major));
    for (int m : majors)
      if (m != major) names.push_back(stem + std::to_string(m));
    return names;
  };
  r.libraries.push_back(probe_library("cudart", versions("libcudart.so.", {13, 12, 11}), dirs, default_search));
  r.libraries.push_back(probe_library("cublas", versions("libcublas.so.", {13, 12, 11}), dirs, default_search));
  r.libraries.push_back(probe_library("cudnn", {"libcudnn.so.9", "libcudnn.so.8"}, dirs, default_search));
  r.libraries.push_back(probe_library("nccl", {"libnccl.so.2"}, dirs, default_search));
  LibraryInfo nv;
  nv.name = "nvml";
  nv.soname = "libnvidia-ml.so.1";
  nv.loadable = !nvml.library_path().empty();
  nv.path = nvml.library_path();
  nv.version = r.driver.nvml_library_version;
  nv.error = nv.loadable ? "" : nvml.error();
  r.libraries.push_back(nv);

  std::vector<std::string> bus_ids;
  for (const auto& g : r.gpus) bus_ids.push_back(g.pci_bus_id);
  r.fabric = probe_fabric(o.root, bus_ids);

  r.probe_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace trainbox::env
