// trainbox/env/preflight.h — the facts each node of a multi-node job must agree on, the
// comparison that names the nodes that differ, and the verdict on the measured links that names
// slow nodes and slow links. Torch-free and pure apart from collect_node_facts (which reads the
// machine through probe()); `trainbox preflight` (distributed/preflight.h) gathers one NodeFacts per
// node and one LinkMeasurement per pair over the job's store and prints compare_nodes() and
// judge_links() on rank 0.
//
//   NodeFacts f = collect_node_facts(env.master_addr);        // this machine
//   for (auto& e : compare_nodes({f0, f1}).errors) puts(e.c_str());  // "torch differs between nodes: …"
//   for (auto& w : judge_links(links).lines()) puts(w.c_str());       // "slow node: node 2 (n3): …"
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <trainbox/env/link_test.h>

namespace trainbox::env {

struct EnvReport;

struct NodeFacts {
  int node_rank = 0;
  std::string host;
  std::string torch, cuda_runtime, nccl;       // the torch build's versions ("" = none: CPU-only build)
  std::string driver;                          // NVIDIA driver ("" = none)
  std::string gpu_model;                       // first GPU's name ("" = no GPU)
  int gpu_count = 0;                           // GPUs CUDA can use (after CUDA_VISIBLE_DEVICES)
  std::int64_t shm_bytes = -1;                 // /dev/shm size
  std::vector<std::string> interfaces;         // "eth0 198.18.0.2", up, non-loopback
  std::string route_interface, route_address;  // toward MASTER_ADDR (util/net.h route_to)
  // The fabric (env/fabric.h): active RDMA ports ("mlx5_0:1 InfiniBand 400 Gb/s ib0"), and the
  // doctor's fabric findings (diagnose.h is_fabric_finding) as "id: message" — the likely cause
  // when NCCL fell back to sockets.
  std::vector<std::string> rdma_ports;
  std::vector<std::string> fabric_findings;
  // What NCCL chose in the smoke allreduce (env/nccl_log.h): "NET/IB", "NET/Socket", "P2P/SHM",
  // "" (not NCCL, or not seen); gdr 1/0/-1; the one-line summary.
  std::string transport, transport_summary;
  int gdr = -1;
};

void to_json(nlohmann::json& j, const NodeFacts& f);
void from_json(const nlohmann::json& j, NodeFacts& f);

// This machine's facts. TRAINBOX_PREFLIGHT_FAKE_TORCH=VERSION replaces the torch version: a
// test hook, so a test can play a node with another torch without a second venv.
NodeFacts collect_node_facts(const std::string& master_addr);

// The fabric half of a node's facts from its report (collect_node_facts passes probe()'s): every
// ACTIVE RDMA port as "mlx5_0:1 InfiniBand 400 Gb/s ib0" (an Ethernet link layer reads "RoCE", an
// unknown rate "?", no netdev: nothing), and the doctor's fabric findings as "id: message". Pure:
// the unit tests pass reports probed from fixture trees (tests/fixtures/fabric/).
void add_fabric_facts(const EnvReport& r, NodeFacts& f);

// A node whose NCCL fell back to TCP sockets while it has active RDMA ports: one error line naming
// the node, its ports and the likely cause (its fabric findings), or "" when the node is fine.
std::string socket_fallback_error(const NodeFacts& f);

// errors: one per fact that differs between nodes, naming every node and its value, e.g.
// "torch differs between nodes: node 0 (n1) 2.11.0+cu130; node 1 (n2) 2.10.0" — torch, CUDA
// runtime, NCCL, driver, GPU model and GPU count — then one per node that fell back to sockets
// next to active RDMA ports (socket_fallback_error; also in node_problems, by node rank).
// warnings: facts that are fine to run with but worth knowing (/dev/shm under 1 GiB on a node).
// Both empty: the nodes agree. Any error fails `trainbox preflight` (exit 1).
struct NodeComparison {
  std::vector<std::string> errors, warnings;
  std::map<int, std::vector<std::string>> node_problems;
};
NodeComparison compare_nodes(const std::vector<NodeFacts>& nodes);

// --- the links: which node, which link is slow ---
// The rule (docs/distributed.md, "Slow links"). Each node's rate is the best of its measured
// links: a degraded NIC, cable or port on a node slows every link it is in, while a bad path
// between two nodes slows one. The reference is the expected rate when one is given, else the
// median over nodes of those per-node bests ("the typical node's best link"): with one slow
// host among three, two of the three nodes still have a fast link, so the reference stays fast —
// the median of the *links* would be the slow rate, since that host is in two of the three.
//   - slow node: its best link is under reference / factor (so every link it is in is slow),
//     measured on 2 links or more (one link alone cannot tell the node from the path);
//   - slow link: under reference / factor, with neither end a slow node (those links are the
//     node's finding, not one line each).
// With one link (two nodes) and no expected rate both nodes' best is that link: nothing to
// compare, nothing named. When half the nodes or more are slow the typical best is slow too:
// only an expected rate finds them. Failed links (error set) are not rates: the caller reports
// them. Pure: `links` is the measured pair matrix, one entry per pair of link_pairs().
struct LinkJudgeOptions {
  double factor = 5;                 // 5x: far outside TCP's run-to-run noise (+-20 % on a shared box)
  double expected_gbytes_per_s = 0;  // > 0: the reference rate (trainbox preflight --link-rate)
};
struct SlowNode {
  int node = -1;
  std::string host;
  double best_gbytes_per_s = -1;  // the fastest of its links
  int links = 0;                  // its measured links
};
struct LinkVerdict {
  double reference_gbytes_per_s = -1;  // -1: no link measured
  bool expected = false;               // the reference is the expected rate, not a measured one
  double factor = 5;
  std::vector<SlowNode> slow_nodes;             // in node order
  std::vector<LinkMeasurement> slow_links;      // in the input's order
  std::vector<std::string> node_lines() const;  // one per slow node: host, rate, reference
  std::vector<std::string> link_lines() const;  // one per slow link: both hosts, rate, reference
  std::vector<std::string> lines() const;       // node_lines() then link_lines(), "slow node: "/"slow link: "
  std::string reference_text() const;           // "the typical node's best link (1.02 GB/s)"
};
LinkVerdict judge_links(const std::vector<LinkMeasurement>& links, const LinkJudgeOptions& o = {});

}  // namespace trainbox::env
