// trainbox/env/link_test.h — a short, time-bounded bandwidth and latency test between two nodes
// over TCP (the path Gloo and NCCL's socket transport use); the verdict on them (slow nodes, slow
// links) is env/preflight.h's judge_links. Torch-free: `trainbox preflight` runs one LinkServer per node
// and measures each pair from link_pairs() in turn, one at a time, so pairs never share a wire.
//
//   LinkServer s;  int port = s.start();  s.serve(2, 10.0);     // in node B, two sessions
//   LinkMeasurement m = measure_link("198.18.0.2", port, {});  // in node A
//   for (auto& line : judge_links(all).lines()) puts(line.c_str());   // env/preflight.h
//
// Contract: measure_link never blocks longer than options.timeout_s per step (connect, each
// ping, the bulk transfer's acknowledgement) and never throws: failures are in `error`.
#pragma once
#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trainbox::env {

struct LinkTestOptions {
  double window_s = 0.5;  // bulk transfer time: long enough for TCP to leave slow start on a LAN
  int pings = 20;         // 1-byte round trips; the median, halved, is the latency
  double timeout_s = 10;  // per step
};

struct LinkMeasurement {
  int node_a = -1, node_b = -1;  // node ranks (a < b; a measured, b served)
  std::string host_a, host_b;
  double gbytes_per_s = -1;  // payload bytes / time until the receiver acknowledged them (1e9 B/s)
  double latency_us = -1;    // median round trip / 2
  std::string error;         // why there is no number
};
void to_json(nlohmann::json& j, const LinkMeasurement& m);
void from_json(const nlohmann::json& j, LinkMeasurement& m);

// Accepts sessions on a TCP port (all interfaces), one at a time, in a thread of its own.
class LinkServer {
 public:
  LinkServer() = default;
  ~LinkServer();
  LinkServer(const LinkServer&) = delete;
  LinkServer& operator=(const LinkServer&) = delete;
  // Listens on an ephemeral port; returns it (-1 on failure, `error()` says why).
  int start();
  // Serves `sessions` measurements (or until `timeout_s` passes without a new one) in the background.
  void serve(int sessions, double timeout_s);
  // Waits for the serving thread (it ends by itself after `sessions`, or after its timeout).
  void join();
  const std::string& error() const { return error_; }

 private:
  int fd_ = -1;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string error_;
};

LinkMeasurement measure_link(const std::string& host, int port, const LinkTestOptions& o);

// The pairs to measure among `nodes` nodes: all pairs up to 8 nodes (28 links), ring neighbours beyond.
std::vector<std::pair<int, int>> link_pairs(int nodes);

// Links with a bandwidth under median / factor, one line each. Blind to a slow node among three:
// that node is in two of the three links, so the median is its slow rate.
[[deprecated("use env::judge_links (env/preflight.h), which names slow nodes too")]] std::vector<std::string>
slow_link_lines(const std::vector<LinkMeasurement>& links, double factor);
// The median bandwidth of the measured links (-1 with none).
double median_link_bandwidth(const std::vector<LinkMeasurement>& links);

}  // namespace trainbox::env
