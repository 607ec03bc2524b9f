// configure_process(): what it sets, what it leaves to the user, and nothing when asked for nothing.
// Each test runs in a process of its own (gtest_discover_tests), so the variables set here stay here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <trainbox/train/process_setup.h>
#include <trainbox/util/net.h>

using namespace trainbox;

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}
// A job on one machine: the worker environment of a launcher with a loopback master.
void clear() {
  for (const char* v : {"CUBLAS_WORKSPACE_CONFIG", "TORCH_NCCL_BLOCKING_WAIT", "NCCL_SOCKET_IFNAME", "RANK",
                        "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TRAINBOX_MALLOC", "MALLOC_MMAP_THRESHOLD_",
                        "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"})
    unsetenv(v);
}
}  // namespace

TEST(ProcessSetup, AJobsConfigAsksForCublasDeterminism) {
  train::Config c;
  EXPECT_FALSE(train::process_setup_for(c).deterministic_cublas);
  c.train.deterministic = true;
  const auto o = train::process_setup_for(c);
  EXPECT_TRUE(o.deterministic_cublas);
  EXPECT_TRUE(o.keep_large_allocations && o.nccl_blocking_wait && o.nccl_socket_interface);
}

TEST(ProcessSetup, ZeroStagesTwoAndThreeMapLargeAllocations) {
  // Stages 2 and 3 free gradient buckets (and units) every step: their memory should leave
  // the process; other jobs keep large blocks in the heap, where reuse costs no page faults.
  train::Config c;
  for (std::int64_t stage : {0, 1, 2, 3}) {
    c.dist.zero_stage = stage;
    EXPECT_EQ(train::process_setup_for(c).map_large_allocations, stage >= 2) << "stage " << stage;
  }
  clear();
  train::ProcessSetupOptions o;
  o.map_large_allocations = true;
  const auto done = train::configure_process(o);
  EXPECT_TRUE(done.large_allocations_kept && done.large_allocations_mapped);
  ASSERT_FALSE(done.describe().empty());
  EXPECT_NE(done.describe()[0].find("2 MiB"), std::string::npos) << done.describe()[0];
}

TEST(ProcessSetup, SetsWhatItSaysAndReportsIt) {
  clear();
  train::ProcessSetupOptions o;
  o.deterministic_cublas = true;
  const auto done = train::configure_process(o);
  EXPECT_TRUE(done.large_allocations_kept);
  EXPECT_EQ(env("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");
  EXPECT_EQ(env("TORCH_NCCL_BLOCKING_WAIT"), "1");
  EXPECT_EQ(env("NCCL_SOCKET_IFNAME"), "<unset>");  // a single process: no master to route to
  ASSERT_EQ(done.environment.size(), 2u);
  EXPECT_EQ(done.environment[0], (std::pair<std::string, std::string>{"CUBLAS_WORKSPACE_CONFIG", ":4096:8"}));
  EXPECT_EQ(done.environment[1], (std::pair<std::string, std::string>{"TORCH_NCCL_BLOCKING_WAIT", "1"}));
  const auto lines = done.describe();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1], "set CUBLAS_WORKSPACE_CONFIG=:4096:8");
}

TEST(ProcessSetup, TheUsersOwnSettingsWin) {
  clear();
  setenv("TORCH_NCCL_BLOCKING_WAIT", "0", 1);
  setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  setenv("TRAINBOX_MALLOC", "default", 1);
  setenv("NCCL_SOCKET_IFNAME", "^docker", 1);
  train::ProcessSetupOptions o;
  o.deterministic_cublas = true;
  const auto done = train::configure_process(o);
  EXPECT_FALSE(done.large_allocations_kept);
  EXPECT_TRUE(done.environment.empty());
  EXPECT_EQ(env("TORCH_NCCL_BLOCKING_WAIT"), "0");
  EXPECT_EQ(env("CUBLAS_WORKSPACE_CONFIG"), ":16:8");
  EXPECT_EQ(env("NCCL_SOCKET_IFNAME"), "^docker");
  EXPECT_EQ(done.left_alone.size(), 4u);
  EXPECT_TRUE(done.describe().empty());
}

TEST(ProcessSetup, NothingAskedNothingDone) {
  clear();
  const auto done = train::configure_process({.keep_large_allocations = false,
                                              .deterministic_cublas = false,
                                              .nccl_blocking_wait = false,
                                              .nccl_socket_interface = false});
  EXPECT_FALSE(done.large_allocations_kept);
  EXPECT_TRUE(done.environment.empty());
  EXPECT_EQ(env("TORCH_NCCL_BLOCKING_WAIT"), "<unset>");
  EXPECT_EQ(env("CUBLAS_WORKSPACE_CONFIG"), "<unset>");
}

// Under a launcher whose master is another machine: NCCL pinned to exactly the interface that
// routes there (the same choice Gloo gets through its device options).
TEST(ProcessSetup, NcclGetsTheInterfaceThatRoutesToTheMaster) {
  clear();
  const char* master = "192.0.2.1";  // TEST-NET-1: routed by the default route, never answered
  const auto route = route_to(master);
  if (!route || route->interface.empty()) GTEST_SKIP() << "this machine has no route to " << master;
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", master, 1);
  setenv("MASTER_PORT", "29500", 1);
  const auto done = train::configure_process({.keep_large_allocations = false, .nccl_blocking_wait = false});
  EXPECT_EQ(env("NCCL_SOCKET_IFNAME"), "=" + route->interface);
  ASSERT_EQ(done.environment.size(), 1u);
  EXPECT_EQ(done.environment[0].first, "NCCL_SOCKET_IFNAME");
}
