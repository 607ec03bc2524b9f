// configure_process(): the process-wide settings of a training process (train/process_setup.h
// says what each is for and why it cannot be an option of the library call that needs it).
#include <trainbox/train/process_setup.h>

#include <malloc.h>

#include <cstdlib>

#include <trainbox/distributed/worker_env.h>
#include <trainbox/util/net.h>

namespace trainbox::train {
namespace {

bool is_set(const char* name) { return std::getenv(name) != nullptr; }

// The user's own malloc settings win; TRAINBOX_MALLOC=default keeps glibc's.
const char* malloc_chosen_by_user() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::string(tunables).find("glibc.malloc") != std::string::npos) return "GLIBC_TUNABLES";
  if (is_set("MALLOC_MMAP_THRESHOLD_")) return "MALLOC_MMAP_THRESHOLD_";
  if (is_set("MALLOC_TRIM_THRESHOLD_")) return "MALLOC_TRIM_THRESHOLD_";
  const char* choice = std::getenv("TRAINBOX_MALLOC");
  if (choice && std::string(choice) == "default") return "TRAINBOX_MALLOC=default";
  return nullptr;
}

// Sets `name` unless the environment has it; records which.
void set_unless_set(ProcessSetup& done, const char* name, const std::string& value) {
  if (is_set(name)) {
    done.left_alone.push_back(std::string(name) + " (already set)");
    return;
  }
  setenv(name, value.c_str(), /*overwrite=*/0);
  done.environment.emplace_back(name, value);
}

}  // namespace

ProcessSetupOptions process_setup_for(const Config& config) {
  ProcessSetupOptions o;
  o.deterministic_cublas = config.train.deterministic;
  o.map_large_allocations = config.dist.zero_stage >= 2;
  return o;
}

std::vector<std::string> ProcessSetup::describe() const {
  std::vector<std::string> out;
  if (large_allocations_mapped)
    out.emplace_back("malloc: blocks of 2 MiB or more are mapped on their own and leave when freed");
  else if (large_allocations_kept)
    out.emplace_back("malloc: blocks up to 1 GiB come from the heap and stay there");
  for (const auto& [name, value] : environment) out.push_back("set " + name + "=" + value);
  return out;
}

ProcessSetup configure_process(const ProcessSetupOptions& o) {
  ProcessSetup done;
  if (o.keep_large_allocations) {
    if (const char* why = malloc_chosen_by_user()) {
      done.left_alone.push_back(std::string("malloc (") + why + ")");
    } else {
      // blocks up to 1 GiB come from the heap, reused after free (or, mapped: 2 MiB and more leave when freed)
      mallopt(M_MMAP_THRESHOLD, o.map_large_allocations ? int(kMappedAllocationBytes) : 1 << 30);
      mallopt(M_TRIM_THRESHOLD, 1 << 30);  // and the heap's top is not handed back between steps
      done.large_allocations_kept = true;
      done.large_allocations_mapped = o.map_large_allocations;
    }
  }
  if (o.deterministic_cublas) set_unless_set(done, "CUBLAS_WORKSPACE_CONFIG", ":4096:8");
  if (o.nccl_blocking_wait) set_unless_set(done, "TORCH_NCCL_BLOCKING_WAIT", "1");
  if (o.nccl_socket_interface) {
    const dist::WorkerEnv env = dist::WorkerEnv::from_environment();
    if (is_set("NCCL_SOCKET_IFNAME")) {
      done.left_alone.emplace_back("NCCL_SOCKET_IFNAME (already set)");
    } else if (!is_loopback_host(env.master_addr)) {
      // "=eth0": exactly that interface (a bare "eth" would be a prefix match).
      if (auto route = route_to(env.master_addr); route && !route->interface.empty())
        set_unless_set(done, "NCCL_SOCKET_IFNAME", "=" + route->interface);
    }
  }
  return done;
}

}  // namespace trainbox::train
