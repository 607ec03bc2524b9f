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

// A configuration of the job the plan weighs: the one configured, or a change to it.
struct Setting {
  int stage = 0;
  bool checkpointing = false;  // "blocks" switched on by the change
  std::int64_t micro = 1, eval_batch = 0;
};

// The gradient buckets' sizes (elements), bucket by bucket, as DistributedDataParallel's
// build_buckets makes them at stages 0-2 (src/distributed/ddp.cpp): the parameters in reverse
// registration order, a bucket closed once it holds first_bucket_bytes (the first) or
// bucket_cap_bytes (the rest).
std::vector<std::int64_t> gradient_buckets(const PlanInputs& in) {
  std::vector<std::int64_t> out;
  std::int64_t n = 0, cap = in.first_bucket_bytes;
  for (auto it = in.param_numel.rbegin(); it != in.param_numel.rend(); ++it) {
    n += *it;
    if (n * in.state.grad_bytes >= cap) {
      out.push_back(n);
      n = 0;
      cap = in.bucket_cap_bytes;
    }
  }
  if (n > 0) out.push_back(n);
  return out;
}

// The most elements two neighbouring entries hold together (one, if there is only one).
std::int64_t largest_pair(const std::vector<std::int64_t>& v) {
  std::int64_t best = v.empty() ? 0 : v.front();
  for (std::size_t i = 1; i < v.size(); ++i) best = std::max(best, v[i - 1] + v[i]);
  return best;
}

std::int64_t sum_of(const std::vector<std::int64_t>& v) {
  std::int64_t s = 0;
  for (auto x : v) s += x;
  return s;
}

std::string h(std::int64_t b) { return human_bytes(static_cast<std::uint64_t>(std::max<std::int64_t>(b, 0))); }

// One phase from its parts (the parts of 0 bytes left out of its words).
PlanPhase phase(const std::string& name, std::int64_t persistent,
                const std::vector<std::pair<std::int64_t, std::string>>& parts) {
  PlanPhase p;
  p.name = name;
  for (const auto& [bytes, what] : parts) {
    if (bytes <= 0) continue;
    p.own += bytes;
    p.what += (p.what.empty() ? "" : ", ") + fmt::format("{} {}", what, h(bytes));
  }
  p.bytes = persistent + p.own;
  return p;
}

PlanFigures figures_at(const PlanInputs& in, const Setting& at) {
  PlanFigures f;
  const int stage = at.stage, world = in.state.world;
  const bool distributed = world > 1;  // a world of 1 has no DDP: no buckets, no compression
  f.state = zero_model_state(with_stage(in.state, stage));
  const ActivationModel& act = at.checkpointing && in.checkpointed ? *in.checkpointed : in.activations;
  f.activations = act.at(at.micro);
  f.buffers = in.buffers;
  f.data = in.data;
  f.frozen = in.frozen;
  const std::int64_t pb = in.state.param_bytes, gb = in.state.grad_bytes;
  const auto buckets = gradient_buckets(in);
  const std::int64_t largest_bucket = buckets.empty() ? 0 : *std::max_element(buckets.begin(), buckets.end());
  // PowerSGD keeps, per bucket, the error feedback and the buffer the next step's input is
  // built in (gradient + error): two gradients (stage-0 AdamW: 16 -> 24 B/param).
  const bool powersgd = distributed && in.compression == "powersgd";
  if (powersgd && in.error_feedback) f.compression = 2 * in.numel * gb;
  const std::int64_t persistent = f.persistent();

  // --- stage 3: the rest held whole through a step, each unit gathered with the next one prefetched ---
  std::int64_t gathered = 0;
  if (distributed && stage >= 3) gathered = in.numel - sum_of(in.unit_numel) + largest_pair(in.unit_numel);
  // --- the whole gradients backward holds at stages 2 and 3 before their reduce-scatter ---
  std::int64_t whole_grads = 0;
  if (distributed && stage == 2) whole_grads = largest_pair(buckets);  // one filling, one launched
  if (distributed && stage >= 3) whole_grads = gathered;               // the rest's bucket (reduced last) + two units
  // fp16/bf16: each bucket's 16-bit copy, kept until the end of backward at stages 0/1
  std::int64_t low = 0;
  if (distributed && (in.compression == "bf16" || in.compression == "fp16"))
    low = 2 * (stage >= 2 ? largest_pair(buckets) : in.numel);
  const std::int64_t loader = in.prefetch + 1;  // the batches prepared ahead and the one in use
  f.phases.push_back(
      phase("training step", persistent,
            {{f.activations, fmt::format("activations at micro-batch {} (measured)", at.micro)},
             {in.optimizer_step, "optimizer step (measured)"},
             {gathered * pb, "stage-3 parameters gathered (the rest and two units)"},
             {whole_grads * gb, stage >= 3 ? "their whole gradients" : "whole gradients of two buckets"},
             {low, fmt::format("{} copies of the buckets", in.compression)},
             {loader * at.micro * in.train_sample_bytes, fmt::format("{} batches in the loader", loader)}}));
  if (at.eval_batch > 0) {
    const ActivationModel& ev = in.eval_activations;
    f.phases.push_back(phase(
        "evaluation", persistent,
        {{ev.at(at.eval_batch), fmt::format("forward at train.eval_batch_size {} ({})", at.eval_batch,
                                            at.eval_batch <= in.eval_measured_at
                                                ? std::string("measured")
                                                : fmt::format("measured at {}, linear beyond", in.eval_measured_at))},
         {gathered * pb, "stage-3 parameters gathered (the rest and two units)"},
         {loader * at.eval_batch * in.eval_sample_bytes + in.prefetch * at.micro * in.train_sample_bytes,
          "batches in the loaders"}}));
  }
  // --- checkpoint save (rank 0, the largest): what it copies on this device ---
  std::int64_t shard_copy = 0, ef_gather = 0;
  if (distributed && in.host_device && (stage == 1 || stage == 2))
    shard_copy = (in.numel + world - 1) / world * pb;  // the parameter shard, a slice of its bucket, copied whole
  if (powersgd && in.error_feedback)  // every rank's error feedback gathered to rank 0, bucket by bucket
    ef_gather = (world + 1) * largest_bucket * gb + (in.host_device ? (world + 1) * in.numel * gb : 0);
  f.phases.push_back(phase("checkpoint save", persistent,
                           {{shard_copy, "the parameter shard's copy"},
                            {ef_gather, fmt::format("every rank's error feedback gathered ({} ranks)", world)}}));
  return f;
}

Setting configured(const PlanInputs& in) { return {in.state.zero_stage, false, in.micro_batch, in.eval_batch}; }

std::string describe(const PlanInputs& in, const PlanChange& c) {
  std::vector<std::string> parts;
  if (c.zero_stage != in.state.zero_stage)
    parts.push_back(
        fmt::format("dist.zero_stage = {} at {} rank{}", c.zero_stage, in.state.world, in.state.world == 1 ? "" : "s"));
  if (c.checkpointing) parts.push_back("model.activation_checkpointing = \"blocks\"");
  if (c.micro_batch != in.micro_batch)
    parts.push_back(fmt::format("train.batch_size = {} with train.accumulate = {} (the same global batch)",
                                c.micro_batch, c.accumulate));
  if (c.eval_batch != in.eval_batch) parts.push_back(fmt::format("train.eval_batch_size = {}", c.eval_batch));
  std::string what = parts.empty() ? "as configured" : parts[0];
  for (std::size_t i = 1; i < parts.size(); ++i) what += " + " + parts[i];
  return fmt::format("{}: {} per rank", what, human_bytes(static_cast<std::uint64_t>(c.bytes)));
}

// Every change considered: the stages from the configured one up (stages > 0 only when the
// world has more than one rank to shard over), checkpointing on or off, the micro-batch
// divided by each divisor (accumulation multiplied by it), the evaluation batch halved.
std::vector<PlanChange> candidates(const PlanInputs& in) {
  std::vector<PlanChange> out;
  const bool ckpt_now = in.checkpointing != "none";
  const int top_stage = in.state.world > 1 && in.zero_available ? 3 : in.state.zero_stage;
  std::vector<std::int64_t> evals{in.eval_batch};
  while (evals.back() > 1) evals.push_back(evals.back() / 2);
  for (int stage = in.state.zero_stage; stage <= top_stage; ++stage)
    for (int ck = 0; ck < 2; ++ck) {
      if (ck && (ckpt_now || !in.checkpointed)) continue;
      for (std::int64_t d = 1; d <= in.micro_batch; ++d) {
        if (in.micro_batch % d != 0) continue;
        for (std::size_t e = 0; e < evals.size(); ++e) {
          PlanChange c;
          c.zero_stage = stage;
          c.checkpointing = ck != 0;
          c.micro_batch = in.micro_batch / d;
          c.accumulate = in.accumulate * d;
          c.eval_batch = evals[e];
          c.bytes = figures_at(in, {stage, c.checkpointing, c.micro_batch, c.eval_batch}).total();
          const double stage_cost = stage >= 3 ? 0.5 : stage == 2 ? 0.02 : stage == 1 ? 0.01 : 0.0;
          c.cost = (stage > in.state.zero_stage ? stage_cost : 0.0) + (c.checkpointing ? 0.33 : 0.0) +
                   0.2 * std::log2(static_cast<double>(d)) + 0.005 * static_cast<double>(e);
          c.description = describe(in, c);
          out.push_back(c);
        }
      }
    }
  return out;
}

}  // namespace

const PlanPhase& PlanFigures::peak() const {
  static const PlanPhase kNone;
  if (phases.empty()) return kNone;
  return *std::max_element(phases.begin(), phases.end(),
                           [](const PlanPhase& a, const PlanPhase& b) { return a.bytes < b.bytes; });
}

PlanFigures plan_figures(const PlanInputs& in) { return figures_at(in, configured(in)); }

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
  const std::string b = fmt::format("{} ({} bytes)", h(budget), budget);
  const PlanPhase& peak = f.peak();
  if (f.total() <= budget)
    return fmt::format("fits the budget of {} per rank ({} left at its peak, the {})", b, h(budget - f.total()),
                       peak.name);
  // A full fine-tune that does not fit: the LoRA fine-tune of the same model is the field's answer.
  const std::string lora =
      in.lora_alternative > 0
          ? fmt::format("; a LoRA fine-tune {} needs about {}{}", in.lora_alternative_text, h(in.lora_alternative),
                        in.lora_alternative <= budget ? " (fits)" : " (does not fit either)")
          : "";
  if (auto c = cheapest_fit(in, budget))
    return fmt::format("does not fit the budget of {} per rank (the {} needs {}); the cheapest change that fits: {}{}",
                       b, peak.name, h(peak.bytes), c->description, lora);
  return fmt::format(
      "does not fit the budget of {} per rank (the {} needs {}), and no change here fits; the smallest "
      "is {}{}",
      b, peak.name, h(peak.bytes), smallest(in).description, lora);
}
}  // namespace

std::string format_plan(const PlanInputs& in, std::int64_t budget) {
  const PlanFigures f = plan_figures(in);
  auto row = [](const std::string& what, std::int64_t bytes, const std::string& note) {
    return fmt::format("  {:<17} {:>12} {:>16}{}\n", what, h(bytes), bytes, note.empty() ? "" : "  " + note);
  };
  const int slots = in.state.optimizer_slots;
  std::string out = fmt::format(
      "# trainbox train --plan: {} ({} parameters) on {}, micro-batch {} x accumulate {}, world {}, "
      "dist.zero_stage {}, model.activation_checkpointing {}, train.eval_batch_size {}, dist.grad_compression {}\n",
      in.model, in.numel, in.device, in.micro_batch, in.accumulate, in.state.world, in.state.zero_stage,
      in.checkpointing, in.eval_batch, in.compression);
  out += fmt::format("# per rank (each rank of the job needs the same; rank 0's checkpoint save is shown){}\n",
                     f.state.padding_elements > 0
                         ? fmt::format("; {} padding elements split the flat buffer into {} equal shards",
                                       f.state.padding_elements, in.state.world)
                         : "");
  out += fmt::format("  {:<17} {:>12} {:>16}\n", "", "size", "bytes");
  out += row("parameters", f.state.params, fmt::format("{} B each", in.state.param_bytes));
  out += row("gradients", f.state.grads, "");
  out += row("optimizer state", f.state.optimizer,
             fmt::format("{}: {} slot{} of {} B", in.optimizer, slots, slots == 1 ? "" : "s", in.state.state_bytes));
  if (f.compression > 0) out += row("compression", f.compression, "powersgd: error feedback and input copy");
  if (f.frozen > 0)
    out += row("frozen weights", f.frozen,
               fmt::format("LoRA's base at {}: no gradient, no optimizer state", in.frozen_dtype));
  out += row("buffers", f.buffers, "");
  if (f.data > 0) out += row("data", f.data, fmt::format("the dataset on {} (measured)", in.device));
  out += row("held throughout", f.persistent(), "");
  out += row("activations", f.activations,
             fmt::format("measured: one forward/backward at micro-batch {} on {}", in.micro_batch, in.device));
  out += "# phases: each holds the above and its own\n";
  for (const auto& p : f.phases) out += row(p.name, p.bytes, p.what.empty() ? "nothing more" : p.what);
  out += row("total", f.total(), "the peak: the " + f.peak().name);
  if (budget > 0) out += "budget: " + budget_verdict(in, f, budget) + "\n";
  return out;
}

nlohmann::json plan_json(const PlanInputs& in, std::int64_t budget) {
  const PlanFigures f = plan_figures(in);
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& p : f.phases)
    phases.push_back({{"name", p.name}, {"bytes", p.bytes}, {"own_bytes", p.own}, {"what", p.what}});
  nlohmann::json j = {{"model", in.model},
                      {"device", in.device},
                      {"parameters", in.numel},
                      {"micro_batch", in.micro_batch},
                      {"accumulate", in.accumulate},
                      {"eval_batch", in.eval_batch},
                      {"world_size", in.state.world},
                      {"zero_stage", in.state.zero_stage},
                      {"activation_checkpointing", in.checkpointing},
                      {"grad_compression", in.compression},
                      {"optimizer", in.optimizer},
                      {"per_rank",
                       {{"parameters_bytes", f.state.params},
                        {"gradients_bytes", f.state.grads},
                        {"optimizer_state_bytes", f.state.optimizer},
                        {"compression_state_bytes", f.compression},
                        {"buffers_bytes", f.buffers},
                        {"frozen_bytes", f.frozen},
                        {"data_bytes", f.data},
                        {"persistent_bytes", f.persistent()},
                        {"activations_bytes", f.activations},
                        {"phases", phases},
                        {"peak_phase", f.peak().name},
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
                            {"eval_batch", c.eval_batch},   {"total_bytes", c.bytes},
                            {"description", c.description}};
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
