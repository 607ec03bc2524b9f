// trainbox/train/run_log.h — the run's outputs besides checkpoints: metrics.jsonl and TensorBoard
// events (rank 0 only), and memory statistics. The Trainer's; `bench dataloader` reads peak_memory.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <trainbox/metrics/tensorboard.h>

namespace trainbox::train {

class RunLog {
 public:
  // Opens <run_dir>/metrics.jsonl (append) and, with `tensorboard`, an event file. Throws UsageError.
  void open(const std::string& run_dir, bool tensorboard);
  void write(const nlohmann::json& j);  // a no-op when not open (ranks other than 0)
  void scalar(const std::string& tag, double v, std::int64_t step);
  void flush();

 private:
  std::ofstream jsonl_;
  std::unique_ptr<metrics::TensorBoardWriter> tb_;
};

// Peak memory: the CUDA caching allocator's peak on a GPU, the process's peak RSS (VmHWM) on CPU.
std::int64_t peak_memory(const torch::Device& d);

// Writes via <path>.tmp, fsync and rename.
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace trainbox::train
