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

TEST(Entrypoint, ImageDescribesItselfInTheBanner) {
  auto r = test::fixture("healthy-h200.json");
  auto p = env::plan_entrypoint(r, env::diagnose(r), "trainbox on nvidia/cuda:13.0.2-base-ubuntu24.04");
  ASSERT_GE(p.banner.size(), 2u);
  EXPECT_EQ(p.banner[1], "image: trainbox on nvidia/cuda:13.0.2-base-ubuntu24.04");
  EXPECT_FALSE(mentions(plan(r).banner, "image: "));  // outside an image: no such line
}

TEST(Entrypoint, TrainboxCommandsRunThroughTrainboxUnlessOnPath) {
  const std::string exe = "/opt/trainbox/bin/trainbox";
  auto nothing_on_path = [](const std::string&) { return false; };
  using V = std::vector<std::string>;
  EXPECT_EQ(env::resolve_entrypoint_command({"doctor", "--json"}, exe, nothing_on_path), (V{exe, "doctor", "--json"}));
  EXPECT_EQ(env::resolve_entrypoint_command({"train", "cfg.toml"}, exe, nothing_on_path),
            (V{exe, "train", "cfg.toml"}));
  // Anything else, a path, or a program of that name on PATH runs as given.
  EXPECT_EQ(env::resolve_entrypoint_command({"bash"}, exe, nothing_on_path), (V{"bash"}));
  EXPECT_EQ(env::resolve_entrypoint_command({"./doctor"}, exe, nothing_on_path), (V{"./doctor"}));
  EXPECT_EQ(env::resolve_entrypoint_command({"run", "x"}, exe, [](const std::string& w) { return w == "run"; }),
            (V{"run", "x"}));
  EXPECT_EQ(env::resolve_entrypoint_command({"trainbox", "doctor"}, exe, nothing_on_path), (V{"trainbox", "doctor"}));
  EXPECT_TRUE(env::resolve_entrypoint_command({}, exe, nothing_on_path).empty());
}

TEST(Entrypoint, GpuArchMissingFromTheBuildIsAnErrorThatStillStarts) {
  auto p = plan(test::fixture("sm61-cu128.json"));
  EXPECT_TRUE(mentions(p.notices, "error: ")) << ::testing::PrintToString(p.notices);
  EXPECT_TRUE(mentions(p.notices, "[gpu-arch-not-in-build]"));
  EXPECT_TRUE(mentions(p.notices, "  fix: "));
  // The plan has no way to stop start-up: the caller always execs the command.
}
