#include <trainbox/train/comm_figures.h>

#include <utility>

namespace trainbox::train {

std::int64_t fp32_gradient_exchange_bytes(const std::vector<torch::Tensor>& params, int world) {
  std::int64_t numel = 0;
  for (const auto& p : params)
    if (p.requires_grad()) numel += p.numel();
  if (world <= 1) return 0;
  // the ring sends 2(N-1) chunks of B/N from each rank (ProcessGroup::allreduce_ring_factor)
  return static_cast<std::int64_t>(2.0 * (world - 1) / world * 4.0 * double(numel) + 0.5);
}

CommMeter::CommMeter(dist::ProcessGroup& pg, std::int64_t fp32_bytes_per_step, std::string compression)
    : pg_(pg), sent_(pg.size(), 0.0), wait_(pg.size(), 0.0) {
  base_.compression = std::move(compression);
  base_.fp32_bytes_per_step = fp32_bytes_per_step;
}

void CommMeter::restart() { pg_.take_comm_stats(); }

CommFigures CommMeter::window(std::int64_t steps) {
  const dist::CommStats mine = pg_.take_comm_stats();  // before the gather below counts itself
  const int world = pg_.size();
  // each rank fills its own slots; the sum over ranks is every rank's (float64: exact below 2^53 bytes)
  auto t = torch::zeros({2, world}, torch::kFloat64);
  t[0][pg_.rank()] = static_cast<double>(mine.sent_bytes);
  t[1][pg_.rank()] = mine.wait_seconds;
  pg_.allreduce_op(t, c10d::ReduceOp::SUM);
  pg_.take_comm_stats();  // the gather is logging, not the step's communication
  const auto a = t.accessor<double, 2>();
  CommFigures w = base_;
  w.steps = steps;
  for (int r = 0; r < world; ++r) {
    sent_[r] += a[0][r];
    wait_[r] += a[1][r];
    w.rank_sent_bytes_per_step.push_back(steps > 0 ? a[0][r] / double(steps) : 0.0);
    w.rank_wait_s_per_step.push_back(steps > 0 ? a[1][r] / double(steps) : 0.0);
  }
  steps_ += steps;
  return w;
}

CommFigures CommMeter::run() const {
  CommFigures all = base_;
  all.steps = steps_;
  for (std::size_t r = 0; r < sent_.size(); ++r) {
    all.rank_sent_bytes_per_step.push_back(steps_ > 0 ? sent_[r] / double(steps_) : 0.0);
    all.rank_wait_s_per_step.push_back(steps_ > 0 ? wait_[r] / double(steps_) : 0.0);
  }
  return all;
}

}  // namespace trainbox::train
