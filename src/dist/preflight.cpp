#include <trainbox/dist/preflight.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/dist/process_group.h>
#include <trainbox/dist/worker_env.h>
#include <trainbox/env/link_test.h>
#include <trainbox/env/nccl_log.h>
#include <trainbox/env/preflight.h>
#include <trainbox/train/device.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>

namespace trainbox::dist {

namespace {

constexpr const char* kPrefix = "trainbox/preflight/";

std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

std::string node_line(const env::NodeFacts& f) {
  auto or_none = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  return fmt::format("node {}  {:<12} torch {}  CUDA {}  NCCL {}  driver {}  GPUs {}{}  /dev/shm {}  route {} {}",
                     f.node_rank, f.host, or_none(f.torch), or_none(f.cuda_runtime), or_none(f.nccl), or_none(f.driver),
                     f.gpu_count, f.gpu_model.empty() ? "" : " x " + f.gpu_model,
                     f.shm_bytes < 0 ? std::string("missing") : human_bytes(static_cast<std::uint64_t>(f.shm_bytes)),
                     or_none(f.route_interface), f.route_address);
}

std::string node_name(const env::NodeFacts& f) { return fmt::format("node {} ({})", f.node_rank, f.host); }

// Waits for `key` at most `timeout`; false when it never came.
bool wait_key(ProcessGroup& pg, const std::string& key, std::chrono::milliseconds timeout) {
  try {
    pg.store()->wait({key}, timeout);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// --- 5. pairwise links: the first rank of each node serves and measures, one pair at a time ---
// Keys: links/addr/<node> = "host port" (the server), links/result/<k> = LinkMeasurement JSON
// for pair k of link_pairs(); pair k starts when pair k-1 has posted its result.
void run_link_test(ProcessGroup& pg, const WorkerEnv& env, const env::NodeFacts& facts, int nodes,
                   const PreflightOptions& o) {
  const auto pairs = env::link_pairs(nodes);
  if (pairs.empty() || env.local_rank != 0) return;
  const int me = env.node_rank;
  const auto wait = std::chrono::milliseconds(o.timeout.count() * 1000);
  env::LinkServer server;
  const int port = server.start();
  const int sessions =
      static_cast<int>(std::count_if(pairs.begin(), pairs.end(), [&](auto& p) { return p.second == me; }));
  server.serve(sessions, double(o.timeout.count()) * (double(pairs.size()) + 1));
  const std::string host = facts.route_address.empty() ? env.master_addr : facts.route_address;
  pg.store()->set(fmt::format("{}links/addr/{}", kPrefix, me),
                  bytes(port > 0 ? fmt::format("{} {}", host, port) : "- -1"));
  env::LinkTestOptions lo;
  lo.timeout_s = double(o.timeout.count());
  lo.window_s = std::clamp(8.0 / double(pairs.size()), 0.1, 0.5);  // about 10 s for the whole job
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const auto [a, b] = pairs[k];
    if (a != me) continue;
    if (k > 0) wait_key(pg, fmt::format("{}links/result/{}", kPrefix, k - 1), wait * 2);
    env::LinkMeasurement m;
    const std::string addr_key = fmt::format("{}links/addr/{}", kPrefix, b);
    if (!wait_key(pg, addr_key, wait)) {
      m.error = fmt::format("node {} never announced its link-test port within {} s", b, o.timeout.count());
    } else {
      const auto parts = split(text(pg.store()->get(addr_key)), ' ');
      const int bport = parts.size() == 2 ? std::atoi(parts[1].c_str()) : -1;
      if (bport <= 0)
        m.error = fmt::format("node {} could not open a TCP port for the link test", b);
      else
        m = env::measure_link(parts[0], bport, lo);
    }
    m.node_a = a;
    m.node_b = b;
    pg.store()->set(fmt::format("{}links/result/{}", kPrefix, k), bytes(nlohmann::json(m).dump()));
  }
  server.join();
}

}  // namespace

int run_preflight(const PreflightOptions& o, std::FILE* out) {
  WorkerEnv env = WorkerEnv::from_environment();
  if (env.source == WorkerSource::kSingle) env.master_port = 0;  // a world of one checks itself, on a free port
  const double timeout_s = double(o.timeout.count());

  // --- 1. this node's facts ---
  env::NodeFacts facts = env::collect_node_facts(env.master_addr);
  facts.node_rank = env.node_rank;

  // --- 2. can this rank reach the master? (rank 0 hosts the store there) ---
  if (env.rank != 0 && env.master_port > 0) {
    const std::string why = tcp_reach(env.master_addr, env.master_port, timeout_s);
    if (!why.empty())
      throw DistError(fmt::format("node {} ({}) cannot reach {}:{}: {}", env.node_rank, facts.host, env.master_addr,
                                  env.master_port, why),
                      "open that port between the nodes (firewall, security group), or check MASTER_ADDR");
  }

  // --- 3. the job's process group; facts into its store ---
  const torch::Device dev = train::choose_device("auto", env.local_rank, env.local_world_size).device;
  // NCCL reads its debug variables once, at its first call: set them before the process group.
  std::unique_ptr<env::NcclLogCapture> nccl_log;
  if (dev.is_cuda() && o.capture_nccl_log) nccl_log = std::make_unique<env::NcclLogCapture>();
  ProcessGroupOptions po;
  po.timeout = o.timeout;
  auto pg = ProcessGroup::init(env, po, dev);
  nlohmann::json mine = facts;
  mine["rank"] = env.rank;
  pg->store()->set(fmt::format("{}facts/{}", kPrefix, env.rank), bytes(mine.dump()));

  // --- 4. smoke allreduce over every rank: each adds rank+1, everyone expects n(n+1)/2 ---
  std::string verdict = "OK";
  try {
    auto t = torch::full({1 << 16}, double(env.rank + 1), torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    pg->allreduce(t, /*average=*/false);
    const double want = double(env.world_size) * (env.world_size + 1) / 2;
    const double got_min = t.min().item<double>(), got_max = t.max().item<double>();
    if (got_min != want || got_max != want)
      verdict = fmt::format("broken: allreduce gave {}..{}, expected {}", got_min, got_max, want);
  } catch (const std::exception& e) {
    std::string m = e.what();
    verdict = "broken: " + m.substr(0, m.find('\n'));
  }
  pg->store()->set(fmt::format("{}smoke/{}", kPrefix, env.rank), bytes(verdict));

  // --- the transport NCCL chose, from its log ---
  nlohmann::json transport = {{"transport", ""}, {"transport_summary", ""}, {"gdr", -1}};
  if (nccl_log) {
    const env::NcclTransport t = env::parse_nccl_log(nccl_log->text());
    transport["transport"] = env::transport_kind(t);
    transport["gdr"] = env::transport_gdr(t);
    transport["transport_summary"] =
        env.world_size == 1 && env::transport_kind(t).empty()
            ? std::string("one rank: NCCL connects no peer (within a node it would use P2P/SHM, between nodes NET)")
            : env::transport_summary(t);
  } else {
    transport["transport_summary"] = dev.is_cuda() ? "not captured" : std::string("Gloo (CPU): TCP, no NCCL");
  }
  pg->store()->set(fmt::format("{}transport/{}", kPrefix, env.rank), bytes(transport.dump()));

  // --- 5. links between nodes (the first rank of each node) ---
  const int node_count = std::max(1, env.world_size / std::max(1, env.local_world_size));
  if (o.links && env.source != WorkerSource::kSingle) {
    try {
      run_link_test(*pg, env, facts, node_count, o);
    } catch (const std::exception& e) {  // a store error: the links are reported missing by rank 0
      std::fprintf(stderr, "preflight: node %d's link test stopped: %s\n", env.node_rank, e.what());
    }
  }
  if (env.rank != 0) return verdict == "OK" ? kExitOk : kExitFailed;

  // --- rank 0: gather, compare, report ---
  std::map<int, env::NodeFacts> nodes;
  std::vector<std::string> hosts(env.world_size, "?");
  for (int r = 0; r < env.world_size; ++r) {
    const std::string key = fmt::format("{}facts/{}", kPrefix, r);
    nlohmann::json j;
    try {
      pg->store()->wait({key}, o.timeout);
      j = nlohmann::json::parse(text(pg->store()->get(key)));
    } catch (const std::exception& e) {
      throw DistError(fmt::format("rank {} never posted its facts within {} s", r, o.timeout.count()),
                      "look at that rank's log: it stopped after joining the process group");
    }
    env::NodeFacts f = j.get<env::NodeFacts>();
    hosts[r] = f.host;
    if (nodes.count(f.node_rank)) continue;  // the first rank of each node speaks for it
    const std::string tkey = fmt::format("{}transport/{}", kPrefix, r);
    if (wait_key(*pg, tkey, std::chrono::milliseconds(o.timeout.count() * 1000))) {
      const auto t = nlohmann::json::parse(text(pg->store()->get(tkey)), nullptr, false);
      if (t.is_object()) {
        f.transport = t.value("transport", "");
        f.transport_summary = t.value("transport_summary", "");
        f.gdr = t.value("gdr", -1);
      }
    } else {
      f.transport_summary = fmt::format("unknown: rank {} posted no transport within {} s", r, o.timeout.count());
    }
    nodes.emplace(f.node_rank, f);
  }
  std::vector<env::NodeFacts> list;
  for (auto& [_, f] : nodes) list.push_back(f);

  // --- links ---
  std::vector<env::LinkMeasurement> links;
  if (o.links && env.source != WorkerSource::kSingle) {
    const auto pairs = env::link_pairs(static_cast<int>(list.size()));
    for (std::size_t k = 0; k < pairs.size(); ++k) {
      env::LinkMeasurement m;
      const std::string key = fmt::format("{}links/result/{}", kPrefix, k);
      // Pairs run one after another: the last may finish up to (pairs × step) after the first.
      if (wait_key(*pg, key, std::chrono::milliseconds(o.timeout.count() * 1000 * 2))) {
        const auto j = nlohmann::json::parse(text(pg->store()->get(key)), nullptr, false);
        if (j.is_object())
          m = j.get<env::LinkMeasurement>();
        else
          m.error = "unreadable result";
      } else {
        m.error = fmt::format("no result within {} s", o.timeout.count() * 2);
      }
      m.node_a = pairs[k].first;
      m.node_b = pairs[k].second;
      if (nodes.count(m.node_a)) m.host_a = nodes[m.node_a].host;
      if (nodes.count(m.node_b)) m.host_b = nodes[m.node_b].host;
      links.push_back(m);
    }
  }
  const std::vector<std::string> slow = env::slow_link_lines(links, o.slow_link_factor);

  // --- verdicts ---
  const env::NodeComparison cmp = env::compare_nodes(list);
  std::vector<std::string> errors = cmp.errors, warnings = cmp.warnings;
  std::map<int, std::vector<std::string>> node_problems;
  for (const auto& f : list)
    if (auto e = env::socket_fallback_error(f); !e.empty()) {
      errors.push_back(e);
      node_problems[f.node_rank].push_back(e);
    }
  for (const auto& l : links)
    if (!l.error.empty())
      warnings.push_back(fmt::format("link node {} ({}) \u2194 node {} ({}) not measured: {}", l.node_a, l.host_a,
                                     l.node_b, l.host_b, l.error));
  for (const auto& line : slow) warnings.push_back("slow link: " + line);
  std::vector<std::string> rank_verdicts(env.world_size);
  int broken = 0;
  for (int r = 0; r < env.world_size; ++r) {
    std::string v;
    const std::string key = fmt::format("{}smoke/{}", kPrefix, r);
    try {
      pg->store()->wait({key}, o.timeout);
      v = text(pg->store()->get(key));
    } catch (const std::exception&) {
      v = fmt::format("broken: no answer within {} s", o.timeout.count());
    }
    if (v != "OK") ++broken;
    rank_verdicts[r] = v;
  }
  const bool ok = errors.empty() && broken == 0;

  // --- report ---
  if (o.json) {
    nlohmann::json j;
    j["ok"] = ok;
    j["world_size"] = env.world_size;
    j["master"] =
        env.source == WorkerSource::kSingle ? std::string() : fmt::format("{}:{}", env.master_addr, env.master_port);
    j["nodes"] = nlohmann::json::array();
    for (const auto& f : list) {
      nlohmann::json n = f;
      n["problems"] = node_problems[f.node_rank];
      n["ok"] = node_problems[f.node_rank].empty();
      n["ranks"] = nlohmann::json::array();
      for (int r = 0; r < env.world_size; ++r)
        if (hosts[r] == f.host) {
          n["ranks"].push_back({{"rank", r}, {"verdict", rank_verdicts[r]}});
          if (rank_verdicts[r] != "OK") n["ok"] = false;
        }
      j["nodes"].push_back(n);
    }
    j["links"] = links;
    j["median_link_gbytes_per_s"] = env::median_link_bandwidth(links);
    j["slow_links"] = slow;
    j["errors"] = errors;
    j["warnings"] = warnings;
    std::fputs((j.dump(2) + "\n").c_str(), out);
    std::fflush(out);
    return ok ? kExitOk : kExitFailed;
  }
  std::fputs(fmt::format("trainbox preflight: {} node{}, {} rank{}, {}\n", list.size(), list.size() == 1 ? "" : "s",
                         env.world_size, env.world_size == 1 ? "" : "s",
                         env.source == WorkerSource::kSingle
                             ? std::string("a single process (run it under your launcher to check a job)")
                             : fmt::format("master {}:{}", env.master_addr, env.master_port))
                 .c_str(),
             out);
  for (const auto& f : list) std::fputs((node_line(f) + "\n").c_str(), out);
  if (!std::getenv("GLOO_SOCKET_IFNAME") && !std::getenv("NCCL_SOCKET_IFNAME") && !is_loopback_host(env.master_addr))
    std::fputs(
        "interfaces: each node uses the one that routes to MASTER_ADDR (the route column); trainbox's workers "
        "choose the same by themselves; set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to override\n",
        out);
  for (const auto& f : list)
    std::fputs(
        fmt::format(
            "transport {}: {}{}\n", node_name(f), f.transport_summary.empty() ? "-" : f.transport_summary,
            f.rdma_ports.empty() ? std::string() : fmt::format("; RDMA ports: {}", fmt::join(f.rdma_ports, ", ")))
            .c_str(),
        out);
  if (!links.empty()) {
    const double median = env::median_link_bandwidth(links);
    std::fputs(fmt::format("links: {} pair{} over TCP ({}), median {}\n", links.size(), links.size() == 1 ? "" : "s",
                           list.size() <= 8 ? "all pairs" : "ring neighbours",
                           median > 0 ? fmt::format("{:.3g} GB/s", median) : std::string("-"))
                   .c_str(),
               out);
    for (const auto& l : links)
      std::fputs((l.error.empty() ? fmt::format("link node {} ({}) \u2194 node {} ({}): {:.3g} GB/s, {:.0f} us\n",
                                                l.node_a, l.host_a, l.node_b, l.host_b, l.gbytes_per_s, l.latency_us)
                                  : fmt::format("link node {} ({}) \u2194 node {} ({}): not measured\n", l.node_a,
                                                l.host_a, l.node_b, l.host_b))
                     .c_str(),
                 out);
  }
  for (const auto& e : errors) std::fputs(("error: " + e + "\n").c_str(), out);
  for (const auto& w : warnings) std::fputs(("warning: " + w + "\n").c_str(), out);
  for (int r = 0; r < env.world_size; ++r)
    std::fputs(fmt::format("{}:rank {} {}\n", hosts[r], r, rank_verdicts[r]).c_str(), out);
  std::fputs(ok ? fmt::format("preflight: OK ({} node{}, {} rank{} reduced together)\n", list.size(),
                              list.size() == 1 ? "" : "s agree", env.world_size, env.world_size == 1 ? "" : "s")
                      .c_str()
                : fmt::format("preflight: FAILED ({} error{}, {} broken rank{})\n", errors.size(),
                              errors.size() == 1 ? "" : "s", broken, broken == 1 ? "" : "s")
                      .c_str(),
             out);
  std::fflush(out);
  return ok ? kExitOk : kExitFailed;
}

}  // namespace trainbox::dist
