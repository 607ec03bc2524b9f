// The probe on this machine, on a fake file tree, and with no GPU libraries at all.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "temp_dir.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/env/probe.h>

using namespace trainbox;
namespace fs = std::filesystem;

namespace {
using test::TempDir;

std::set<std::string> ids(const std::vector<env::Finding>& fs) {
  std::set<std::string> out;
  for (const auto& f : fs) out.insert(f.id);
  return out;
}
}  // namespace

TEST(Probe, NoGpuLibrariesAnywhereIsAFactNotACrash) {
  TempDir empty;
  env::ProbeOptions o;
  o.library_path = {empty.path};
  o.library_path_only = true;
  env::EnvReport r = env::probe(o);
  ASSERT_NE(r.library("libcuda"), nullptr);
  EXPECT_FALSE(r.library("libcuda")->loadable);
  EXPECT_FALSE(r.library("nvml")->loadable);
  EXPECT_FALSE(r.library("cudnn")->loadable);
  EXPECT_FALSE(r.driver.nvml_error.empty());
  EXPECT_TRUE(r.gpus.empty());
  EXPECT_EQ(r.driver.cuda_device_count, -1);
  EXPECT_GT(r.probe_ms, 0);
  (void)env::diagnose(r);
}

TEST(Probe, FakeTreeWithDriverButNoLibraries) {
  TempDir root, empty;
  root.write("proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U16)\n"
             "GCC version:  gcc version 12.3.0\n");
  root.write("dev/nvidiactl", "");
  root.write("dev/nvidia0", "");
  root.write("dev/nvidia10", "");
  root.write("sys/bus/pci/devices/0000:18:00.0/vendor", "0x10de\n");
  root.write("sys/bus/pci/devices/0000:18:00.0/class", "0x030200\n");
  root.write("sys/bus/pci/devices/0000:00:01.0/vendor", "0x8086\n");
  root.write("sys/bus/pci/devices/0000:00:01.0/class", "0x060400\n");
  root.write("etc/os-release", "NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 24.04.1 LTS\"\n");
  env::ProbeOptions o;
  o.root = root.path;
  o.library_path = {empty.path};
  o.library_path_only = true;
  env::EnvReport r = env::probe(o);
  EXPECT_EQ(r.driver.kernel_module_version, "580.95.05");
  EXPECT_EQ(r.driver.device_nodes, (std::vector<std::string>{"/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia10"}));
  EXPECT_EQ(r.host.nvidia_pci_devices, (std::vector<std::string>{"0000:18:00.0"}));
  EXPECT_EQ(r.host.os, "Ubuntu 24.04.1 LTS");
  EXPECT_EQ(r.host.shm_bytes, -1);  // no dev/shm in the fake tree
  auto found = ids(env::diagnose(r));
  EXPECT_TRUE(found.count("libcuda-missing"));
  EXPECT_TRUE(found.count("uvm-missing"));
  EXPECT_TRUE(found.count("shm-too-small"));
  EXPECT_FALSE(found.count("no-driver"));
}

TEST(Probe, SecretsAreNeverPrinted) {
  setenv("NCCL_TEST_API_TOKEN", "hunter2", 1);
  setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  env::EnvReport r = env::probe();
  unsetenv("NCCL_TEST_API_TOKEN");
  unsetenv("CUDA_LAUNCH_BLOCKING");
  bool seen = false;
  for (const auto& v : r.env.vars)
    if (v.name == "NCCL_TEST_API_TOKEN") {
      seen = true;
      EXPECT_TRUE(v.redacted);
      EXPECT_EQ(v.value, "<redacted>");
    }
  EXPECT_TRUE(seen);
  EXPECT_EQ(env::to_json_string(r).find("hunter2"), std::string::npos);
  EXPECT_EQ(r.env.suspicious, (std::vector<std::string>{"CUDA_LAUNCH_BLOCKING"}));
}

TEST(Probe, MissingTorchIsReported) {
  env::TorchInfo t = env::probe_torch("/nonexistent/torch");
  EXPECT_FALSE(t.found);
  EXPECT_NE(t.error.find("libtorch_cpu.so"), std::string::npos);
}

TEST(Probe, CvdEmptyIsSeenAsSetButEmpty) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  env::EnvReport r = env::probe();
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_TRUE(r.env.cuda_visible_devices_set);
  EXPECT_EQ(r.env.cuda_visible_devices, "");
}
