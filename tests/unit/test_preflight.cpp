// Multi-node preflight: the comparison names every node and value that differ, stays quiet
// when nodes agree, and the facts survive their JSON trip through the store.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <trainbox/env/preflight.h>

using trainbox::env::compare_nodes;
using trainbox::env::NodeFacts;

namespace {
NodeFacts node(int rank, const std::string& host, const std::string& torch) {
  NodeFacts f;
  f.node_rank = rank;
  f.host = host;
  f.torch = torch;
  f.cuda_runtime = "13.0";
  f.nccl = "2.27.7";
  f.driver = "580.65.06";
  f.gpu_model = "NVIDIA H200";
  f.gpu_count = 8;
  f.shm_bytes = 64LL << 30;
  return f;
}
}  // namespace

TEST(Preflight, AgreeingNodesGiveNothing) {
  auto c = compare_nodes({node(0, "n1", "2.11.0+cu130"), node(1, "n2", "2.11.0+cu130")});
  EXPECT_TRUE(c.errors.empty());
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Preflight, TorchMismatchNamesBothNodesAndValues) {
  auto c = compare_nodes({node(0, "n1", "2.11.0+cu130"), node(1, "n2", "2.10.0+cu128"), node(2, "n3", "2.11.0+cu130")});
  ASSERT_EQ(c.errors.size(), 1u);
  const std::string& e = c.errors[0];
  EXPECT_NE(e.find("torch differs between nodes"), std::string::npos) << e;
  EXPECT_NE(e.find("node 0 (n1), node 2 (n3) 2.11.0+cu130"), std::string::npos) << e;
  EXPECT_NE(e.find("node 1 (n2) 2.10.0+cu128"), std::string::npos) << e;
}

TEST(Preflight, GpuCountAndDriverMismatchesAreSeparateErrors) {
  auto a = node(0, "n1", "2.11.0"), b = node(1, "n2", "2.11.0");
  b.gpu_count = 4;
  b.driver = "";
  auto c = compare_nodes({a, b});
  ASSERT_EQ(c.errors.size(), 2u);
  EXPECT_NE(c.errors[0].find("the NVIDIA driver differs"), std::string::npos) << c.errors[0];
  EXPECT_NE(c.errors[0].find("node 1 (n2) (none)"), std::string::npos) << c.errors[0];
  EXPECT_NE(c.errors[1].find("the GPU count differs"), std::string::npos) << c.errors[1];
}

TEST(Preflight, SmallShmIsAWarningNotAnError) {
  auto a = node(0, "n1", "2.11.0"), b = node(1, "n2", "2.11.0");
  b.shm_bytes = 64LL << 20;
  auto c = compare_nodes({a, b});
  EXPECT_TRUE(c.errors.empty());
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("node 1 (n2) has only 64.0 MiB of /dev/shm"), std::string::npos) << c.warnings[0];
}

TEST(Preflight, FactsRoundTripThroughJson) {
  auto a = node(3, "n4", "2.11.0");
  a.interfaces = {"eth0 198.18.0.4"};
  a.route_interface = "eth0";
  nlohmann::json j = a;
  auto b = j.get<NodeFacts>();
  EXPECT_EQ(b.host, "n4");
  EXPECT_EQ(b.node_rank, 3);
  EXPECT_EQ(b.interfaces, a.interfaces);
  EXPECT_EQ(b.route_interface, "eth0");
}
