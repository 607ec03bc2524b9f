#include <trainbox/dist/process_group.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

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

namespace trainbox::dist {

namespace {
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
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

  // --- store: rank 0 hosts it, unless the launcher's agent does ---
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = env.rank == 0 && !env.use_agent_store;
  so.numWorkers = env.use_agent_store ? std::nullopt : std::optional<std::size_t>(env.world_size);
  so.waitWorkers = false;  // the check-in below names who is missing instead of a bare timeout
  so.timeout = o.timeout;
  try {
    c10::intrusive_ptr<c10d::Store> tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    pg->store_ = env.use_agent_store ? c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::PrefixStore>(
                                           fmt::format("/worker/attempt_{}", env.restart_count), tcp))
                                     : tcp;
  } catch (const std::exception& e) {
    std::string msg = first_line(e.what());
    bool in_use = msg.find("ddress already in use") != std::string::npos;
    throw DistError(
        fmt::format("rank {} cannot {} the rendezvous store at {}: {}", env.rank, so.isServer ? "host" : "reach",
                    pg->where_, msg),
        in_use ? "another job uses that port: pick another MASTER_PORT (trainbox run --standalone picks a free one)"
               : "check that rank 0 is running and MASTER_ADDR/MASTER_PORT are the same on every rank");
  }

  // --- check in: every rank announces itself and waits for the others, with the timeout ---
  const std::string gen = fmt::format("trainbox/checkin/{}/", env.restart_count);
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(gen + std::to_string(r));
  try {
    pg->store_->set(gen + std::to_string(env.rank), std::vector<std::uint8_t>{1});
    pg->store_->wait(keys, o.timeout);
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (int r = 0; r < env.world_size; ++r)
        if (!pg->store_->check({keys[r]})) missing.push_back(r);
    } catch (const std::exception&) {  // the store itself is gone (rank 0 died)
      throw DistError(fmt::format("rank {} lost the rendezvous store at {} while waiting for the other ranks: {}",
                                  env.rank, pg->where_, first_line(e.what())),
                      "rank 0 hosts the store: look at rank 0's log");
    }
    throw DistError(fmt::format("rank {} waited {} s at {} but rank(s) {} of {} never arrived", env.rank,
                                o.timeout.count() / 1000, pg->where_, fmt::join(missing, ", "), env.world_size),
                    "check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, and look "
                    "at the missing ranks' logs");
  }

  // --- the network interface: the one that routes to MASTER_ADDR, unless the user chose ---
  const char* chosen_env = backend == "gloo" ? "GLOO_SOCKET_IFNAME" : "NCCL_SOCKET_IFNAME";
  std::optional<Route> route;
  if (!std::getenv(chosen_env) && !is_loopback_host(env.master_addr)) {
    route = route_to(env.master_addr);
    if (route && !route->interface.empty()) {
      // NCCL: "=eth0" is an exact name (a bare "eth" would be a prefix match).
      if (backend == "nccl") setenv("NCCL_SOCKET_IFNAME", ("=" + route->interface).c_str(), 0);
      if (env.rank == 0)
        std::fprintf(
            stderr,
            "trainbox: %s traffic uses %s (%s), the interface that routes to MASTER_ADDR=%s; set %s to choose\n",
            backend.c_str(), route->interface.c_str(), route->address.c_str(), env.master_addr.c_str(), chosen_env);
    }
  }

  // --- backend ---
  try {
    if (backend == "gloo") {
#ifdef TRAINBOX_WITH_GLOO
      auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
      if (const char* ifs = std::getenv("GLOO_SOCKET_IFNAME")) {
        for (const auto& i : split(ifs, ','))
          opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(i));
      } else if (is_loopback_host(env.master_addr)) {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));  // a one-machine job
      } else if (const auto& r = route) {
        // Bind the address that routes to the master: Gloo's default (resolve the hostname)
        // falls back to 127.0.0.1 where the name does not resolve, and peers then get
        // "Connection refused".
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(r->address));
      } else {
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      pg->backend_ = c10::make_intrusive<c10d::ProcessGroupGloo>(pg->store_, env.rank, env.world_size, opts);
#else
      throw SystemError("this trainbox was built without Gloo (install libgloo-dev and rebuild)");
#endif
    } else {
#ifdef TRAINBOX_WITH_NCCL
      if (device.index() >= static_cast<int>(torch::cuda::device_count()))
        throw DistError(fmt::format("rank {} wants cuda:{} but only {} GPU(s) are visible", env.rank, device.index(),
                                    torch::cuda::device_count()),
                        "start at most one process per GPU (--nproc-per-node gpu)");
      c10::cuda::set_device(device.index());
      // NCCL's wait() only orders streams: a collective that times out or fails is seen by
      // c10d's watchdog thread, which aborts the whole process (a bare SIGABRT, no rank, no
      // operation). Blocking wait makes wait() itself throw after the group's timeout, so the
      // failure takes the same named DistError path as Gloo's, into the worker's stderr, its
      // error file and the launcher's summary. The host then waits where trainbox waits
      // anyway (the end of backward, explicit collectives). A user's own setting wins.
      setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = o.timeout;
      pg->backend_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(pg->store_, env.rank, env.world_size, opts);
      pg->native_avg_ = true;
#else
      throw SystemError("this trainbox was built without NCCL");
#endif
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(
        fmt::format("rank {}: creating the {} process group failed: {}", env.rank, backend, first_line(e.what())));
  }
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

c10::intrusive_ptr<c10d::Work> ProcessGroup::allreduce_async(at::Tensor& t, bool average) {
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions o;
  o.reduceOp = average && native_avg_ ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM;
  return backend_->allreduce(ts, o);
}

void ProcessGroup::finish_average(at::Tensor& t) const {
  if (!native_avg_) t.div_(size_);
}

void ProcessGroup::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
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
  wait_for("allreduce", [&] { return backend_->allreduce(ts, o); });
}

void ProcessGroup::broadcast(at::Tensor& t, int root) {
  std::vector<at::Tensor> ts{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  wait_for("broadcast", [&] { return backend_->broadcast(ts, o); });
}

void ProcessGroup::barrier() {
  wait_for("barrier", [&] { return backend_->barrier(); });
}

}  // namespace trainbox::dist
