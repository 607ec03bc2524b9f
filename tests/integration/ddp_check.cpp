// DDP checks, run as N ranks (trainbox run, torchrun, or RANK/WORLD_SIZE set by hand):
//  1. equivalence: N ranks × batch 32 for k steps == 1 process × batch 32·N on the same data
//     order (within kEquivTol relative to the largest parameter), and parameters
//     bit-identical across ranks;
//  2. the same with accumulate = 2 micro-batches, the first under no_sync();
//  3. overlap: the first bucket's allreduce is launched before backward has produced the
//     gradient of a parameter in the last bucket;
//  mode "mismatch": rank 1 builds a different model → a ConfigError naming the parameter.
// Exit 0 when every check holds; trainbox's exit codes otherwise.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/data/sampler.h>
#include <trainbox/distributed/ddp.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/models/models.h>
#include <trainbox/train/optim.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {
constexpr std::int64_t kSamples = 768, kRankBatch = 32, kSteps = 6;
// Two float32 roundings of the largest parameter (2 x 2^-23 = 2.4e-7): the N-rank and 1-rank
// gradients are the same sums in another order. Measured 6.7e-8 for 2 and 3 ranks.
constexpr double kEquivTol = 2 * 1.1920928955078125e-7;  // claim: ddp.params_vs_one_process

std::shared_ptr<models::Model> make(const std::vector<std::int64_t>& hidden) {
  torch::manual_seed(0);
  train::ModelConfig mc;
  mc.hidden = hidden;
  return models::make_model(mc, {1, 4, 5}, 5);
}

train::OptimConfig sgd() {
  train::OptimConfig o;
  o.name = "sgd";
  o.lr = 0.1;
  o.momentum = 0.9;
  return o;
}

torch::Tensor flat_params(models::Model& m) {
  std::vector<torch::Tensor> ps;
  for (auto& p : m.parameters()) ps.push_back(p.detach().reshape({-1}));
  return torch::cat(ps);
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  try {
    auto env = dist::WorkerEnv::from_environment();
    dist::ProcessGroupOptions po;
    po.timeout = std::chrono::seconds(60);
    auto pg = dist::ProcessGroup::init(env, po);
    const int world = pg->size(), rank = pg->rank();
    const std::int64_t kGlobalBatch = kRankBatch * world;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
    auto X = torch::randn({kSamples, 1, 4, 5}, gen), Y = torch::randint(5, {kSamples}, gen, torch::kInt64);
    std::vector<std::int64_t> hidden = {64, 64, 64};
    if (mode == "mismatch" && rank == 1) hidden = {64, 32, 64};
    int failures = 0;
    auto expect = [&](bool ok, const std::string& what) {
      if (rank == 0) std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
      failures += !ok;
    };

    for (int accumulate : {1, 2}) {
      // --- reference: one process, the whole batch ---
      auto ref = make(hidden);
      train::Optimizer ref_opt(ref->parameters(), sgd());
      data::DistributedSampler all(kSamples, {0, 1, true, 7, false});
      all.set_epoch(0);
      auto order = all.indices();
      for (std::int64_t s = 0; s < kSteps; ++s) {
        auto idx = order.slice(0, s * kGlobalBatch, (s + 1) * kGlobalBatch);
        torch::nn::functional::cross_entropy(ref->forward(X.index_select(0, idx)), Y.index_select(0, idx)).backward();
        ref_opt.step();
        ref_opt.zero_grad();
      }
      // --- DDP: each rank its shard, batch kGlobalBatch / world, small buckets ---
      auto model = make(hidden);
      dist::DdpOptions o;
      o.first_bucket_bytes = 1024;
      o.bucket_cap_bytes = 8 * 1024;
      o.record_events = true;
      dist::DistributedDataParallel ddp(model, pg, o);
      train::Optimizer opt(model->parameters(), sgd());
      data::DistributedSampler mine(kSamples, {rank, world, true, 7, false});
      mine.set_epoch(0);
      auto shard = mine.indices();
      const std::int64_t b = kRankBatch, micro = b / accumulate;
      for (std::int64_t s = 0; s < kSteps; ++s) {
        for (int m = 0; m < accumulate; ++m) {
          auto idx = shard.slice(0, s * b + m * micro, s * b + (m + 1) * micro);
          ddp.before_forward();
          auto loss =
              torch::nn::functional::cross_entropy(model->forward(X.index_select(0, idx)), Y.index_select(0, idx)) /
              double(accumulate);
          if (m + 1 < accumulate) {
            auto guard = ddp.no_sync();
            loss.backward();
          } else {
            loss.backward();
          }
        }
        if (s == 0 && accumulate == 1) {
          // --- overlap: bucket 0 launched before the last bucket's gradients existed ---
          auto ev = ddp.take_events();
          auto layout = ddp.bucket_layout();
          int last_param = layout.back().front();
          std::ptrdiff_t launch0 = -1, ready_last = -1;
          for (std::size_t k = 0; k < ev.size(); ++k) {
            if (ev[k].kind == dist::DdpEvent::Kind::kLaunch && ev[k].index == 0 && launch0 < 0) launch0 = k;
            if (ev[k].kind == dist::DdpEvent::Kind::kGradReady && ev[k].index == last_param) ready_last = k;
          }
          expect(layout.size() >= 3, fmt::format("{} buckets (first 1 KiB, then 8 KiB)", layout.size()));
          expect(
              launch0 >= 0 && ready_last >= 0 && launch0 < ready_last,
              fmt::format("overlap: bucket 0 allreduce launched at event {}, gradient of '{}' (last bucket) ready at "
                          "event {}",
                          launch0, ddp.parameter_names()[last_param], ready_last));
        }
        opt.step();
        opt.zero_grad();
      }
      // --- identical across ranks, equal to the reference ---
      auto p = flat_params(*model);
      auto hi = p.clone(), lo = -p;
      pg->allreduce_op(hi, c10d::ReduceOp::MAX);
      pg->allreduce_op(lo, c10d::ReduceOp::MAX);
      expect(hi.equal(-lo), fmt::format("accumulate={}: parameters bit-identical on all {} ranks", accumulate, world));
      auto r = flat_params(*ref);
      double rel = ((p - r).abs().max() / r.abs().max()).item<double>();
      expect(rel <= kEquivTol, fmt::format("accumulate={}: {} ranks x batch {} == 1 x batch {} after {} steps (max rel "
                                           "diff {:.2e}, tolerance {:.1e})",
                                           accumulate, world, b, kGlobalBatch, kSteps, rel, kEquivTol));
    }
    pg->barrier();
    return failures ? 1 : 0;
  } catch (const Error& e) {
    return report_error(e, "ddp_check");
  }
}
