#include <trainbox/dist/preflight.h>

#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/dist/process_group.h>
#include <trainbox/dist/worker_env.h>
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
                     f.node_rank, f.host, or_none(f.torch), or_none(f.cuda_runtime), or_none(f.nccl),
                     or_none(f.driver), f.gpu_count, f.gpu_model.empty() ? "" : " x " + f.gpu_model,
                     f.shm_bytes < 0 ? std::string("missing") : human_bytes(static_cast<std::uint64_t>(f.shm_bytes)),
                     or_none(f.route_interface), f.route_address);
}

}  // namespace

int run_preflight(const PreflightOptions& o, std::FILE* out) {
  WorkerEnv env = WorkerEnv::from_environment();
  if (env.source == "single") env.master_port = 0;  // a world of one checks itself, on a free port
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
    nodes.emplace(f.node_rank, f);  // the first rank of each node speaks for it
  }
  std::vector<env::NodeFacts> list;
  for (auto& [_, f] : nodes) list.push_back(f);
  std::fputs(fmt::format("trainbox preflight: {} node{}, {} rank{}, {}\n", list.size(), list.size() == 1 ? "" : "s",
                         env.world_size, env.world_size == 1 ? "" : "s",
                         env.source == "single" ? std::string("a single process (run it under your launcher to check a job)")
                                                : fmt::format("master {}:{}", env.master_addr, env.master_port))
                 .c_str(),
             out);
  for (const auto& f : list) std::fputs((node_line(f) + "\n").c_str(), out);
  if (!std::getenv("GLOO_SOCKET_IFNAME") && !std::getenv("NCCL_SOCKET_IFNAME") && !is_loopback_host(env.master_addr))
    std::fputs("interfaces: each node uses the one that routes to MASTER_ADDR (the route column); trainbox's workers "
               "choose the same by themselves; set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME to override\n",
               out);
  const env::NodeComparison cmp = env::compare_nodes(list);
  for (const auto& e : cmp.errors) std::fputs(("error: " + e + "\n").c_str(), out);
  for (const auto& w : cmp.warnings) std::fputs(("warning: " + w + "\n").c_str(), out);
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
    std::fputs(fmt::format("{}:rank {} {}\n", hosts[r], r, v).c_str(), out);
  }
  const bool ok = cmp.errors.empty() && broken == 0;
  std::fputs(ok ? fmt::format("preflight: OK ({} node{}, {} rank{} reduced together)\n", list.size(),
                              list.size() == 1 ? "" : "s agree", env.world_size, env.world_size == 1 ? "" : "s")
                       .c_str()
                : fmt::format("preflight: FAILED ({} mismatch{}, {} broken rank{})\n", cmp.errors.size(),
                              cmp.errors.size() == 1 ? "" : "es", broken, broken == 1 ? "" : "s")
                      .c_str(),
             out);
  std::fflush(out);
  return ok ? kExitOk : kExitFailed;
}

}  // namespace trainbox::dist
