#include <trainbox/distributed/process_group.h>

#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <functional>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#ifdef TRAINBOX_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef TRAINBOX_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <trainbox/util/errors.h>
#include <trainbox/util/net.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/clock.h>

namespace trainbox::dist {

namespace {
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// --- store: rank 0 hosts it, unless the launcher's agent does ---
c10::intrusive_ptr<c10d::Store> connect_store(const WorkerEnv& env, std::chrono::milliseconds timeout,
                                              const std::string& where) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.use_agent_store;
  so.numWorkers = env.use_agent_store ? std::nullopt : std::optional<std::size_t>(env.world_size);
  so.waitWorkers = false;  // the check-in names who is missing instead of a bare timeout
  so.timeout = timeout;
  try {
    c10::intrusive_ptr<c10d::Store> tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    if (!env.use_agent_store) return tcp;
    return c10::make_intrusive<c10d::PrefixStore>(fmt::format("/worker/attempt_{}", env.restart_count), tcp);
  } catch (const std::exception& e) {
    std::string msg = first_line(e.what());
    bool in_use = msg.find("ddress already in use") != std::string::npos;
    throw DistError(
        fmt::format("rank {} cannot {} the rendezvous store at {}: {}", env.rank, so.isServer ? "host" : "reach", where,
                    msg),
        in_use ? "another job uses that port: pick another MASTER_PORT (trainbox run --standalone picks a free one)"
               : "check that rank 0 is running and MASTER_ADDR/MASTER_PORT are the same on every rank");
  }
}

// --- check in: every rank announces itself and waits for the others, with the timeout ---
void check_in(c10d::Store& store, const WorkerEnv& env, std::chrono::milliseconds timeout, const std::string& where) {
  const std::string gen = fmt::format("trainbox/checkin/{}/", env.restart_count);
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(gen + std::to_string(r));
  try {
    store.set(gen + std::to_string(env.rank), std::vector<std::uint8_t>{1});
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < env.world_size; ++r)
        if (!store.check({keys[r]})) missing.push_back(r);
    } catch (const std::exception&) {  // the store itself is gone (rank 0 died)
      throw DistError(fmt::format("rank {} lost the rendezvous store at {} while waiting for the other ranks: {}",
                                  env.rank, where, first_line(e.what())),
                      "rank 0 hosts the store: look at rank 0's log");
    }
    throw DistError(fmt::format("rank {} waited {} s at {} but rank(s) {} of {} never arrived", env.rank,
                                timeout.count() / 1000, where, fmt::join(missing, ", "), env.world_size),
                    "check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, and look "
                    "at the missing ranks' logs");
  }
}

// --- the network interface: the one that routes to MASTER_ADDR, unless the user chose ---
// Gloo is bound to that address (its device options, make_gloo). NCCL takes its interface from
// NCCL_SOCKET_IFNAME only, which this library leaves alone: configure_process()
// (train/process_setup.h) sets it to "=<interface>" for trainbox's own programs.
// The route for Gloo when GLOO_SOCKET_IFNAME is unset; nullopt otherwise.
std::optional<Route> master_route(const WorkerEnv& env, const std::string& backend) {
  const char* chosen_env = backend == "gloo" ? "GLOO_SOCKET_IFNAME" : "NCCL_SOCKET_IFNAME";
  const char* chosen = std::getenv(chosen_env);
  std::optional<Route> route;  // NCCL: only to compare with NCCL_SOCKET_IFNAME
  if (!is_loopback_host(env.master_addr) && (backend == "gloo" ? !chosen : chosen != nullptr))
    route = route_to(env.master_addr);
  // Rank 0 says so when the choice is trainbox's: Gloo bound to it, NCCL pinned to exactly this interface.
  const bool ours = route && !route->interface.empty() && (!chosen || chosen == "=" + route->interface);
  if (ours && env.rank == 0)
    std::fprintf(
        stderr, "trainbox: %s traffic uses %s (%s), the interface that routes to MASTER_ADDR=%s; set %s to choose\n",
        backend.c_str(), route->interface.c_str(), route->address.c_str(), env.master_addr.c_str(), chosen_env);
  return backend == "gloo" ? route : std::nullopt;
}

// --- the backends ---
c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const WorkerEnv& env,
                                            std::chrono::milliseconds timeout, const std::optional<Route>& route) {
#ifdef TRAINBOX_WITH_GLOO
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifs = std::getenv("GLOO_SOCKET_IFNAME")) {
    for (const auto& i : split(ifs, ',')) opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(i));
  } else if (is_loopback_host(env.master_addr)) {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));  // a one-machine job
  } else if (route) {
    // Bind the address that routes to the master: Gloo's default (resolve the hostname)
    // falls back to 127.0.0.1 where the name does not resolve, and peers then get
    // "Connection refused".
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(route->address));
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, opts);
#else
  throw SystemError("this trainbox was built without Gloo (install libgloo-dev and rebuild)");
#endif
}

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, const WorkerEnv& env,
                                            std::chrono::milliseconds timeout, torch::Device device) {
#ifdef TRAINBOX_WITH_NCCL
  if (device.index() >= static_cast<int>(torch::cuda::device_count()))
    throw DistError(fmt::format("rank {} wants cuda:{} but only {} GPU(s) are visible", env.rank, device.index(),
                                torch::cuda::device_count()),
                    "start at most one process per GPU (--nproc-per-node gpu)");
  c10::cuda::set_device(device.index());
  // With TORCH_NCCL_BLOCKING_WAIT=1 (configure_process() sets it for trainbox's programs;
  // the constructor reads it) a failed or timed-out collective throws from wait() as a
  // named DistError, like Gloo's; without it c10d's watchdog aborts the process.
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, opts);
#else
  throw SystemError("this trainbox was built without NCCL");
#endif
}
}  // namespace

std::shared_ptr<ProcessGroup> ProcessGroup::init(const WorkerEnv& env, const ProcessGroupOptions& o,
                                                 torch::Device device) {
  std::shared_ptr<ProcessGroup> pg(new ProcessGroup());
  pg->rank_ = env.rank;
  pg->size_ = env.world_size;
  pg->where_ = fmt::format("{}:{}", env.master_addr, env.master_port);
  std::string backend = o.backend == "auto" ? (device.is_cuda() ? "nccl" : "gloo") : o.backend;
  if (backend != "gloo" && backend != "nccl")
    throw ConfigError("dist.backend = \"" + o.backend + "\" is not a backend", "use auto, gloo or nccl");
  if (backend == "nccl" && !device.is_cuda())
    throw ConfigError("dist.backend = \"nccl\" needs CUDA tensors", "use gloo (or auto) on CPU");
  pg->backend_name_ = backend;
  pg->store_ = connect_store(env, o.timeout, pg->where_);
  check_in(*pg->store_, env, o.timeout, pg->where_);
  const std::optional<Route> route = master_route(env, backend);
  try {
    pg->backend_ = backend == "gloo" ? make_gloo(pg->store_, env, o.timeout, route)
                                     : make_nccl(pg->store_, env, o.timeout, device);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(
        fmt::format("rank {}: creating the {} process group failed: {}", env.rank, backend, first_line(e.what())));
  }
  pg->native_avg_ = backend == "nccl";  // Gloo has no AVG: sum, then divide (finish_average)
  return pg;
}

ProcessGroup::~ProcessGroup() {
  try {
    shutdown();
  } catch (...) {
  }
}

void ProcessGroup::shutdown() {
  if (shut_ || !backend_) return;
  shut_ = true;
#ifdef TRAINBOX_WITH_NCCL
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(backend_.get())) nccl->shutdown();
#endif
}

namespace {
std::int64_t nbytes(const at::Tensor& t) { return static_cast<std::int64_t>(t.numel() * t.element_size()); }
}  // namespace

void ProcessGroup::count_collective(std::int64_t payload, double ring_factor) {
  std::lock_guard<std::mutex> lk(stats_mu_);
  ++stats_.collectives;
  stats_.payload_bytes += payload;
  stats_.sent_bytes += static_cast<std::int64_t>(static_cast<double>(payload) * ring_factor + 0.5);
}

CommStats ProcessGroup::comm_stats() const {
  std::lock_guard<std::mutex> lk(stats_mu_);
  return stats_;
}

CommStats ProcessGroup::take_comm_stats() {
  std::lock_guard<std::mutex> lk(stats_mu_);
  return std::exchange(stats_, CommStats{});
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_async(at::Tensor& t, bool average) {
  count_collective(nbytes(t), allreduce_ring_factor());
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions o;
  o.reduceOp = average && native_avg_ ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
  return backend_->allreduce(ts, o);
}

namespace {
// Point-to-point transfers waited on as one collective; `done` (the local sum) runs once, on
// the first wait() after they all completed. Holds the tensors until then.
class P2PWork : public c10d::Work {
 public:
  P2PWork(std::vector<c10::intrusive_ptr<c10d::Work>> parts, std::function<void()> done)
      : parts_(std::move(parts)), done_(std::move(done)) {}
  bool isCompleted() override {
    for (auto& w : parts_)
      if (!w->isCompleted()) return false;
    return true;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    for (auto& w : parts_) w->wait(timeout);  // a failed or timed-out transfer throws
    std::call_once(once_, [this] {
      if (done_) done_();
    });
    return true;
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> parts_;
  std::function<void()> done_;
  std::once_flag once_;
};

bool same_memory(const at::Tensor& a, const at::Tensor& b) {
  return a.data_ptr() == b.data_ptr() && a.numel() == b.numel();
}
}  // namespace

int ProcessGroup::next_p2p_tag() {
  std::lock_guard<std::mutex> lk(stats_mu_);
  p2p_tag_ = (p2p_tag_ + 1) % (1 << 30);
  return p2p_tag_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce_scatter_async(at::Tensor& out, at::Tensor& in, bool average,
                                                                  bool native) {
  if (in.numel() != out.numel() * size_)
    throw SystemError(
        fmt::format("reduce_scatter: {} elements do not split into {} shards of {}", in.numel(), size_, out.numel()));
  count_collective(nbytes(in), gather_ring_factor());
  if (native || native_avg_) {
    c10d::ReduceScatterOptions o;
    o.reduceOp = average && native_avg_ ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
    if (native_avg_ || !same_memory(out, in.narrow(0, rank_ * out.numel(), out.numel())))
      return backend_->_reduce_scatter_base(out, in, o);  // NCCL reduces in place too
    auto tmp = at::empty_like(out);                       // Gloo's own call does not reduce in place
    auto work = backend_->_reduce_scatter_base(tmp, in, o);
    return c10::make_intrusive<P2PWork>(std::vector<c10::intrusive_ptr<c10d::Work>>{work},
                                        [out, tmp]() mutable { out.copy_(tmp); });
  }
  // Gloo: slice j to rank j, this rank's slice from every peer, summed with our own at the wait.
  const std::int64_t s = out.numel();
  const at::Tensor own = in.narrow(0, rank_ * s, s);
  const bool in_place = same_memory(out, own);
  const bool direct = size_ == 2 && !in_place;  // the peer's slice straight into out, then out += own
  at::Tensor recv = direct ? out : at::empty({(size_ - 1) * s}, in.options());
  const int tag = next_p2p_tag();
  std::vector<c10::intrusive_ptr<c10d::Work>> parts;
  for (int k = 1; k < size_; ++k) {  // receives first: the data lands in place
    std::vector<at::Tensor> t{recv.narrow(0, (k - 1) * s, s)};
    parts.push_back(backend_->recv(t, (rank_ - k + size_) % size_, tag));
  }
  for (int k = 1; k < size_; ++k) {  // peers in a rotating order: no two ranks send to the same one first
    const int dst = (rank_ + k) % size_;
    std::vector<at::Tensor> t{in.narrow(0, dst * s, s)};
    parts.push_back(backend_->send(t, dst, tag));
  }
  const int n = size_;
  return c10::make_intrusive<P2PWork>(std::move(parts), [out, own, recv, direct, in_place, n, s]() mutable {
    at::NoGradGuard ng;
    if (direct) {
      out.add_(own);
      return;
    }
    if (!in_place) out.copy_(own);
    for (int k = 0; k < n - 1; ++k) out.add_(recv.narrow(0, k * s, s));
  });
}

void ProcessGroup::reduce_scatter_result(at::Tensor& out, const at::Tensor& /*in*/, bool average,
                                         bool /*native*/) const {
  if (average) finish_average(out);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::allgather_async(at::Tensor& out, at::Tensor& in) {
  if (out.numel() != in.numel() * size_)
    throw SystemError(fmt::format("allgather: {} elements are not {} shards of {}", out.numel(), size_, in.numel()));
  count_collective(nbytes(out), gather_ring_factor());
  const std::int64_t s = in.numel();
  at::Tensor own = out.narrow(0, rank_ * s, s);
  if (native_avg_) return backend_->_allgather_base(out, in, c10d::AllgatherOptions{});  // NCCL
  // Gloo: our slice to every peer, every peer's into its slice of out (in place).
  if (!same_memory(own, in)) own.copy_(in);
  const int tag = next_p2p_tag();
  std::vector<c10::intrusive_ptr<c10d::Work>> parts;
  for (int k = 1; k < size_; ++k) {
    const int src = (rank_ - k + size_) % size_;
    std::vector<at::Tensor> t{out.narrow(0, src * s, s)};
    parts.push_back(backend_->recv(t, src, tag));
  }
  for (int k = 1; k < size_; ++k) {
    std::vector<at::Tensor> t{own};
    parts.push_back(backend_->send(t, (rank_ + k) % size_, tag));
  }
  return c10::make_intrusive<P2PWork>(std::move(parts), nullptr);
}

void ProcessGroup::finish_average(at::Tensor& t) const {
  if (!native_avg_) t.div_(size_);
}

void ProcessGroup::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  struct AddWait {
    ProcessGroup& pg;
    std::chrono::steady_clock::time_point t0;
    ~AddWait() {
      const double s = seconds_since(t0);
      std::lock_guard<std::mutex> lk(pg.stats_mu_);
      pg.stats_.wait_seconds += s;
    }
  } add_wait{*this, t0};
  try {
    work->wait();
  } catch (const std::exception& e) {
    throw DistError(
        fmt::format("rank {}: {} failed ({} via {}): {}", rank_, what, backend_name_, where_, first_line(e.what())),
        "another rank probably failed or timed out: look at its log");
  }
}

void ProcessGroup::wait_for(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = issue();
  } catch (const std::exception& e) {
    throw DistError(
        fmt::format("rank {}: {} failed ({} via {}): {}", rank_, what, backend_name_, where_, first_line(e.what())),
        "another rank probably failed or timed out: look at its log");
  }
  wait(work, what);
}

void ProcessGroup::allreduce(at::Tensor& t, bool average) {
  wait_for("allreduce", [&] { return allreduce_async(t, average); });
  if (average) finish_average(t);
}

void ProcessGroup::allreduce_op(at::Tensor& t, c10d::ReduceOp op) {
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  count_collective(nbytes(t), allreduce_ring_factor());
  wait_for("allreduce", [&] { return backend_->allreduce(ts, o); });
}

void ProcessGroup::broadcast(at::Tensor& t, int root) {
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  count_collective(nbytes(t), gather_ring_factor());
  wait_for("broadcast", [&] { return backend_->broadcast(ts, o); });
}

void ProcessGroup::barrier() {
  wait_for("barrier", [&] { return backend_->barrier(); });
}

}  // namespace trainbox::dist
