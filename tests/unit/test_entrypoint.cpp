// The container entrypoint's decisions, from doctor fixtures: it warns, never blocks.
#include <gtest/gtest.h>

#include "fixtures.h"
#include <trainbox/env/diagnose.h>
#include <trainbox/env/entrypoint.h>

using namespace trainbox;

namespace {
env::EntrypointPlan plan(env::EnvReport r) { return env::plan_entrypoint(r, env::diagnose(r)); }
bool mentions(const std::vector<std::string>& lines, const std::string& what) {
  for (const auto& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST(Entrypoint, NoDriverInAContainerSaysCpuOnlyAndHowToGetGpus) {
  auto r = test::fixture("no-driver.json");
  r.host.container = "docker";
  r.host.nvidia_pci_devices.clear();  // the container sees no GPU at all
  auto p = plan(r);
  EXPECT_TRUE(mentions(p.notices, "CPU only")) << ::testing::PrintToString(p.notices);
  EXPECT_TRUE(mentions(p.notices, "--gpus all"));
  EXPECT_TRUE(mentions(p.banner, "LibTorch 2.11.0+cu130"));
}

TEST(Entrypoint, DockerDefaultShmSuggestsIpcHost) {
  auto p = plan(test::fixture("container-shm64-cvd-empty.json"));
  EXPECT_TRUE(mentions(p.notices, "[shm-too-small]"));
  EXPECT_TRUE(mentions(p.notices, "--ipc=host"));
  EXPECT_TRUE(mentions(p.banner, "/dev/shm: 64.0 MiB"));
  EXPECT_FALSE(mentions(p.notices, "--gpus all"));  // GPUs are there; CUDA_VISIBLE_DEVICES hides them
}

TEST(Entrypoint, OldDriverIsNamedWithTheUpgrade) {
  auto p = plan(test::fixture("driver535-cu128.json"));
  EXPECT_TRUE(mentions(p.notices, "warning: "));
  EXPECT_TRUE(mentions(p.notices, "[driver-too-old-for-runtime]"));
  EXPECT_TRUE(mentions(p.notices, "570.26"));
  EXPECT_TRUE(mentions(p.banner, "NVIDIA driver 535.183.01"));
}

TEST(Entrypoint, HealthyMachineHasABannerAndNoNotices) {
  auto p = plan(test::fixture("healthy-h200.json"));
  EXPECT_TRUE(p.notices.empty()) << ::testing::PrintToString(p.notices);
  EXPECT_TRUE(mentions(p.banner, "GPUs: 1 x NVIDIA H200"));
}
