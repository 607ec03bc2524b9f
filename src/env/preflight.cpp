#include <trainbox/env/preflight.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/env/diagnose.h>
#include <trainbox/env/probe.h>
#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>

#include "json_fields.h"

namespace trainbox::env {

TRAINBOX_JSON_FIELDS(NodeFacts, node_rank, host, torch, cuda_runtime, nccl, driver, gpu_model, gpu_count, shm_bytes,
                     interfaces, route_interface, route_address, rdma_ports, fabric_findings, transport,
                     transport_summary, gdr)

std::string socket_fallback_error(const NodeFacts& f) {
  if (f.transport != "NET/Socket" || f.rdma_ports.empty()) return {};
  std::string cause = f.fabric_findings.empty()
                          ? std::string(
                                "the doctor finds nothing wrong with the fabric: check NCCL's log (NCCL_DEBUG=INFO "
                                "NCCL_DEBUG_SUBSYS=INIT,NET) for \"NET/IB\" lines")
                          : fmt::format("likely cause: {}", fmt::join(f.fabric_findings, "; "));
  return fmt::format("node {} ({}) fell back to TCP sockets (NCCL NET/Socket) although {} RDMA port{} active ({}); {}",
                     f.node_rank, f.host, f.rdma_ports.size(), f.rdma_ports.size() == 1 ? " is" : "s are",
                     fmt::join(f.rdma_ports, ", "), cause);
}

namespace {

std::vector<std::string> up_interfaces() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    const int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    char buf[NI_MAXHOST] = {};
    const socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(i->ifa_addr, len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) == 0)
      out.push_back(std::string(i->ifa_name) + " " + buf);
  }
  freeifaddrs(ifs);
  return out;
}

}  // namespace

void add_fabric_facts(const EnvReport& r, NodeFacts& f) {
  for (const auto& h : r.fabric.hcas)
    for (const auto& p : h.ports)
      if (p.state == "ACTIVE")
        f.rdma_ports.push_back(fmt::format("{}:{} {} {}{}", h.name, p.port,
                                           p.link_layer == "Ethernet" ? "RoCE" : p.link_layer,
                                           p.rate_gbps > 0 ? fmt::format("{:g} Gb/s", p.rate_gbps) : std::string("?"),
                                           p.netdev.empty() ? "" : " " + p.netdev));
  for (const auto& finding : diagnose(r))
    if (is_fabric_finding(finding.id)) f.fabric_findings.push_back(finding.id + ": " + finding.message);
}

NodeFacts collect_node_facts(const std::string& master_addr) {
  ProbeOptions po;
  po.gpu_processes = false;
  const EnvReport r = probe(po);
  NodeFacts f;
  f.host = r.host.hostname;
  f.torch = r.torch.version;
  if (const char* fake = std::getenv("TRAINBOX_PREFLIGHT_FAKE_TORCH"); fake && *fake) f.torch = fake;
  f.cuda_runtime = r.torch.cuda_version;
  f.nccl = r.torch.nccl_version;
  f.driver = r.driver.driver_version;
  f.gpu_count = std::max(0, r.driver.cuda_device_count);
  if (!r.gpus.empty()) f.gpu_model = r.gpus.front().name;
  f.shm_bytes = r.host.shm_bytes;
  add_fabric_facts(r, f);
  f.interfaces = up_interfaces();
  if (auto route = route_to(master_addr)) {
    f.route_interface = route->interface;
    f.route_address = route->address;
  }
  return f;
}

NodeComparison compare_nodes(const std::vector<NodeFacts>& nodes) {
  NodeComparison out;
  auto& errors = out.errors;
  auto name = [](const NodeFacts& f) { return fmt::format("node {} ({})", f.node_rank, f.host); };
  using Get = std::function<std::string(const NodeFacts&)>;
  const std::vector<std::pair<std::string, Get>> facts = {
      {"torch", [](const NodeFacts& f) { return f.torch; }},
      {"torch's CUDA runtime", [](const NodeFacts& f) { return f.cuda_runtime; }},
      {"torch's NCCL", [](const NodeFacts& f) { return f.nccl; }},
      {"the NVIDIA driver", [](const NodeFacts& f) { return f.driver; }},
      {"the GPU model", [](const NodeFacts& f) { return f.gpu_model; }},
      {"the GPU count", [](const NodeFacts& f) { return std::to_string(f.gpu_count); }},
  };
  for (const auto& [what, get] : facts) {
    std::map<std::string, std::vector<const NodeFacts*>> by_value;
    for (const auto& n : nodes) by_value[get(n)].push_back(&n);
    if (by_value.size() <= 1) continue;
    std::string parts;
    for (const auto& [value, ns] : by_value) {
      std::string who;
      for (const auto* n : ns) who += (who.empty() ? "" : ", ") + name(*n);
      parts += fmt::format("{}{} {}", parts.empty() ? "" : "; ", who, value.empty() ? "(none)" : value);
    }
    errors.push_back(fmt::format("{} differs between nodes: {}", what, parts));
  }
  for (const auto& n : nodes)
    if (auto e = socket_fallback_error(n); !e.empty()) {
      errors.push_back(e);
      out.node_problems[n.node_rank].push_back(e);
    }
  for (const auto& n : nodes)
    if (n.shm_bytes >= 0 && n.shm_bytes < (std::int64_t(1) << 30))
      out.warnings.push_back(
          fmt::format("{} has only {} of /dev/shm (NCCL and data-loading workers want more: "
                      "docker run --ipc=host or --shm-size=8g)",
                      name(n), human_bytes(static_cast<std::uint64_t>(n.shm_bytes))));
  return out;
}

// --- the links (the rule is in the header) ---
LinkVerdict judge_links(const std::vector<LinkMeasurement>& links, const LinkJudgeOptions& o) {
  LinkVerdict v;
  v.factor = o.factor;
  auto measured = [](const LinkMeasurement& l) { return l.error.empty() && l.gbytes_per_s > 0; };
  struct Node {
    std::string host;
    double best = -1;
    int links = 0;
  };
  std::map<int, Node> nodes;
  for (const auto& l : links) {
    for (const auto& [n, h] : {std::pair{l.node_a, &l.host_a}, std::pair{l.node_b, &l.host_b}}) {
      Node& node = nodes[n];
      if (node.host.empty()) node.host = *h;
      if (!measured(l)) continue;
      node.best = std::max(node.best, l.gbytes_per_s);
      ++node.links;
    }
  }
  // --- the reference: expected, or the median of the per-node bests ---
  if (o.expected_gbytes_per_s > 0) {
    v.reference_gbytes_per_s = o.expected_gbytes_per_s;
    v.expected = true;
  } else {
    std::vector<double> bests;
    for (const auto& [_, n] : nodes)
      if (n.links > 0) bests.push_back(n.best);
    if (bests.empty()) return v;  // nothing measured
    std::sort(bests.begin(), bests.end());
    const std::size_t k = bests.size();
    v.reference_gbytes_per_s = k % 2 ? bests[k / 2] : (bests[k / 2 - 1] + bests[k / 2]) / 2;
  }
  const double cutoff = v.reference_gbytes_per_s / o.factor;
  std::map<int, bool> slow;
  for (const auto& [id, n] : nodes)
    if (n.links >= 2 && n.best < cutoff) {
      v.slow_nodes.push_back({id, n.host, n.best, n.links});
      slow[id] = true;
    }
  for (const auto& l : links)
    if (measured(l) && l.gbytes_per_s < cutoff && !slow[l.node_a] && !slow[l.node_b]) v.slow_links.push_back(l);
  return v;
}

std::string LinkVerdict::reference_text() const {
  if (reference_gbytes_per_s <= 0) return "none (no link measured)";
  return expected ? fmt::format("the expected rate ({:.3g} GB/s)", reference_gbytes_per_s)
                  : fmt::format("the typical node's best link ({:.3g} GB/s)", reference_gbytes_per_s);
}

std::vector<std::string> LinkVerdict::node_lines() const {
  std::vector<std::string> out;
  for (const auto& n : slow_nodes)
    out.push_back(fmt::format(
        "node {} ({}): at most {:.3g} GB/s on each of its {} links, {:.0f}\u00d7 slower than {}: a slow NIC, "
        "cable or switch port on {}",
        n.node, n.host, n.best_gbytes_per_s, n.links, reference_gbytes_per_s / n.best_gbytes_per_s, reference_text(),
        n.host));
  return out;
}

std::vector<std::string> LinkVerdict::link_lines() const {
  std::vector<std::string> out;
  for (const auto& l : slow_links)
    out.push_back(fmt::format("node {} ({}) \u2194 node {} ({}): {:.3g} GB/s, {:.0f}\u00d7 slower than {}", l.node_a,
                              l.host_a, l.node_b, l.host_b, l.gbytes_per_s, reference_gbytes_per_s / l.gbytes_per_s,
                              reference_text()));
  return out;
}

std::vector<std::string> LinkVerdict::lines() const {
  std::vector<std::string> out;
  for (auto& l : node_lines()) out.push_back("slow node: " + l);
  for (auto& l : link_lines()) out.push_back("slow link: " + l);
  return out;
}

}  // namespace trainbox::env
