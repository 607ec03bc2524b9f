#include <trainbox/train/types.h>

#include <nlohmann/json.hpp>

namespace trainbox::train {

std::vector<double> CommFigures::rank_compression_ratio() const {
  std::vector<double> out;
  for (const double sent : rank_sent_bytes_per_step) out.push_back(sent > 0 ? double(fp32_bytes_per_step) / sent : 0.0);
  return out;
}

nlohmann::json comm_to_json(const CommFigures& c) {
  return {{"compression", c.compression},
          {"steps", c.steps},
          {"fp32_bytes_per_step", c.fp32_bytes_per_step},
          {"sent_bytes_per_step", c.rank_sent_bytes_per_step},
          {"wait_s_per_step", c.rank_wait_s_per_step},
          {"compression_ratio", c.rank_compression_ratio()}};
}

nlohmann::json summary_to_json(const TrainSummary& s) {
  // clang-format off
  nlohmann::json j = {{"device", s.device},   {"run_dir", s.run_dir},       {"checkpoint", s.checkpoint},
                      {"dataset", s.dataset}, {"epochs", s.epochs},         {"steps", s.steps},
                      {"samples", s.samples}, {"test_loss", s.test_loss},   {"test_accuracy", s.test_accuracy},
                      {"wall_s", s.wall_s},   {"train_s", s.train_s},       {"samples_per_s", s.samples_per_s},
                      {"peak_memory_bytes", s.peak_memory_bytes},           {"resumed", s.resumed}};
  // clang-format on
  j["first_step_s"] = s.first_step_s;
  j["model_state_bytes"] = s.model_state_bytes;
  j["model_state"] = {{"params", s.param_bytes},
                      {"grads", s.grad_bytes},
                      {"optimizer", s.optimizer_bytes},
                      {"zero_stage", s.zero_stage}};
  if (s.tokens_per_s > 0) {
    j["tokens_per_s"] = s.tokens_per_s;
    j["test_perplexity"] = s.test_perplexity;
  }
  if (!s.rank_peak_rss_bytes.empty())
    j["memory"] = {{"plan_model_state_bytes_per_rank", s.plan_model_state_bytes},
                   {"counter", s.memory_counter},
                   {"rank_peak_allocated_bytes", s.rank_peak_allocated_bytes},
                   {"rank_peak_rss_bytes", s.rank_peak_rss_bytes}};
  if (!s.comm.empty()) j["comm"] = comm_to_json(s.comm);
  if (s.unigram_loss > 0) j["unigram_loss"] = s.unigram_loss;
  if (s.skipped_samples > 0) {
    j["skipped_samples"] = s.skipped_samples;
    j["skipped_examples"] = s.skipped_examples;
  }
  return j;
}

}  // namespace trainbox::train
