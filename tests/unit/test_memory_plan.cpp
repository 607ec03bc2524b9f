// The memory plan's arithmetic (train/memory_plan.h) against ZeRO's figures (Rajbhandari et
// al., SC'20; fp32 AdamW 16 B/param: 12 / 10 / 8 at 2 ranks, 10 / 7 / 4 at 4), the change it
// names for a budget, and the out-of-memory line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <trainbox/train/config.h>
#include <trainbox/train/config_rules.h>
#include <trainbox/train/memory_plan.h>
#include <trainbox/util/errors.h>

using namespace trainbox;
using namespace trainbox::train;

namespace {

ModelStateInputs adamw(std::int64_t numel, int stage, int world) {
  ModelStateInputs in;
  in.numel = numel;
  in.zero_stage = stage;
  in.world = world;
  return in;
}

TEST(MemoryPlan, ZeroStagesAsThePaperSays) {
  const std::int64_t n = 124'439'808;  // GPT-2 124M (llm.c); divisible by 4
  EXPECT_EQ(zero_model_state(adamw(n, 0, 4)).total(), 16 * n);
  const double want2[] = {16, 12, 10, 8}, want4[] = {16, 10, 7, 4};
  for (int stage = 0; stage <= 3; ++stage) {
    EXPECT_DOUBLE_EQ(double(zero_model_state(adamw(n, stage, 2)).total()) / double(n), want2[stage]) << stage;
    EXPECT_DOUBLE_EQ(double(zero_model_state(adamw(n, stage, 4)).total()) / double(n), want4[stage]) << stage;
  }
  const auto s2 = zero_model_state(adamw(n, 2, 4));
  EXPECT_EQ(s2.params, 4 * n);
  EXPECT_EQ(s2.grads, n);
  EXPECT_EQ(s2.optimizer, 2 * n);
  EXPECT_EQ(s2.padding_elements, 0);
}

TEST(MemoryPlan, PaddingSplitsTheFlatBufferIntoEqualShards) {
  const auto s = zero_model_state(adamw(10, 3, 4));  // 10 -> 12 elements, 3 per rank
  EXPECT_EQ(s.padding_elements, 2);
  EXPECT_EQ(s.total(), 3 * 16);
  ModelStateInputs in = adamw(10, 1, 4);
  in.pad_multiple = 8;  // e.g. 8-element alignment of the whole buffer: 16 elements, 4 per rank
  EXPECT_EQ(zero_model_state(in).optimizer, 4 * 8);
  EXPECT_EQ(zero_model_state(adamw(10, 0, 4)).padding_elements, 0);
  EXPECT_THROW(zero_model_state(adamw(10, 4, 4)), UsageError);
  EXPECT_THROW(zero_model_state(adamw(10, 1, 0)), UsageError);
}

TEST(MemoryPlan, OptimizerSlotsAndStageKey) {
  OptimConfig o;
  o.name = "adamw";
  EXPECT_EQ(optimizer_slots(o), 2);
  o.name = "sgd";
  EXPECT_EQ(optimizer_slots(o), 0);
  o.momentum = 0.9;
  EXPECT_EQ(optimizer_slots(o), 1);
  Config c;
  bool has_key = false;
  for (const auto& f : config_fields()) has_key = has_key || f.key == "dist.zero_stage";
  if (!has_key)
    EXPECT_EQ(configured_zero_stage(c), 0);  // a build without the key plans plain DDP
  else
    EXPECT_EQ(configured_zero_stage(c), std::stoi(config_value(c, "dist.zero_stage")));
}

TEST(MemoryPlan, ActivationModelFromTwoMeasurements) {
  const auto m = ActivationModel::from(16, 1000 + 16 * 50, 8, 1000 + 8 * 50);
  EXPECT_EQ(m.at(16), 1800);
  EXPECT_EQ(m.at(4), 1200);
  EXPECT_EQ(ActivationModel::from(8, 800).at(2), 200);  // one measurement: proportional
}

PlanInputs job() {
  PlanInputs in;
  in.model = "gpt";
  in.device = "cuda:0";
  in.host_device = false;  // a checkpoint's copies go to the host
  in.numel = 100'000'000;
  in.state = adamw(in.numel, 0, 4);  // 1.6 GB of model state
  in.optimizer = "adamw";
  in.micro_batch = 16;
  in.activations = ActivationModel::from(16, 1'600'000'000);  // 100 MB a sample
  in.checkpointed = ActivationModel::from(16, 160'000'000);   // a tenth
  return in;
}

TEST(MemoryPlan, CheapestChangeThatFits) {
  PlanInputs in = job();
  EXPECT_EQ(plan_figures(in).total(), 3'200'000'000);
  // 2.5 GB: stage 1 (10 B/param) 1.0e9 + 1.6e9 = 2.6e9 no; stage 2 (7 B/param) 0.7e9 + 1.6e9 = 2.3e9 yes
  EXPECT_EQ(cheapest_fit(in, 2'600'000'000)->zero_stage, 1);
  auto c = cheapest_fit(in, 2'500'000'000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->zero_stage, 2);
  EXPECT_FALSE(c->checkpointing);
  EXPECT_EQ(c->micro_batch, 16);
  EXPECT_EQ(c->bytes, 2'300'000'000);
  EXPECT_NE(c->description.find("dist.zero_stage = 2 at 4 ranks: 2.1 GiB per rank"), std::string::npos)
      << c->description;
  // 1 GB: stage 2 + checkpointing (0.7e9 + 0.16e9) beats stage 3 (0.4e9 + 1.6e9 does not fit anyway)
  c = cheapest_fit(in, 1'000'000'000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->zero_stage, 2);
  EXPECT_TRUE(c->checkpointing);
  // a build without dist.zero_stage proposes no stage: checkpointing at 4 ranks
  in.zero_available = false;
  c = cheapest_fit(in, 1'800'000'000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->zero_stage, 0);
  EXPECT_TRUE(c->checkpointing);
  in.zero_available = true;
  // one rank: no sharding; checkpointing alone (1.6e9 + 0.16e9) fits 1.8 GB
  in.state.world = 1;
  c = cheapest_fit(in, 1'800'000'000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->zero_stage, 0);
  EXPECT_TRUE(c->checkpointing);
  // 1.7 GB at one rank: checkpointing and micro-batch 8 (accumulate 2): 1.6e9 + 0.08e9
  c = cheapest_fit(in, 1'700'000'000);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->checkpointing);
  EXPECT_EQ(c->micro_batch, 8);
  EXPECT_EQ(c->accumulate, 2);
  // below the model state alone: nothing fits, and the smallest is named
  EXPECT_FALSE(cheapest_fit(in, 1'000'000'000));
  EXPECT_NE(format_plan(in, 1'000'000'000).find("no change here fits; the smallest is"), std::string::npos);
  const auto j = plan_json(in, 1'000'000'000);
  EXPECT_FALSE(j["fits"].get<bool>());
  EXPECT_TRUE(j["change"].is_null());
  EXPECT_EQ(j["smallest"]["micro_batch"], 1);
}

TEST(MemoryPlan, TextAndJsonAgree) {
  const PlanInputs in = job();
  const auto j = plan_json(in, 0);
  const auto& r = j["per_rank"];
  EXPECT_EQ(r["parameters_bytes"].get<std::int64_t>(), 400'000'000);
  EXPECT_EQ(r["gradients_bytes"].get<std::int64_t>(), 400'000'000);
  EXPECT_EQ(r["optimizer_state_bytes"].get<std::int64_t>(), 800'000'000);
  EXPECT_EQ(r["activations_bytes"].get<std::int64_t>(), 1'600'000'000);
  EXPECT_EQ(r["total_bytes"].get<std::int64_t>(), 3'200'000'000);
  const std::string text = format_plan(in, 0);
  EXPECT_NE(text.find("3200000000"), std::string::npos) << text;
  EXPECT_EQ(text.find("budget"), std::string::npos);
}

// Issue 43: the plan measured the training step alone and approved a job whose evaluation
// (train.eval_batch_size 128) needed 2.2x as much. Every phase is a figure; the largest is the total.
TEST(MemoryPlan, TheEvaluationCanBeThePeakAndTheBudgetIsGatedOnIt) {
  PlanInputs in = job();
  in.eval_batch = 1000;
  in.eval_measured_at = 256;
  in.eval_activations = ActivationModel::from(256, 256 * 4'000'000);  // 4 MB a sample: 4.0e9 at 1000
  const PlanFigures f = plan_figures(in);
  ASSERT_EQ(f.phases.size(), 3u);
  EXPECT_EQ(f.phases[0].name, "training step");
  EXPECT_EQ(f.phases[0].bytes, 3'200'000'000);
  EXPECT_EQ(f.phases[1].name, "evaluation");
  EXPECT_EQ(f.phases[1].bytes, 1'600'000'000 + 4'000'000'000);
  EXPECT_EQ(f.peak().name, "evaluation");
  EXPECT_EQ(f.total(), 5'600'000'000);
  EXPECT_NE(f.phases[1].what.find("train.eval_batch_size 1000 (measured at 256, linear beyond)"), std::string::npos)
      << f.phases[1].what;
  // 3.5 GB holds the step but not the evaluation: a smaller evaluation batch is the cheapest change
  auto c = cheapest_fit(in, 3'500'000'000);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->zero_stage, 0);
  EXPECT_EQ(c->eval_batch, 250);  // 1.6e9 + 1.0e9: 1000 -> 500 (3.6e9) does not fit
  EXPECT_NE(c->description.find("train.eval_batch_size = 250"), std::string::npos) << c->description;
  const std::string text = format_plan(in, 3'500'000'000);
  EXPECT_NE(text.find("the peak: the evaluation"), std::string::npos) << text;
  EXPECT_NE(text.find("does not fit the budget of 3.3 GiB (3500000000 bytes) per rank (the evaluation needs"),
            std::string::npos)
      << text;
  const auto j = plan_json(in, 3'500'000'000);
  EXPECT_EQ(j["per_rank"]["peak_phase"], "evaluation");
  EXPECT_EQ(j["per_rank"]["total_bytes"].get<std::int64_t>(), 5'600'000'000);
  EXPECT_FALSE(j["fits"].get<bool>());
}

// PowerSGD keeps the error feedback and its input copy: two gradients (stage-0 AdamW 16 -> 24
// B/param); a checkpoint gathers every rank's error feedback to rank 0.
TEST(MemoryPlan, PowerSgdHoldsTwoMoreGradients) {
  PlanInputs in;
  in.numel = 1'000'000;
  in.state = adamw(in.numel, 0, 2);
  in.param_numel = {1'000'000};
  in.compression = "powersgd";
  in.host_device = false;
  PlanFigures f = plan_figures(in);
  EXPECT_EQ(f.compression, 8'000'000);
  EXPECT_EQ(f.persistent(), 24'000'000);
  EXPECT_EQ(f.phases.back().name, "checkpoint save");
  EXPECT_EQ(f.phases.back().own, 3 * 4'000'000);  // this rank's copy + 2 ranks' gathered, on the device
  in.error_feedback = false;
  EXPECT_EQ(plan_figures(in).persistent(), 16'000'000);
  in.error_feedback = true;
  in.state.world = 1;  // no DDP at one rank: nothing is compressed
  EXPECT_EQ(plan_figures(in).persistent(), 16'000'000);
}

// Stage 3: the parameters outside the units held whole through a step, and two neighbouring
// units gathered at once (one running, the next prefetched), their gradients whole as well.
TEST(MemoryPlan, StageThreeGathersTheRestAndTwoUnits) {
  PlanInputs in;
  in.numel = 1000;
  in.state = adamw(in.numel, 3, 4);
  in.param_numel = {100, 300, 300, 200, 100};
  in.unit_numel = {300, 300, 200};  // the rest: 200
  in.host_device = false;
  const PlanFigures f = plan_figures(in);
  EXPECT_EQ(f.persistent(), 4000);  // 16 B/param over 4 ranks
  EXPECT_EQ(f.phases[0].own, (200 + 600) * 4 * 2);
  EXPECT_NE(f.phases[0].what.find("stage-3 parameters gathered (the rest and two units)"), std::string::npos);
  in.state.zero_stage = 2;  // one bucket (under 1 MiB): its whole gradient
  EXPECT_EQ(plan_figures(in).phases[0].own, 1000 * 4);
}

TEST(MemoryPlan, OutOfMemoryLine) {
  const std::string msg =
      "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.2 GiB is "
      "free.\nOf the allocated memory ...";
  EXPECT_EQ(oom_request(msg), "20.00 GiB");
  EXPECT_EQ(oom_request("something else"), "");
  PlanFigures f;
  f.state = zero_model_state(adamw(1 << 20, 0, 2));
  const std::string line = oom_line(1, msg, f, 64, "none", 0, 2);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("rank 1: CUDA out of memory allocating 20.00 GiB"), std::string::npos) << line;
  EXPECT_NE(line.find("parameters 4.0 MiB, gradients 4.0 MiB, optimizer state 8.0 MiB"), std::string::npos) << line;
  EXPECT_NE(line.find("model.activation_checkpointing = \"blocks\", dist.zero_stage = 1, train.batch_size = 32"),
            std::string::npos)
      << line;
}

}  // namespace
