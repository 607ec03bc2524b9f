#include <trainbox/distributed/preflight.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/distributed/device.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/env/link_test.h>
#include <trainbox/env/nccl_log.h>
#include <trainbox/env/preflight.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/result_file.h>
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
      const int bport = parts.size() == 2 ? static_cast<int>(parse_integer(parts[1]).value_or(-1)) : -1;
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

// --- 1-2. this node's facts; can this rank reach the master? (rank 0 hosts the store there) ---
env::NodeFacts local_facts(const WorkerEnv& env, double timeout_s) {
  env::NodeFacts facts = env::collect_node_facts(env.master_addr);
  facts.node_rank = env.node_rank;
  if (env.rank != 0 && env.master_port > 0) {
    const std::string why = tcp_reach(env.master_addr, env.master_port, timeout_s);
    if (!why.empty())
      throw DistError(fmt::format("node {} ({}) cannot reach {}:{}: {}", env.node_rank, facts.host, env.master_addr,
                                  env.master_port, why),
                      "open that port between the nodes (firewall, security group), or check MASTER_ADDR");
  }
  return facts;
}

// --- 4. smoke allreduce over every rank: each adds rank+1, everyone expects n(n+1)/2 ---
// "OK", or "broken: why".
std::string smoke_allreduce(ProcessGroup& pg, const WorkerEnv& env, torch::Device dev) {
  try {
    auto t = torch::full({1 << 16}, double(env.rank + 1), torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    pg.allreduce(t, /*average=*/false);
    const double want = double(env.world_size) * (env.world_size + 1) / 2;
    const double got_min = t.min().item<double>(), got_max = t.max().item<double>();
    if (got_min != want || got_max != want)
      return fmt::format("broken: allreduce gave {}..{}, expected {}", got_min, got_max, want);
    return "OK";
  } catch (const std::exception& e) {
    std::string m = e.what();
    return "broken: " + m.substr(0, m.find('\n'));
  }
}

// --- the transport NCCL chose, from its log (null: not captured) ---
nlohmann::json transport_facts(const env::NcclLogCapture* nccl_log, const WorkerEnv& env, torch::Device dev) {
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
  return transport;
}

// What rank 0 gathers from the store, and what it concludes.
struct JobFacts {
  std::map<int, env::NodeFacts> nodes;      // by node rank; the first rank of each node speaks for it
  std::vector<env::NodeFacts> list;         // the same, in node order
  std::vector<std::string> hosts;           // per rank
  std::vector<env::LinkMeasurement> links;  // per pair of link_pairs()
  std::vector<std::string> rank_verdicts;   // per rank: "OK" or "broken: …"
};
struct Verdict {
  std::vector<std::string> errors, warnings;
  env::LinkVerdict links;  // slow nodes and slow links
  std::map<int, std::vector<std::string>> node_problems;
  std::optional<LinkAdviceInputs> advice_in;  // --config: the model on the slowest link
  std::optional<LinkAdvice> advice;
  int broken = 0;  // ranks whose smoke allreduce failed
  bool ok() const { return errors.empty() && broken == 0; }
};

// Every rank's facts, and the transport of each node's first rank.
void gather_nodes(ProcessGroup& pg, const WorkerEnv& env, const PreflightOptions& o, JobFacts& job) {
  job.hosts.assign(env.world_size, "?");
  for (int r = 0; r < env.world_size; ++r) {
    const std::string key = fmt::format("{}facts/{}", kPrefix, r);
    nlohmann::json j;
    try {
      pg.store()->wait({key}, o.timeout);
      j = nlohmann::json::parse(text(pg.store()->get(key)));
    } catch (const std::exception& e) {
      throw DistError(fmt::format("rank {} never posted its facts within {} s", r, o.timeout.count()),
                      "look at that rank's log: it stopped after joining the process group");
    }
    env::NodeFacts f = j.get<env::NodeFacts>();
    job.hosts[r] = f.host;
    if (job.nodes.count(f.node_rank)) continue;  // the first rank of each node speaks for it
    const std::string tkey = fmt::format("{}transport/{}", kPrefix, r);
    if (wait_key(pg, tkey, std::chrono::milliseconds(o.timeout.count() * 1000))) {
      const auto t = nlohmann::json::parse(text(pg.store()->get(tkey)), nullptr, false);
      if (t.is_object()) {
        f.transport = t.value("transport", "");
        f.transport_summary = t.value("transport_summary", "");
        f.gdr = t.value("gdr", -1);
      }
    } else {
      f.transport_summary = fmt::format("unknown: rank {} posted no transport within {} s", r, o.timeout.count());
    }
    job.nodes.emplace(f.node_rank, f);
  }
  for (auto& [_, f] : job.nodes) job.list.push_back(f);
}

// The link test's results, one per pair (a pair that posted none: its error says so).
void gather_links(ProcessGroup& pg, const PreflightOptions& o, JobFacts& job) {
  const auto pairs = env::link_pairs(static_cast<int>(job.list.size()));
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    env::LinkMeasurement m;
    const std::string key = fmt::format("{}links/result/{}", kPrefix, k);
    // Pairs run one after another: the last may finish up to (pairs × step) after the first.
    if (wait_key(pg, key, std::chrono::milliseconds(o.timeout.count() * 1000 * 2))) {
      const auto j = nlohmann::json::parse(text(pg.store()->get(key)), nullptr, false);
      if (j.is_object())
        m = j.get<env::LinkMeasurement>();
      else
        m.error = "unreadable result";
    } else {
      m.error = fmt::format("no result within {} s", o.timeout.count() * 2);
    }
    m.node_a = pairs[k].first;
    m.node_b = pairs[k].second;
    if (job.nodes.count(m.node_a)) m.host_a = job.nodes[m.node_a].host;
    if (job.nodes.count(m.node_b)) m.host_b = job.nodes[m.node_b].host;
    job.links.push_back(m);
  }
}

// Every rank's smoke verdict ("broken: no answer …" for a rank that posted none).
void gather_smoke(ProcessGroup& pg, const WorkerEnv& env, const PreflightOptions& o, JobFacts& job) {
  job.rank_verdicts.assign(env.world_size, "");
  for (int r = 0; r < env.world_size; ++r) {
    const std::string key = fmt::format("{}smoke/{}", kPrefix, r);
    try {
      pg.store()->wait({key}, o.timeout);
      job.rank_verdicts[r] = text(pg.store()->get(key));
    } catch (const std::exception&) {
      job.rank_verdicts[r] = fmt::format("broken: no answer within {} s", o.timeout.count());
    }
  }
}

// --- verdicts: facts that differ, socket fallbacks, links not measured or slow, broken ranks ---
// The slowest measured link (a ring allreduce runs at its rate); 0: none measured.
double slowest_link(const std::vector<env::LinkMeasurement>& links) {
  double slowest = 0;
  for (const auto& l : links)
    if (l.error.empty() && l.gbytes_per_s > 0 && (slowest == 0 || l.gbytes_per_s < slowest)) slowest = l.gbytes_per_s;
  return slowest;
}

Verdict judge(const JobFacts& job, const PreflightOptions& o, int world) {
  Verdict v;
  env::LinkJudgeOptions lo;
  lo.factor = o.slow_link_factor;
  lo.expected_gbytes_per_s = o.expected_link_gbytes_per_s;
  v.links = env::judge_links(job.links, lo);
  const env::NodeComparison cmp = env::compare_nodes(job.list);
  v.errors = cmp.errors;  // the facts that differ, then each socket fallback
  v.warnings = cmp.warnings;
  v.node_problems = cmp.node_problems;
  for (const auto& l : job.links)
    if (!l.error.empty())
      v.warnings.push_back(fmt::format("link node {} ({}) \u2194 node {} ({}) not measured: {}", l.node_a, l.host_a,
                                       l.node_b, l.host_b, l.error));
  for (const auto& line : v.links.lines()) v.warnings.push_back(line);
  if (o.model && slowest_link(job.links) > 0) {  // the model on these links: compress or not
    v.advice_in = *o.model;
    v.advice_in->world = world;
    v.advice_in->link_gbytes_per_s = slowest_link(job.links);
    v.advice = advise_compression(*v.advice_in);
    if (v.advice->verdict == LinkVerdictKind::kSlow) v.warnings.push_back(v.advice->line);
  }
  for (const auto& r : job.rank_verdicts)
    if (r != "OK") ++v.broken;
  return v;
}

// --- report: one JSON object (on stdout through util/result_file.h: under a launcher, its result file) ---
void print_json(const JobFacts& job, const Verdict& v, const WorkerEnv& env, std::FILE* out) {
  const auto slow_node_lines = v.links.node_lines();
  nlohmann::json j;
  j["ok"] = v.ok();
  j["world_size"] = env.world_size;
  j["master"] =
      env.source == WorkerSource::kSingle ? std::string() : fmt::format("{}:{}", env.master_addr, env.master_port);
  j["nodes"] = nlohmann::json::array();
  for (const auto& f : job.list) {
    const auto problems =
        v.node_problems.count(f.node_rank) ? v.node_problems.at(f.node_rank) : std::vector<std::string>{};
    nlohmann::json n = f;
    n["problems"] = problems;
    n["ok"] = problems.empty();
    n["warnings"] = nlohmann::json::array();  // a slow node is a warning: the job can run, slowly
    for (std::size_t k = 0; k < v.links.slow_nodes.size(); ++k)
      if (v.links.slow_nodes[k].node == f.node_rank) n["warnings"].push_back(slow_node_lines[k]);
    n["ranks"] = nlohmann::json::array();
    for (int r = 0; r < env.world_size; ++r)
      if (job.hosts[r] == f.host) {
        n["ranks"].push_back({{"rank", r}, {"verdict", job.rank_verdicts[r]}});
        if (job.rank_verdicts[r] != "OK") n["ok"] = false;
      }
    j["nodes"].push_back(n);
  }
  j["links"] = job.links;
  j["median_link_gbytes_per_s"] = env::median_link_bandwidth(job.links);
  j["link_reference_gbytes_per_s"] = v.links.reference_gbytes_per_s;
  j["link_reference"] = v.links.expected ? "expected" : "typical node's best link";
  j["slow_nodes"] = slow_node_lines;
  j["slow_links"] = v.links.link_lines();
  j["errors"] = v.errors;
  j["warnings"] = v.warnings;
  if (v.advice) j["compression_advice"] = link_advice_json(*v.advice, *v.advice_in);
  if (out == stdout) {
    write_result(j, 0);  // only rank 0 reports
  } else {
    std::fputs((j.dump(2) + "\n").c_str(), out);
    std::fflush(out);
  }
}

// --- report: the text, one line per node, link and rank ---
void print_text(const JobFacts& job, const Verdict& v, const WorkerEnv& env, std::FILE* out) {
  auto put = [out](const std::string& line) { std::fputs((line + "\n").c_str(), out); };
  const std::size_t nodes = job.list.size();
  put(fmt::format("trainbox preflight: {} node{}, {} rank{}, {}", nodes, nodes == 1 ? "" : "s", env.world_size,
                  env.world_size == 1 ? "" : "s",
                  env.source == WorkerSource::kSingle
                      ? std::string("a single process (run it under your launcher to check a job)")
                      : fmt::format("master {}:{}", env.master_addr, env.master_port)));
  for (const auto& f : job.list) put(node_line(f));
  if (!std::getenv("GLOO_SOCKET_IFNAME") && !std::getenv("NCCL_SOCKET_IFNAME") && !is_loopback_host(env.master_addr))
    put("interfaces: each node uses the one that routes to MASTER_ADDR (the route column); trainbox's workers "
        "choose the same by themselves; set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to override");
  for (const auto& f : job.list)
    put(fmt::format(
        "transport {}: {}{}", node_name(f), f.transport_summary.empty() ? "-" : f.transport_summary,
        f.rdma_ports.empty() ? std::string() : fmt::format("; RDMA ports: {}", fmt::join(f.rdma_ports, ", "))));
  if (!job.links.empty()) {
    const double median = env::median_link_bandwidth(job.links);
    put(fmt::format("links: {} pair{} over TCP ({}), median {}, reference {}", job.links.size(),
                    job.links.size() == 1 ? "" : "s", nodes <= 8 ? "all pairs" : "ring neighbours",
                    median > 0 ? fmt::format("{:.3g} GB/s", median) : std::string("-"), v.links.reference_text()));
    for (const auto& l : job.links)
      put(l.error.empty() ? fmt::format("link node {} ({}) \u2194 node {} ({}): {:.3g} GB/s, {:.0f} us", l.node_a,
                                        l.host_a, l.node_b, l.host_b, l.gbytes_per_s, l.latency_us)
                          : fmt::format("link node {} ({}) \u2194 node {} ({}): not measured", l.node_a, l.host_a,
                                        l.node_b, l.host_b));
  }
  for (const auto& e : v.errors) put("error: " + e);
  for (const auto& w : v.warnings) put("warning: " + w);
  if (v.advice && v.advice->verdict != LinkVerdictKind::kSlow) put("note: " + v.advice->line);
  for (int r = 0; r < env.world_size; ++r) put(fmt::format("{}:rank {} {}", job.hosts[r], r, job.rank_verdicts[r]));
  put(v.ok() ? fmt::format("preflight: OK ({} node{}, {} rank{} reduced together)", nodes, nodes == 1 ? "" : "s agree",
                           env.world_size, env.world_size == 1 ? "" : "s")
             : fmt::format("preflight: FAILED ({} error{}, {} broken rank{})", v.errors.size(),
                           v.errors.size() == 1 ? "" : "s", v.broken, v.broken == 1 ? "" : "s"));
  std::fflush(out);
}

}  // namespace

// Every rank: facts, the process group, the smoke allreduce, the links; rank 0 then gathers,
// judges and reports (include/trainbox/distributed/preflight.h numbers the stages).
int run_preflight(const PreflightOptions& o, std::FILE* out) {
  WorkerEnv env = WorkerEnv::from_environment();
  if (env.source == WorkerSource::kSingle) env.master_port = 0;  // a world of one checks itself, on a free port
  const env::NodeFacts facts = local_facts(env, double(o.timeout.count()));

  // --- 3. the job's process group; facts into its store ---
  const torch::Device dev = choose_device("auto", env.local_rank, env.local_world_size).device;
  // NCCL reads its debug variables once, at its first call: set them before the process group.
  std::unique_ptr<env::NcclLogCapture> nccl_log;
  if (dev.is_cuda() && o.capture_nccl_log) nccl_log = std::make_unique<env::NcclLogCapture>();
  ProcessGroupOptions po;
  po.timeout = o.timeout;
  auto pg = ProcessGroup::init(env, po, dev);
  nlohmann::json mine = facts;
  mine["rank"] = env.rank;
  pg->store()->set(fmt::format("{}facts/{}", kPrefix, env.rank), bytes(mine.dump()));

  const std::string verdict = smoke_allreduce(*pg, env, dev);
  pg->store()->set(fmt::format("{}smoke/{}", kPrefix, env.rank), bytes(verdict));
  pg->store()->set(fmt::format("{}transport/{}", kPrefix, env.rank),
                   bytes(transport_facts(nccl_log.get(), env, dev).dump()));

  // --- 5. links between nodes (the first rank of each node) ---
  const bool links = o.links && env.source != WorkerSource::kSingle;
  if (links) {
    const int node_count = std::max(1, env.world_size / std::max(1, env.local_world_size));
    try {
      run_link_test(*pg, env, facts, node_count, o);
    } catch (const std::exception& e) {  // a store error: the links are reported missing by rank 0
      std::fprintf(stderr, "preflight: node %d's link test stopped: %s\n", env.node_rank, e.what());
    }
  }
  if (env.rank != 0) return verdict == "OK" ? kExitOk : kExitFailed;

  // --- rank 0: gather, compare, report ---
  JobFacts job;
  gather_nodes(*pg, env, o, job);
  if (links) gather_links(*pg, o, job);
  gather_smoke(*pg, env, o, job);
  const Verdict v = judge(job, o, env.world_size);
  if (o.json)
    print_json(job, v, env, out);
  else
    print_text(job, v, env, out);
  return v.ok() ? kExitOk : kExitFailed;
}

}  // namespace trainbox::dist
