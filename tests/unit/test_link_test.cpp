// Preflight's pairwise link test: the pairs, the median, and one real measurement over loopback.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <trainbox/env/link_test.h>

using namespace trainbox;

namespace {
env::LinkMeasurement link(int a, int b, double gbps, std::string error = {}) {
  env::LinkMeasurement m;
  m.node_a = a;
  m.node_b = b;
  m.host_a = "n" + std::to_string(a + 1);
  m.host_b = "n" + std::to_string(b + 1);
  m.gbytes_per_s = gbps;
  m.latency_us = 20;
  m.error = std::move(error);
  return m;
}
}  // namespace

TEST(LinkTest, PairsAreAllPairsForSmallJobsRingNeighboursBeyond) {
  EXPECT_TRUE(env::link_pairs(1).empty());
  EXPECT_EQ(env::link_pairs(2), (std::vector<std::pair<int, int>>{{0, 1}}));
  EXPECT_EQ(env::link_pairs(4).size(), 6u);
  EXPECT_EQ(env::link_pairs(8).size(), 28u);
  const auto ring = env::link_pairs(10);
  EXPECT_EQ(ring.size(), 10u);
  EXPECT_EQ(ring.front(), (std::pair<int, int>{0, 1}));
  EXPECT_EQ(ring.back(), (std::pair<int, int>{8, 9}));
  EXPECT_NE(std::find(ring.begin(), ring.end(), std::pair<int, int>{0, 9}), ring.end());  // the ring closes
}

// The verdict (slow nodes, slow links) is env/preflight.h's judge_links: tests/unit/test_preflight.cpp.
TEST(LinkTest, MedianOfTheMeasuredLinks) {
  const std::vector<env::LinkMeasurement> links = {link(0, 1, 1.0),  link(0, 2, 1.1),  link(0, 3, 0.9),
                                                   link(1, 2, 1.05), link(1, 3, 0.95), link(2, 3, 0.09)};
  EXPECT_DOUBLE_EQ(env::median_link_bandwidth(links), 0.975);
  EXPECT_DOUBLE_EQ(env::median_link_bandwidth({link(0, 1, 1), link(0, 2, 3), link(1, 2, -1, "no answer")}), 2);
  EXPECT_LT(env::median_link_bandwidth({link(0, 1, -1, "no answer")}), 0);
}

TEST(LinkTest, JsonRoundTrip) {
  const auto m = link(1, 2, 0.5, "x");
  const auto back = nlohmann::json(m).get<env::LinkMeasurement>();
  EXPECT_EQ(back.host_b, "n3");
  EXPECT_EQ(back.gbytes_per_s, 0.5);
  EXPECT_EQ(back.error, "x");
}

TEST(LinkTest, MeasuresLoopbackAndReportsAClosedPort) {
  env::LinkTestOptions o;
  o.window_s = 0.1;
  o.pings = 5;
  int port = -1;
  env::LinkMeasurement m;
  {
    env::LinkServer s;
    port = s.start();
    ASSERT_GT(port, 0) << s.error();
    s.serve(1, 10.0);
    m = env::measure_link("127.0.0.1", port, o);
  }  // the server closes its port
  EXPECT_TRUE(m.error.empty()) << m.error;
  EXPECT_GT(m.gbytes_per_s, 0);
  EXPECT_GT(m.latency_us, 0);
  // Nobody listens any more: a reason, not a hang or a throw.
  o.timeout_s = 2;
  const auto closed = env::measure_link("127.0.0.1", port, o);
  EXPECT_FALSE(closed.error.empty());
  EXPECT_LT(closed.gbytes_per_s, 0);
}
