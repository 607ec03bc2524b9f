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

}  // namespace trainbox::env
