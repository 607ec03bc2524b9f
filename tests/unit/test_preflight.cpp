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

// --- the link verdict: slow nodes and slow links from synthetic pair matrices ---
namespace {
using trainbox::env::judge_links;
using trainbox::env::LinkMeasurement;

// The pair matrix of `nodes` nodes (link_pairs(): all pairs up to 8, a ring beyond), host i+1
// named n<i+1>, each link's rate from rate(a, b).
template <class Rate>
std::vector<LinkMeasurement> matrix(int nodes, Rate rate) {
  std::vector<LinkMeasurement> out;
  for (const auto& [a, b] : trainbox::env::link_pairs(nodes)) {
    LinkMeasurement m;
    m.node_a = a;
    m.node_b = b;
    m.host_a = "n" + std::to_string(a + 1);
    m.host_b = "n" + std::to_string(b + 1);
    m.gbytes_per_s = rate(a, b);
    m.latency_us = 30;
    out.push_back(m);
  }
  return out;
}
// Every link at `fast`, except those that touch node `slow` (at `slow_rate`).
auto slow_host(int slow, double fast, double slow_rate) {
  return [=](int a, int b) { return a == slow || b == slow ? slow_rate : fast; };
}
std::vector<int> slow_node_ids(const trainbox::env::LinkVerdict& v) {
  std::vector<int> ids;
  for (const auto& n : v.slow_nodes) ids.push_back(n.node);
  return ids;
}
}  // namespace

TEST(PreflightLinks, ThreeHostsOneSlowHostIsNamedAsTheNode) {
  // The case: 40 Mbit/s on one host of three. The median *link* is the slow rate.
  const auto links = matrix(3, slow_host(2, 1.13, 0.00497));
  EXPECT_DOUBLE_EQ(trainbox::env::median_link_bandwidth(links), 0.00497);
  const auto v = judge_links(links);
  EXPECT_DOUBLE_EQ(v.reference_gbytes_per_s, 1.13);
  EXPECT_EQ(slow_node_ids(v), std::vector<int>{2});
  EXPECT_TRUE(v.slow_links.empty());  // its two links are the node's finding, not two more lines
  ASSERT_EQ(v.lines().size(), 1u);
  EXPECT_EQ(v.lines()[0],
            "slow node: node 2 (n3): at most 0.00497 GB/s on each of its 2 links, 227\u00d7 slower than the typical "
            "node's best link (1.13 GB/s): a slow NIC, cable or switch port on n3");
}

TEST(PreflightLinks, FourHostsOneSlowLinkIsNamedAsTheLink) {
  const auto links = matrix(4, [](int a, int b) { return a == 2 && b == 3 ? 0.09 : 1.0 + 0.02 * (a + b); });
  const auto v = judge_links(links);
  EXPECT_TRUE(v.slow_nodes.empty());  // nodes 2 and 3 are fast on their other links
  ASSERT_EQ(v.slow_links.size(), 1u);
  EXPECT_EQ(v.slow_links[0].node_a, 2);
  EXPECT_EQ(v.slow_links[0].node_b, 3);
  ASSERT_EQ(v.lines().size(), 1u);
  EXPECT_EQ(v.lines()[0],
            "slow link: node 2 (n3) \u2194 node 3 (n4): 0.09 GB/s, 12\u00d7 slower than the typical node's best link "
            "(1.07 GB/s)");
}

TEST(PreflightLinks, EightHostsOneSlowHostIsNamedAndNoLink) {
  const auto v = judge_links(matrix(8, slow_host(5, 1.0, 0.01)));
  EXPECT_EQ(slow_node_ids(v), std::vector<int>{5});
  EXPECT_EQ(v.slow_nodes[0].links, 7);
  EXPECT_EQ(v.slow_nodes[0].host, "n6");
  EXPECT_TRUE(v.slow_links.empty());
}

TEST(PreflightLinks, TwoSlowHostsOfFourAreBothNamed) {
  const auto v = judge_links(matrix(4, [](int a, int b) { return a >= 2 || b >= 2 ? 0.005 : 1.0; }));
  EXPECT_EQ(slow_node_ids(v), (std::vector<int>{2, 3}));
  EXPECT_TRUE(v.slow_links.empty());
}

TEST(PreflightLinks, ARingOfTenNamesItsSlowHost) {  // beyond 8 nodes only ring neighbours are measured
  const auto v = judge_links(matrix(10, slow_host(4, 1.0, 0.01)));
  EXPECT_EQ(slow_node_ids(v), std::vector<int>{4});
  EXPECT_TRUE(v.slow_links.empty());
}

TEST(PreflightLinks, EqualLinksNameNothing) {
  for (int n : {2, 3, 4, 8, 10}) {
    const auto v = judge_links(matrix(n, [](int, int) { return 1.17; }));
    EXPECT_TRUE(v.lines().empty()) << n << " hosts";
  }
}

TEST(PreflightLinks, NoiseOfTwentyPercentNamesNothing) {
  // Extremes: every link at -20 % or +20 %, in every pattern a small seed walks through.
  for (int n : {3, 4, 8}) {
    for (unsigned seed = 0; seed < 200; ++seed) {
      const auto links = matrix(n, [seed](int a, int b) {
        const unsigned h = (seed * 2654435761u) ^ static_cast<unsigned>(a * 31 + b * 17);
        return 1.0 + 0.2 * (((h >> 3) % 3) - 1.0);  // 0.8, 1.0 or 1.2
      });
      EXPECT_TRUE(judge_links(links).lines().empty()) << n << " hosts, seed " << seed;
    }
  }
  // ... and a slow host under that noise is still named.
  const auto noisy = matrix(8, [](int a, int b) { return a == 1 || b == 1 ? 0.02 : ((a + b) % 2 ? 0.8 : 1.2); });
  EXPECT_EQ(slow_node_ids(judge_links(noisy)), std::vector<int>{1});
}

TEST(PreflightLinks, FailedLinksAreNotRatesAndOneLinkCannotBlameANode) {
  // Node 2's link to node 0 failed: its one measured link is slow, which blames the link, not the node.
  auto links = matrix(3, slow_host(2, 1.0, 0.005));
  links[1].gbytes_per_s = -1;  // (0, 2)
  links[1].error = "no answer";
  const auto v = judge_links(links);
  EXPECT_TRUE(v.slow_nodes.empty());
  ASSERT_EQ(v.slow_links.size(), 1u);
  EXPECT_EQ(v.slow_links[0].node_a, 1);
  // Nothing measured: no reference, nothing named.
  for (auto& l : links) l.error = "no answer";
  EXPECT_LT(judge_links(links).reference_gbytes_per_s, 0);
  EXPECT_TRUE(judge_links(links).lines().empty());
}

TEST(PreflightLinks, AnExpectedRateJudgesTwoNodesAndAllSlowJobs) {
  // Two nodes: one link, its own reference, nothing named; against the expected rate it is named.
  const auto two = matrix(2, [](int, int) { return 0.05; });
  EXPECT_TRUE(judge_links(two).lines().empty());
  trainbox::env::LinkJudgeOptions o;
  o.expected_gbytes_per_s = 1.0;
  const auto v = judge_links(two, o);
  ASSERT_EQ(v.slow_links.size(), 1u);
  EXPECT_EQ(v.link_lines()[0],
            "node 0 (n1) \u2194 node 1 (n2): 0.05 GB/s, 20\u00d7 slower than the expected rate (1 GB/s)");
  // Every link equally slow: only the expected rate sees it, and names every node.
  const auto all_slow = matrix(4, [](int, int) { return 0.05; });
  EXPECT_TRUE(judge_links(all_slow).lines().empty());
  EXPECT_EQ(slow_node_ids(judge_links(all_slow, o)), (std::vector<int>{0, 1, 2, 3}));
}
