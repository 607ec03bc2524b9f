#include <trainbox/train/memory_stats.h>

#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>
#ifdef TRAINBOX_WITH_CUDA  // CUDA build of torch: allocator statistics
#include <c10/cuda/CUDACachingAllocator.h>
#endif
#include <torch/torch.h>

#include <trainbox/train/memory_plan.h>
#include <trainbox/util/errors.h>

namespace trainbox::train {
namespace {

// A header in front of each block holds its size, so the deleter (a plain function of the
// data pointer: c10's raw_deleter contract, data == context) knows what to subtract. 64
// bytes keep c10's 64-byte alignment of the data.
constexpr std::size_t kHeader = 64;

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner), inner_delete_(inner->raw_deleter()) {}

  c10::DataPtr allocate(std::size_t n) override {
    if (n == 0) return inner_->allocate(0);  // no block: the inner allocator's own (null) pointer
    void* base = inner_->raw_allocate(n + kHeader);
    std::memcpy(base, &n, sizeof n);
    add(static_cast<std::int64_t>(n));
    void* data = static_cast<char*>(base) + kHeader;
    return c10::DataPtr(data, data, &CountingCpuAllocator::free_block, c10::Device(c10::DeviceType::CPU));
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::free_block; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  std::int64_t current() const { return current_.load(); }
  std::int64_t peak() const { return peak_.load(); }
  void reset_peak() { peak_.store(current_.load()); }

  static CountingCpuAllocator* instance;

 private:
  void add(std::int64_t n) {
    const std::int64_t now = current_.fetch_add(n) + n;
    std::int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
  }
  static void free_block(void* data) {
    if (!data) return;
    void* base = static_cast<char*>(data) - kHeader;
    std::size_t n = 0;
    std::memcpy(&n, base, sizeof n);
    instance->current_.fetch_sub(static_cast<std::int64_t>(n));
    instance->inner_delete_(base);
  }

  c10::Allocator* inner_;
  c10::DeleterFnPtr inner_delete_;
  std::atomic<std::int64_t> current_{0}, peak_{0};
};
CountingCpuAllocator* CountingCpuAllocator::instance = nullptr;

std::mutex g_install_mutex;

}  // namespace

bool install_cpu_allocation_counter() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (CountingCpuAllocator::instance) return c10::GetCPUAllocator() == CountingCpuAllocator::instance;
  c10::Allocator* inner = c10::GetCPUAllocator();
  if (!inner || !inner->raw_deleter()) return false;  // blocks it cannot free by pointer alone
  // Never destroyed: storages it allocated may outlive main's locals (static tensors).
  CountingCpuAllocator::instance = new CountingCpuAllocator(inner);
  c10::SetCPUAllocator(CountingCpuAllocator::instance, /*priority=*/1);  // the default is registered at 0
  return c10::GetCPUAllocator() == CountingCpuAllocator::instance;
}

bool cpu_allocation_counter_installed() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  return CountingCpuAllocator::instance && c10::GetCPUAllocator() == CountingCpuAllocator::instance;
}

AllocatedBytes allocated(const torch::Device& device) {
#ifdef TRAINBOX_WITH_CUDA
  if (device.is_cuda()) {
    const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
    const auto& a = s.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
    return {a.current, a.peak, true};
  }
#endif
  if (device.is_cpu() && cpu_allocation_counter_installed())
    return {CountingCpuAllocator::instance->current(), CountingCpuAllocator::instance->peak(), true};
  return {};
}

void reset_peak_allocated(const torch::Device& device) {
#ifdef TRAINBOX_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
    return;
  }
#endif
  if (device.is_cpu() && cpu_allocation_counter_installed()) CountingCpuAllocator::instance->reset_peak();
}

std::int64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<std::int64_t>(ru.ru_maxrss) * 1024;  // Linux: kilobytes
}

std::int64_t measure_step_activation_bytes(torch::nn::Module& module, const torch::Device& device,
                                           const std::function<void()>& step) {
  if (!allocated(device).exact)
    throw UsageError(fmt::format("no exact allocation counter on {}", device.str()),
                     "call trainbox::train::install_cpu_allocation_counter() first thing in main");
  auto sync = [&] {
#ifdef TRAINBOX_WITH_CUDA
    if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
#endif
  };
  auto zero_grads = [&] {
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters())
      if (p.grad().defined()) p.mutable_grad().zero_();  // in place: the measured step accumulates into them
  };
  step();  // allocates the gradients; kernels and their workspaces warm
  zero_grads();
  sync();
  const std::int64_t before = allocated(device).current;
  reset_peak_allocated(device);
  step();
  sync();
  const std::int64_t peak = allocated(device).peak;
  zero_grads();
  return std::max<std::int64_t>(0, peak - before);
}

void record_memory(TrainSummary& summary, torch::nn::Module& module, const Config& config, const torch::Device& device,
                   int rank, int world, const std::function<void(torch::Tensor&)>& sum_over_ranks) {
  ModelStateInputs in;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) {
      in.numel += p.numel();
      in.param_bytes = in.grad_bytes = in.state_bytes = static_cast<int>(p.element_size());
    }
  in.optimizer_slots = optimizer_slots(config.optim);
  in.zero_stage = configured_zero_stage(config);
  in.world = world;
  summary.plan_model_state_bytes = zero_model_state(in).total();
  const AllocatedBytes a = allocated(device);
  summary.memory_counter = !a.exact ? "none" : device.is_cuda() ? "cuda_caching_allocator" : "cpu_allocator";
  // each rank fills its own slots; the sum over ranks is every rank's (float64: exact below 2^53 bytes)
  auto peaks = torch::zeros({2, world}, torch::kFloat64);
  peaks[0][rank] = static_cast<double>(a.peak);
  peaks[1][rank] = static_cast<double>(peak_rss_bytes());
  if (sum_over_ranks) sum_over_ranks(peaks);
  summary.rank_peak_allocated_bytes.clear();
  summary.rank_peak_rss_bytes.clear();
  for (int r = 0; r < world; ++r) {
    summary.rank_peak_allocated_bytes.push_back(static_cast<std::int64_t>(peaks[0][r].item<double>()));
    summary.rank_peak_rss_bytes.push_back(static_cast<std::int64_t>(peaks[1][r].item<double>()));
  }
}

void throw_device_out_of_memory(const std::string& allocator_message, torch::nn::Module& module, const Config& config,
                                int rank, int world, std::int64_t micro_batch) {
  PlanFigures f;
  ModelStateInputs in;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) {
      in.numel += p.numel();
      in.param_bytes = in.grad_bytes = in.state_bytes = static_cast<int>(p.element_size());
    }
  for (const auto& b : module.buffers()) f.buffers += static_cast<std::int64_t>(b.nbytes());
  in.optimizer_slots = optimizer_slots(config.optim);
  in.zero_stage = configured_zero_stage(config);
  in.world = world;
  f.state = zero_model_state(in);
  // One line, the fix in it (no separate hint line): the allocator's dump is not repeated.
  throw DeviceOutOfMemory(
      oom_line(rank, allocator_message, f, micro_batch, config.model.activation_checkpointing, in.zero_stage, world),
      "");
}

}  // namespace trainbox::train
