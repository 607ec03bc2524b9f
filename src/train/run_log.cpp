#include <trainbox/train/run_log.h>

#ifdef TRAINBOX_WITH_CUDA  // CUDA build of torch: allocator statistics
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <trainbox/io/atomic_file.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {

void RunLog::open(const std::string& run_dir, bool tensorboard) {
  jsonl_.open(run_dir + "/metrics.jsonl", std::ios::app);
  if (!jsonl_) throw UsageError("cannot write " + run_dir + "/metrics.jsonl", "check the run dir's permissions");
  if (tensorboard) tb_ = std::make_unique<metrics::TensorBoardWriter>(run_dir);
}

void RunLog::write(const nlohmann::json& j) {
  if (!jsonl_.is_open()) return;
  jsonl_ << j.dump() << '\n';
  jsonl_.flush();
}

void RunLog::scalar(const std::string& tag, double v, std::int64_t step) {
  if (tb_) tb_->add_scalar(tag, static_cast<float>(v), step);
}

void RunLog::flush() {
  if (tb_) tb_->flush();
}

std::int64_t peak_memory(const torch::Device& d) {
#ifdef TRAINBOX_WITH_CUDA
  if (d.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
    return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  if (auto s = read_file("/proc/self/status")) {
    auto pos = s->find("VmHWM:");
    if (pos != std::string::npos) return std::stoll(s->substr(pos + 6)) * 1024;
  }
  return 0;
}

void write_text_atomic(const std::string& path, const std::string& text) {
  io::AtomicFile f(path, "run config");
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace trainbox::train
