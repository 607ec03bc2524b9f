// diagnose() is pure: every verdict is checked from fixture reports, on any machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

#include "fixtures.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/util/strings.h>

using namespace trainbox;
using env::EnvReport;
using env::Finding;
using env::Severity;

namespace {

std::set<std::string> ids(const std::vector<Finding>& fs) {
  std::set<std::string> out;
  for (const auto& f : fs) out.insert(f.id);
  return out;
}

const Finding* find(const std::vector<Finding>& fs, const std::string& id) {
  for (const auto& f : fs)
    if (f.id == id) return &f;
  return nullptr;
}

env::LibraryInfo& lib(EnvReport& r, const std::string& name) {
  for (auto& l : r.libraries)
    if (l.name == name) return l;
  throw std::runtime_error("fixture has no library " + name);
}

// A healthy fabric for the one-GPU fixture: an active NDR InfiniBand HCA on the GPU's PCIe switch.
void with_fabric(EnvReport& r) {
  auto& f = r.fabric;
  f.sysfs_present = true;
  env::HcaInfo h;
  h.name = "mlx5_0";
  env::HcaPort p;
  p.port = 1;
  p.state = "ACTIVE";
  p.phys_state = "LinkUp";
  p.rate = "400 Gb/sec (4X NDR)";
  p.rate_gbps = 400;
  p.link_layer = "InfiniBand";
  p.netdev = "ib0";
  h.ports = {p};
  f.hcas = {h};
  f.netdevs = {"eth0", "ib0", "lo"};
  f.dev_infiniband = true;
  f.uverbs = {"uverbs0"};
  f.memlock_soft = f.memlock_hard = -1;
  f.peermem_loaded = 1;
  f.gpu_nic = {{"PIX"}};
}

}  // namespace

// --- the fixtures named in the acceptance criteria ---
struct FixtureCase {
  std::string file;
  std::set<std::string> expected;  // exactly these ids
  int exit_code;
};

class FixtureVerdicts : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureVerdicts, ExactlyTheExpectedFindings) {
  const auto& c = GetParam();
  auto findings = env::diagnose(test::fixture(c.file));
  EXPECT_EQ(ids(findings), c.expected);
  EXPECT_EQ(env::exit_code(findings, false), c.exit_code);
  for (const auto& f : findings) {
    EXPECT_FALSE(f.message.empty()) << f.id;
    EXPECT_FALSE(f.fix.empty()) << f.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureVerdicts,
                         ::testing::Values(FixtureCase{"healthy-h200.json", {}, 0},
                                           FixtureCase{"h100x8-nvlink.json", {}, 0},
                                           FixtureCase{"driver535-cu128.json", {"driver-too-old-for-runtime"}, 0},
                                           FixtureCase{"sm61-cu128.json", {"gpu-arch-not-in-build"}, 1},
                                           FixtureCase{"container-shm64-cvd-empty.json",
                                                       {"shm-too-small", "cvd-empty", "no-gpu-cpu-fallback"},
                                                       1},
                                           FixtureCase{"no-driver.json", {"no-driver", "no-gpu-cpu-fallback"}, 1}),
                         [](const auto& info) {
                           std::string n = info.param.file.substr(0, info.param.file.find('.'));
                           for (auto& c : n)
                             if (!std::isalnum((unsigned char)c)) c = '_';
                           return n;
                         });

TEST(Diagnose, Driver535WithCu128IsMinorVersionCompatibilityWarning) {
  auto fs = env::diagnose(test::fixture("driver535-cu128.json"));
  const Finding* f = find(fs, "driver-too-old-for-runtime");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_NE(f->message.find("minor-version compatibility"), std::string::npos) << f->message;
  EXPECT_NE(f->fix.find("570.26"), std::string::npos) << f->fix;  // the table's minimum for CUDA 12.8
}

TEST(Diagnose, Sm61NamesTheCapabilityAndTheBuild) {
  auto fs = env::diagnose(test::fixture("sm61-cu128.json"));
  const Finding* f = find(fs, "gpu-arch-not-in-build");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("6.1"), std::string::npos);
  EXPECT_NE(f->message.find("sm_75"), std::string::npos);
  EXPECT_EQ(f->gpu, 0);
}

TEST(Diagnose, ContainerShmIsTheDockerDefault) {
  auto fs = env::diagnose(test::fixture("container-shm64-cvd-empty.json"));
  const Finding* f = find(fs, "shm-too-small");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->message.find("container default"), std::string::npos) << f->message;
  EXPECT_NE(f->fix.find("--ipc=host"), std::string::npos);
  EXPECT_EQ(find(fs, "cvd-empty")->severity, Severity::kError);
}

TEST(Diagnose, NoDriverInContainerSuggestsGpusAll) {
  auto r = test::fixture("no-driver.json");
  r.host.container = "docker";
  const auto fs = env::diagnose(r);
  const Finding* f = find(fs, "no-driver");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->fix.find("--gpus all"), std::string::npos);
}

TEST(Diagnose, PlainCpuMachineIsOnlyTheFallbackInfo) {
  EnvReport r = test::fixture("no-driver.json");
  r.host.nvidia_pci_devices.clear();
  auto fs = env::diagnose(r);
  EXPECT_EQ(ids(fs), (std::set<std::string>{"no-gpu-cpu-fallback"}));
  EXPECT_EQ(env::exit_code(fs, true), 0);
}

// --- one mutation of the healthy H200 per finding id: every id is reachable ---
struct Mutation {
  std::string id;
  Severity severity;
  std::function<void(EnvReport&)> apply;
};

std::vector<Mutation> mutations() {
  return {
      {"no-driver", Severity::kError, [](EnvReport& r) { r = test::fixture("no-driver.json"); }},
      {"libcuda-missing", Severity::kError,
       [](EnvReport& r) {
         lib(r, "libcuda").loadable = false;
         lib(r, "libcuda").error = "libcuda.so.1: cannot open shared object file";
       }},
      {"libcuda-stub-loaded", Severity::kError,
       [](EnvReport& r) {
         lib(r, "libcuda").path = "/usr/local/cuda/lib64/stubs/libcuda.so";
         lib(r, "libcuda").stub = true;
       }},
      {"driver-library-mismatch", Severity::kError, [](EnvReport& r) { r.driver.nvml_library_version = "580.105.08"; }},
      {"driver-too-old-for-runtime", Severity::kError,
       [](EnvReport& r) {  // CUDA 12.8 driver, CUDA 13.0 torch: across majors, no compatibility
         r.driver.cuda_driver_version = 12080;
         r.driver.driver_version = r.driver.kernel_module_version = "570.133.20";
         r.driver.nvml_library_version = r.driver.libcuda_version = "570.133.20";
       }},
      {"compat-package-on-unsupported-gpu", Severity::kError,
       [](EnvReport& r) {
         r.driver.forward_compat = true;
         r.gpus[0].name = "NVIDIA GeForce RTX 4090";
         r.gpus[0].brand = "geforce";
         r.gpus[0].cc_minor = 9;
         r.gpus[0].cc_major = 8;
       }},
      {"gpu-arch-not-in-build", Severity::kError,
       [](EnvReport& r) {
         r.gpus[0].cc_major = 7;
         r.gpus[0].cc_minor = 0;  // V100: cu130 dropped sm_70
       }},
      {"cvd-empty", Severity::kError,
       [](EnvReport& r) {
         r.env.cuda_visible_devices_set = true;
         r.env.cuda_visible_devices = "";
       }},
      {"cvd-invalid", Severity::kError,
       [](EnvReport& r) {
         r.env.cuda_visible_devices_set = true;
         r.env.cuda_visible_devices = "0,3";
       }},
      {"uvm-missing", Severity::kError,
       [](EnvReport& r) {
         auto& n = r.driver.device_nodes;
         n.erase(std::remove(n.begin(), n.end(), "/dev/nvidia-uvm"), n.end());
       }},
      {"shm-too-small", Severity::kWarning, [](EnvReport& r) { r.host.shm_bytes = 512LL << 20; }},
      {"cudnn-missing", Severity::kError, [](EnvReport& r) { lib(r, "cudnn").loadable = false; }},
      {"cudnn-version-mismatch", Severity::kError, [](EnvReport& r) { lib(r, "cudnn").version = "8.9.7"; }},
      {"nccl-missing", Severity::kError, [](EnvReport& r) { lib(r, "nccl").loadable = false; }},
      {"mig-enabled", Severity::kWarning, [](EnvReport& r) { r.gpus[0].mig_mode = 1; }},
      {"no-gpu-cpu-fallback", Severity::kInfo,
       [](EnvReport& r) {
         r.gpus.clear();
         r.driver = {};
         r.host.nvidia_pci_devices.clear();
         lib(r, "libcuda").loadable = false;
       }},
      {"persistence-off", Severity::kInfo, [](EnvReport& r) { r.gpus[0].persistence_mode = 0; }},
      {"ecc-errors", Severity::kError, [](EnvReport& r) { r.gpus[0].ecc_errors_uncorrected = 3; }},
      {"retired-pages-pending", Severity::kWarning, [](EnvReport& r) { r.gpus[0].remapped_rows_pending = 1; }},
      {"row-remap-failed", Severity::kError, [](EnvReport& r) { r.gpus[0].remapped_rows_failed = 1; }},
      {"nvml-unavailable", Severity::kWarning,
       [](EnvReport& r) { r.driver.nvml_error = "nvmlInit failed: Unknown Error (NVML 999)"; }},
      {"cuda-init-failed", Severity::kError,
       [](EnvReport& r) {
         r.driver.cuda_init_error = "cuInit: CUDA_ERROR_UNKNOWN (999): unknown error";
         r.driver.cuda_device_count = -1;
       }},
      {"torch-not-found", Severity::kWarning,
       [](EnvReport& r) {
         r.torch = {};
         r.torch.error = "no lib/libtorch_cpu.so under /nowhere";
       }},
      {"torch-cpu-only", Severity::kWarning,
       [](EnvReport& r) {
         r.torch.cuda_version.clear();
         r.torch.version = "2.11.0+cpu";
       }},
      {"suspicious-env", Severity::kWarning, [](EnvReport& r) { r.env.suspicious = {"CUDA_LAUNCH_BLOCKING"}; }},
      // the fabric: one healthy InfiniBand HCA next to the GPU, then one thing wrong
      {"rdma-port-down", Severity::kWarning,
       [](EnvReport& r) {
         with_fabric(r);
         r.fabric.hcas.push_back(r.fabric.hcas[0]);
         r.fabric.hcas[1].name = "mlx5_1";
         r.fabric.hcas[1].ports[0].state = "DOWN";
       }},
      {"rdma-devices-missing", Severity::kError,
       [](EnvReport& r) {
         with_fabric(r);
         r.fabric.uverbs.clear();
         r.fabric.dev_infiniband = false;
       }},
      {"memlock-too-small", Severity::kError,
       [](EnvReport& r) {
         with_fabric(r);
         r.fabric.memlock_soft = r.fabric.memlock_hard = 64 << 10;
       }},
      {"gdr-unavailable", Severity::kWarning,
       [](EnvReport& r) {
         with_fabric(r);
         r.fabric.peermem_loaded = 0;
         r.fabric.dmabuf = 0;
         r.fabric.dmabuf_why = "Linux 5.4.0 < 5.12";
       }},
      {"nccl-ib-disabled", Severity::kError,
       [](EnvReport& r) {
         with_fabric(r);
         r.env.vars.push_back({"NCCL_IB_DISABLE", "1", false});
       }},
      {"nccl-names-missing", Severity::kError,
       [](EnvReport& r) {
         with_fabric(r);
         r.env.vars.push_back({"NCCL_IB_HCA", "mlx5_9", false});
       }},
      {"nccl-gdr-level-conflict", Severity::kWarning,
       [](EnvReport& r) {
         with_fabric(r);
         r.env.vars.push_back({"NCCL_NET_GDR_LEVEL", "LOC", false});
       }},
      {"fabric-probe-incomplete", Severity::kInfo,
       [](EnvReport& r) {
         r.fabric.notes = {"mlx5_0 port 1: /sys/class/infiniband/mlx5_0/ports/1/state cannot be read"};
       }},
  };
}

TEST(Diagnose, EveryFindingIdIsReachableFromTheHealthyReport) {
  std::set<std::string> covered;
  for (const auto& m : mutations()) {
    EnvReport r = test::fixture("healthy-h200.json");
    m.apply(r);
    auto fs = env::diagnose(r);
    const Finding* f = find(fs, m.id);
    ASSERT_NE(f, nullptr) << m.id << " not reported";
    EXPECT_EQ(f->severity, m.severity) << m.id;
    covered.insert(m.id);
  }
  std::set<std::string> all(env::finding_ids().begin(), env::finding_ids().end());
  EXPECT_EQ(covered, all) << "a finding id without a test";
}

TEST(Diagnose, AHealthyFabricHasNoFindings) {
  EnvReport r = test::fixture("healthy-h200.json");
  with_fabric(r);
  EXPECT_TRUE(env::diagnose(r).empty());
}

TEST(Diagnose, FindingsAreSortedBySeverity) {
  EnvReport r = test::fixture("healthy-h200.json");
  r.gpus[0].persistence_mode = 0;   // info
  r.gpus[0].mig_mode = 1;           // warning
  lib(r, "nccl").loadable = false;  // error
  auto fs = env::diagnose(r);
  ASSERT_GE(fs.size(), 3u);
  EXPECT_TRUE(std::is_sorted(fs.begin(), fs.end(), [](auto& a, auto& b) { return a.severity < b.severity; }));
}

TEST(Diagnose, StrictTurnsWarningsIntoFailure) {
  auto fs = env::diagnose(test::fixture("driver535-cu128.json"));
  EXPECT_EQ(env::exit_code(fs, false), 0);
  EXPECT_EQ(env::exit_code(fs, true), 1);
}

TEST(Diagnose, CudnnOlderMinorIsAWarning) {
  EnvReport r = test::fixture("healthy-h200.json");
  lib(r, "cudnn").version = "9.1.0";
  EXPECT_EQ(find(env::diagnose(r), "cudnn-version-mismatch")->severity, Severity::kWarning);
}

TEST(Diagnose, StubsDirOnLibraryPathIsAWarning) {
  EnvReport r = test::fixture("healthy-h200.json");
  r.env.ld_library_path = {"/usr/local/cuda/lib64/stubs"};
  EXPECT_EQ(find(env::diagnose(r), "libcuda-stub-loaded")->severity, Severity::kWarning);
}

TEST(Diagnose, CvdByUuidPrefixIsValid) {
  EnvReport r = test::fixture("healthy-h200.json");
  r.env.cuda_visible_devices_set = true;
  r.env.cuda_visible_devices = r.gpus[0].uuid.substr(0, 12);
  EXPECT_EQ(find(env::diagnose(r), "cvd-invalid"), nullptr);
  r.env.cuda_visible_devices = "GPU-00000000";
  EXPECT_NE(find(env::diagnose(r), "cvd-invalid"), nullptr);
}

// --- the facts diagnose() stands on ---
TEST(Facts, ArchSupport) {
  const std::vector<std::string> cu130 = {"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"};
  EXPECT_TRUE(env::arch_list_supports(cu130, 9, 0));            // H200
  EXPECT_TRUE(env::arch_list_supports(cu130, 8, 9));            // L40S runs sm_86 SASS
  EXPECT_TRUE(env::arch_list_supports(cu130, 10, 3));           // B300 runs sm_100 SASS
  EXPECT_FALSE(env::arch_list_supports(cu130, 7, 0));           // V100
  EXPECT_FALSE(env::arch_list_supports(cu130, 6, 1));           // GTX 1080 Ti
  EXPECT_TRUE(env::arch_list_supports({"compute_70"}, 9, 0));   // PTX JIT-compiles forward
  EXPECT_FALSE(env::arch_list_supports({"compute_90"}, 8, 6));  // but never backward
  EXPECT_FALSE(env::arch_list_supports({"sm_90a"}, 10, 0));     // arch-specific code: exactly 9.0
  EXPECT_TRUE(env::arch_list_supports({"sm_90a"}, 9, 0));
}

TEST(Facts, DriverTable) {
  EXPECT_EQ(env::min_driver_for_cuda("12.8"), "570.26");
  EXPECT_EQ(env::min_driver_for_cuda("13.0"), "580.65.06");
  EXPECT_EQ(env::min_driver_for_cuda("10.2"), "");
  EXPECT_EQ(env::minor_compat_floor(12), "525.60.13");
}

TEST(Facts, DatacenterGpus) {
  env::GpuInfo g;
  for (const char* n : {"NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "NVIDIA L40S", "NVIDIA L4"}) {
    g.name = n;
    EXPECT_TRUE(env::is_datacenter_gpu(g)) << n;
  }
  for (const char* n : {"NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000", "NVIDIA GeForce GTX 1080 Ti"}) {
    g.name = n;
    EXPECT_FALSE(env::is_datacenter_gpu(g)) << n;
  }
}

// --- docs/troubleshooting.md has the long form of every id ---
TEST(Docs, TroubleshootingHasEveryFindingId) {
  auto doc = read_file(test::source_dir() + "/docs/troubleshooting.md");
  ASSERT_TRUE(doc.has_value());
  for (const auto& id : env::finding_ids()) EXPECT_NE(doc->find("\n## " + id + "\n"), std::string::npos) << id;
}
