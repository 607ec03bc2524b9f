// trainbox/train/comm_figures.h — what the gradient exchange costs each rank, for the run's
// summary, metrics.jsonl and the dashboard's /metrics (train/types.h CommFigures defines the
// figures). The Trainer's: it restarts the meter where training time starts (an epoch, after a
// log point) so evaluation, checkpoints and its own logging collectives are not counted, and
// closes a window at each log point.
// Contract: window() is a collective (one allreduce of 2·world doubles on the group), so every
// rank calls it at the same points, as the Trainer's log points are; restart() is local.
//
//   CommMeter meter(*pg, fp32_gradient_exchange_bytes(params, pg->size()), "bf16");
//   meter.restart();                   // training starts
//   … steps …
//   CommFigures w = meter.window(10);  // 10 optimizer steps since restart(); every rank's figures
//   CommFigures all = meter.run();     // every window so far, per step
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include <trainbox/distributed/process_group.h>
#include <trainbox/train/types.h>

namespace trainbox::train {

// Bytes an uncompressed fp32 allreduce of these parameters' gradients sends from each rank by
// the ring model: 2(N-1)/N · 4 · (trainable elements). 0 at a world of 1.
std::int64_t fp32_gradient_exchange_bytes(const std::vector<torch::Tensor>& params, int world);

class CommMeter {
 public:
  CommMeter(dist::ProcessGroup& pg, std::int64_t fp32_bytes_per_step, std::string compression);
  void restart();                          // drops what the group counted since the last window
  CommFigures window(std::int64_t steps);  // collective: this window's figures, every rank's
  CommFigures run() const;                 // the windows so far, per step

 private:
  dist::ProcessGroup& pg_;
  CommFigures base_;  // compression and fp32 bytes; no ranks
  std::int64_t steps_ = 0;
  std::vector<double> sent_, wait_;  // per rank, summed over the windows
};

}  // namespace trainbox::train
