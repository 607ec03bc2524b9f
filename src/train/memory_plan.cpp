#include <trainbox/train/memory_plan.h>

#include <algorithm>
#include <cmath>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <trainbox/train/config_rules.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {

ModelStateBytes zero_model_state(const ModelStateInputs& in) {
  if (in.zero_stage < 0 || in.zero_stage > 3)
    throw UsageError(fmt::format("dist.zero_stage = {} is not a ZeRO stage", in.zero_stage), "use 0, 1, 2 or 3");
  if (in.world < 1) throw UsageError(fmt::format("a world of {} ranks", in.world), "use 1 or more ranks");
  ModelStateBytes s;
  const std::int64_t n = in.numel, w = in.world;
  const std::int64_t multiple = in.pad_multiple > 0 ? in.pad_multiple : w;
  const std::int64_t padded = in.zero_stage == 0 ? n : (n + multiple - 1) / multiple * multiple;
  s.padding_elements = padded - n;
  const std::int64_t shard = padded / w;  // each rank's flat shard
  s.params = (in.zero_stage >= 3 ? shard : n) * in.param_bytes;
  s.grads = (in.zero_stage >= 2 ? shard : n) * in.grad_bytes;
  s.optimizer = (in.zero_stage >= 1 ? shard : n) * std::int64_t{in.optimizer_slots} * in.state_bytes;
  return s;
}

int optimizer_slots(const OptimConfig& o) {
  if (o.name == "adam" || o.name == "adamw") return 2;  // exp_avg, exp_avg_sq
  return o.momentum > 0 ? 1 : 0;                        // sgd: the momentum buffer
}

bool has_zero_stage_key() {
  for (const auto& f : config_fields())
    if (f.key == "dist.zero_stage") return true;
  return false;
}

int configured_zero_stage(const Config& c) {
  for (const auto& f : config_fields())
    if (f.key == "dist.zero_stage") {
      const auto v = parse_integer(config_value(c, f.key));
      return v ? static_cast<int>(*v) : 0;
    }
  return 0;  // a build without sharding: plain DDP
}

std::int64_t ActivationModel::at(std::int64_t batch) const {
  return std::max<std::int64_t>(0, std::llround(fixed + per_sample * static_cast<double>(batch)));
}

ActivationModel ActivationModel::from(std::int64_t b1, std::int64_t bytes1, std::int64_t b2, std::int64_t bytes2) {
  ActivationModel m;
  if (b2 > 0 && b2 != b1) {
    m.per_sample = double(bytes1 - bytes2) / double(b1 - b2);
    m.fixed = double(bytes1) - m.per_sample * double(b1);
    if (m.per_sample < 0 || m.fixed < 0) {  // noise: keep the proportional model through the larger one
      m.fixed = 0;
      m.per_sample = double(std::max(bytes1, bytes2)) / double(std::max(b1, b2));
    }
  } else {
    m.per_sample = b1 > 0 ? double(bytes1) / double(b1) : 0;
  }
  return m;
}

namespace {

ModelStateInputs with_stage(ModelStateInputs s, int stage) {
  s.zero_stage = stage;
  return s;
}

std::int64_t bytes_of(const PlanInputs& in, int stage, bool ckpt, std::int64_t micro) {
  const ActivationModel& a = ckpt && in.checkpointed ? *in.checkpointed : in.activations;
  return zero_model_state(with_stage(in.state, stage)).total() + a.at(micro) + in.buffers;
}

std::string describe(const PlanInputs& in, const PlanChange& c) {
  std::vector<std::string> parts;
  if (c.zero_stage != in.state.zero_stage)
    parts.push_back(
        fmt::format("dist.zero_stage = {} at {} rank{}", c.zero_stage, in.state.world, in.state.world == 1 ? "" : "s"));
  if (c.checkpointing) parts.push_back("model.activation_checkpointing = \"blocks\"");
  if (c.micro_batch != in.micro_batch)
    parts.push_back(fmt::format("train.batch_size = {} with train.accumulate = {} (the same global batch)",
                                c.micro_batch, c.accumulate));
  std::string what = parts.empty() ? "as configured" : parts[0];
  for (std::size_t i = 1; i < parts.size(); ++i) what += " + " + parts[i];
  return fmt::format("{}: {} per rank", what, human_bytes(static_cast<std::uint64_t>(c.bytes)));
}

// Every change considered: the stages from the configured one up (stages > 0 only when the
// world has more than one rank to shard over), checkpointing on or off, the micro-batch
// divided by each divisor (accumulation multiplied by it).
std::vector<PlanChange> candidates(const PlanInputs& in) {
  std::vector<PlanChange> out;
  const bool ckpt_now = in.checkpointing != "none";
  const int top_stage = in.state.world > 1 && in.zero_available ? 3 : in.state.zero_stage;
  for (int stage = in.state.zero_stage; stage <= top_stage; ++stage)
    for (int ck = 0; ck < 2; ++ck) {
      if (ck && (ckpt_now || !in.checkpointed)) continue;
      for (std::int64_t d = 1; d <= in.micro_batch; ++d) {
        if (in.micro_batch % d != 0) continue;
        PlanChange c;
        c.zero_stage = stage;
        c.checkpointing = ck != 0;
        c.micro_batch = in.micro_batch / d;
        c.accumulate = in.accumulate * d;
        c.bytes = bytes_of(in, stage, c.checkpointing, c.micro_batch);
        const double stage_cost = stage >= 3 ? 0.5 : stage == 2 ? 0.02 : stage == 1 ? 0.01 : 0.0;
        c.cost = (stage > in.state.zero_stage ? stage_cost : 0.0) + (c.checkpointing ? 0.33 : 0.0) +
                 0.2 * std::log2(static_cast<double>(d));
        c.description = describe(in, c);
        out.push_back(c);
      }
    }
  return out;
}

}  // namespace

PlanFigures plan_figures(const PlanInputs& in) {
  PlanFigures f;
  f.state = zero_model_state(in.state);
  f.activations = in.activations.at(in.micro_batch);
  f.buffers = in.buffers;
  return f;
}

std::optional<PlanChange> cheapest_fit(const PlanInputs& in, std::int64_t budget) {
  std::optional<PlanChange> best;
  for (const auto& c : candidates(in))
    if (c.bytes <= budget && (!best || c.cost < best->cost || (c.cost == best->cost && c.bytes < best->bytes)))
      best = c;
  return best;
}

PlanChange smallest(const PlanInputs& in) {
  const auto all = candidates(in);
  return *std::min_element(all.begin(), all.end(),
                           [](const PlanChange& a, const PlanChange& b) { return a.bytes < b.bytes; });
}

namespace {
std::string budget_verdict(const PlanInputs& in, const PlanFigures& f, std::int64_t budget) {
  const std::string b = human_bytes(static_cast<std::uint64_t>(budget));
  if (f.total() <= budget)
    return fmt::format("fits the budget of {} per rank ({} left)", b,
                       human_bytes(static_cast<std::uint64_t>(budget - f.total())));
  if (auto c = cheapest_fit(in, budget))
    return fmt::format("does not fit the budget of {} per rank; the cheapest change that fits: {}", b, c->description);
  return fmt::format("does not fit the budget of {} per rank, and no change here fits; the smallest is {}", b,
                     smallest(in).description);
}
}  // namespace

std::string format_plan(const PlanInputs& in, std::int64_t budget) {
  const PlanFigures f = plan_figures(in);
  auto row = [](const char* what, std::int64_t bytes, const std::string& note) {
    return fmt::format("  {:<16} {:>12} {:>16}{}\n", what, human_bytes(static_cast<std::uint64_t>(bytes)), bytes,
                       note.empty() ? "" : "  " + note);
  };
  const int slots = in.state.optimizer_slots;
  std::string out = fmt::format(
      "# trainbox train --plan: {} ({} parameters) on {}, micro-batch {} x accumulate {}, world {}, "
      "dist.zero_stage {}, model.activation_checkpointing {}\n",
      in.model, in.numel, in.device, in.micro_batch, in.accumulate, in.state.world, in.state.zero_stage,
      in.checkpointing);
  out += fmt::format("# per rank (each rank of the job needs the same){}\n",
                     f.state.padding_elements > 0
                         ? fmt::format("; {} padding elements split the flat buffer into {} equal shards",
                                       f.state.padding_elements, in.state.world)
                         : "");
  out += fmt::format("  {:<16} {:>12} {:>16}\n", "", "size", "bytes");
  out += row("parameters", f.state.params, fmt::format("{} B each", in.state.param_bytes));
  out += row("gradients", f.state.grads, "");
  out += row("optimizer state", f.state.optimizer,
             fmt::format("{}: {} slot{} of {} B", in.optimizer, slots, slots == 1 ? "" : "s", in.state.state_bytes));
  out += row("activations", f.activations,
             fmt::format("measured: one forward/backward at micro-batch {} on {}", in.micro_batch, in.device));
  out += row("buffers", f.buffers, "");
  out += row("total", f.total(), "");
  if (budget > 0) out += "budget: " + budget_verdict(in, f, budget) + "\n";
  return out;
}

nlohmann::json plan_json(const PlanInputs& in, std::int64_t budget) {
  const PlanFigures f = plan_figures(in);
  nlohmann::json j = {{"model", in.model},
                      {"device", in.device},
                      {"parameters", in.numel},
                      {"micro_batch", in.micro_batch},
                      {"accumulate", in.accumulate},
                      {"world_size", in.state.world},
                      {"zero_stage", in.state.zero_stage},
                      {"activation_checkpointing", in.checkpointing},
                      {"optimizer", in.optimizer},
                      {"per_rank",
                       {{"parameters_bytes", f.state.params},
                        {"gradients_bytes", f.state.grads},
                        {"optimizer_state_bytes", f.state.optimizer},
                        {"activations_bytes", f.activations},
                        {"buffers_bytes", f.buffers},
                        {"total_bytes", f.total()},
                        {"padding_elements", f.state.padding_elements}}}};
  if (budget > 0) {
    j["budget_bytes"] = budget;
    j["fits"] = f.total() <= budget;
    const auto c = f.total() <= budget ? std::nullopt : cheapest_fit(in, budget);
    const PlanChange s = smallest(in);
    auto change = [](const PlanChange& c) {
      return nlohmann::json{{"zero_stage", c.zero_stage},   {"activation_checkpointing", c.checkpointing},
                            {"micro_batch", c.micro_batch}, {"accumulate", c.accumulate},
                            {"total_bytes", c.bytes},       {"description", c.description}};
    };
    j["change"] = c ? change(*c) : nlohmann::json(nullptr);
    if (f.total() > budget && !c) j["smallest"] = change(s);
  }
  return j;
}

std::string oom_request(const std::string& message) {
  static const std::regex kTried(R"(Tried to allocate ([0-9.]+ ?[KMGT]?i?B))");
  std::smatch m;
  return std::regex_search(message, m, kTried) ? m[1].str() : std::string();
}

std::string oom_line(int rank, const std::string& message, const PlanFigures& plan, std::int64_t micro_batch,
                     const std::string& checkpointing, int zero_stage, int world) {
  const std::string req = oom_request(message);
  auto h = [](std::int64_t b) { return human_bytes(static_cast<std::uint64_t>(b)); };
  const std::string fix = "trainbox train CONFIG --plan --budget SIZE names the cheapest change that fits";
  std::vector<std::string> options;
  if (checkpointing == "none") options.push_back("model.activation_checkpointing = \"blocks\"");
  if (world > 1 && zero_stage < 3) options.push_back(fmt::format("dist.zero_stage = {}", zero_stage + 1));
  if (micro_batch > 1)
    options.push_back(fmt::format("train.batch_size = {} with twice the train.accumulate", micro_batch / 2));
  std::string opts;
  for (std::size_t i = 0; i < options.size(); ++i) opts += (i ? ", " : "") + options[i];
  return fmt::format(
      "rank {}: CUDA out of memory{}; the plan per rank: parameters {}, gradients {}, optimizer state {}, buffers "
      "{}, model state {}{}; fix: {}{}",
      rank, req.empty() ? "" : " allocating " + req, h(plan.state.params), h(plan.state.grads), h(plan.state.optimizer),
      h(plan.buffers), h(plan.state.total()),
      plan.activations > 0 ? fmt::format(", activations {} (measured by --plan)", h(plan.activations)) : "",
      opts.empty() ? "" : opts + "; ", fix);
}

}  // namespace trainbox::train
