// trainbox/distributed/ddp.h — DistributedDataParallel for LibTorch, after PyTorch's design.
//
// Construction checks that every rank holds the same parameter shapes (the error names
// the first parameter that differs), broadcasts parameters and buffers from rank 0, and
// packs the gradients into buckets in *reverse* registration order — about the order
// backward produces them — 1 MiB for the first bucket (so communication starts early),
// 25 MiB after (large enough to amortise the per-collective cost, small enough to overlap
// with backward; the DDP paper's defaults). Each parameter's .grad lives inside its
// bucket, so nothing is copied. A hook after each gradient's accumulation counts the
// bucket down; when a bucket is complete its allreduce starts asynchronously, in bucket
// order on every rank, while backward goes on. (.grad shares the bucket's memory without
// being an autograd view, so LibTorch's own optimizers and zero_grad work unchanged.) At the end of backward the hooks'
// callback waits for every bucket and finishes the average (Gloo has no AVG: sum, then divide), so after
// loss.backward() returns the gradients are averaged across ranks.
//
//   auto ddp = std::make_shared<DistributedDataParallel>(model, pg);   // before the optimizer
//   ddp->before_forward();                         // re-broadcasts buffers (BatchNorm stats)
//   auto loss = loss_fn(model->forward(x), y);
//   ddp->after_forward(loss);                      // only needed with find_unused_parameters
//   loss.backward();                               // gradients are now averaged
//   { auto guard = ddp->no_sync(); … backward … }  // accumulate locally, reduce on the next sync
// One DDP per model; all ranks must run the same sequence of backward passes.
//
// Sharding (ZeRO stages 1 and 2; docs/distributed.md, "Sharding (ZeRO)"): with zero_stage > 0
// each bucket also holds its parameters in one flat tensor (the parameters alias into it as the
// gradients alias the gradient bucket), padded to a multiple of the world size; rank r owns the
// contiguous slice [r·S, (r+1)·S) of every bucket. The optimizer is built on
// optimizer_params() — one flat shard per bucket, its .grad the reduced gradient slice — so
// its state is 1/N the size; after its step, after_step() all-gathers the shards so every rank
// holds whole weights again. Stage 1 all-reduces whole buckets as plain DDP does; stage 2
// reduce-scatters each bucket from the same hooks (overlapped with backward) into a shard-sized
// gradient and frees the full bucket after it (re-allocated at the next before_forward(), so
// no_sync() micro-batches still accumulate locally in it).
//   DdpOptions o; o.zero_stage = 2;
//   DistributedDataParallel ddp(model, pg, o);
//   Optimizer opt(ddp.optimizer_params(), cfg);       // TrainStep clips/unscales across shards
//   … backward …; opt.step(); opt.zero_grad(); ddp.after_step();
//
// Stage 3 (src/distributed/zero3.cpp): the parameters are sharded too. Each bucket is one unit
// (DdpOptions::units: the modules models/activation_checkpoint.h's find_units() finds — a GPT
// block, a ResNet stage, a module you marked), buckets in reverse unit order, the parameters outside every unit one
// more bucket, last; shard_layout() describes the flat layout as at stages 1 and 2. Between uses a rank holds only its
// shard (the optimizer's, in its own storage): the flat bucket's storage is 0 bytes. A unit is all-gathered into it
// just before its forward (the next unit's all-gather issued then, asynchronously) and freed after; again just before
// its backward (a hook on the unit's output gradient; the unit before it prefetched) and freed once its gradients are
// complete, when its reduce-scatter starts. The parameters outside the units are gathered at
// before_forward() and freed at the end of backward. after_step() gathers nothing. A forward
// outside the training step (evaluation, a checkpoint's weights) needs gather_parameters().
// The units' forwards must call before_unit() / after_unit(): the model's trainbox::unit() calls
// do while train::zero3_unit_hooks()'s scope lives (train/step.h; the Trainer sets it up):
//   o.zero_stage = 3; o.units = trainbox::find_units(model);
//   DistributedDataParallel ddp(model, pg, o);
//   auto hooks = train::zero3_unit_hooks(ddp, o);   // before the first forward; destroyed first
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/distributed/compression.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/util/heartbeat.h>

namespace trainbox::dist {

class GradCompressor;

struct DdpOptions {
  std::size_t bucket_cap_bytes = 25u << 20;
  std::size_t first_bucket_bytes = 1u << 20;
  bool find_unused_parameters = false;  // mark parameters the forward did not reach as ready (costs a graph walk)
  bool broadcast_buffers = true;        // re-send rank 0's buffers before each forward
  bool record_events = false;           // keep a log of gradient-ready and allreduce-launch events (tests)
  // Where the end of backward reports phase "allreduce" (waiting for the other ranks' gradients)
  // for a launcher's stall detection (util/heartbeat.h): e.g. &trainbox::heartbeat(), the
  // process's. Not owned; must outlive the DDP. Null: reported nowhere.
  Heartbeat* heartbeat = nullptr;
  // 0: plain DDP; 1: optimizer state sharded; 2: gradients too; 3: parameters too (see above).
  int zero_stage = 0;
  // Stage 3: the units, forward order (their parameters are gathered together; the others are one
  // more unit held for the whole step). Empty: the whole model is that one.
  std::vector<std::shared_ptr<torch::nn::Module>> units;
  // Gloo reduce-scatters as an allreduce plus a slice (measured faster than Gloo's own
  // reduce_scatter); true uses _reduce_scatter_base on Gloo as on NCCL (tests of that path).
  bool native_reduce_scatter = false;
  // What each bucket sends (distributed/compression.h; docs/distributed.md, "Gradient
  // compression"): none, fp16/bf16 (any zero_stage), or powersgd (zero_stage 0 or 1). Every
  // rank must pass the same: construction compares them and names the ranks that differ.
  CompressionOptions compression;
};

// Model-state bytes held by one rank, counted from the live tensors (each storage once).
struct ModelStateBytes {
  std::int64_t params = 0, grads = 0, optimizer = 0;
  // Stage 3: the most bytes of whole (gathered) parameters this rank has held at once so far,
  // transient, not in total(): params is the steady state (the shards).
  std::int64_t gathered_peak = 0;
  std::int64_t total() const { return params + grads + optimizer; }
};
// params: the trainable parameters; grads: their .grad plus any other gradient tensors;
// optimizer_state: the optimizer's state tensors (train::Optimizer::state_tensors()).
ModelStateBytes count_model_state(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                                  const std::vector<torch::Tensor>& optimizer_state);

// What happened during a step, in order (record_events = true). Stage 3 adds its own: a
// bucket's all-gather issued (kGather), its whole parameters freed (kRelease), and a unit's
// forward returned (kUnitEnd, the unit's bucket) — what shows the prefetch order.
struct DdpEvent {
  enum class Kind { kGradReady, kLaunch, kFinish, kGather, kRelease, kUnitEnd } kind;
  int index;  // parameter index (kGradReady) or bucket index (the others)
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                          DdpOptions o = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void before_forward();
  void after_forward(const torch::Tensor& output);

  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& d) : d_(d), prev_(d.no_sync_) { d_.no_sync_ = true; }
    ~NoSyncGuard() { d_.no_sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& d_;
    bool prev_;
  };
  // Gradients of backward passes inside the guard's scope accumulate locally; the next
  // backward outside it reduces the sum.
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  std::size_t bucket_count() const { return buckets_.size(); }
  // Parameter indices (registration order) of each bucket.
  std::vector<std::vector<int>> bucket_layout() const;
  const std::vector<std::string>& parameter_names() const { return names_; }
  std::vector<DdpEvent> take_events();
  torch::nn::Module& module() { return *module_; }
  const std::vector<torch::Tensor>& parameters() const { return params_; }  // the trainable ones, in order
  ProcessGroup& process_group() { return *pg_; }

  // --- sharding (zero_stage > 0; src/distributed/zero.cpp) ---
  int zero_stage() const { return o_.zero_stage; }
  bool sharded() const { return o_.zero_stage > 0; }
  // What the optimizer steps: plain DDP: the parameters; sharded: this rank's flat shard of
  // each bucket (bucket order), whose .grad is the reduced gradient shard.
  std::vector<torch::Tensor> optimizer_params() const;
  // After the optimizer step, every rank: sharded, all-gathers the parameter shards (and, at
  // stage 1, zeroes the rest of the gradient buckets); plain DDP: nothing.
  void after_step();
  // Across the ranks, for what spans the shards (the clip's sum of squares, found_inf).
  void allreduce_sum(torch::Tensor& t);
  void allreduce_max(torch::Tensor& t);
  int world_size() const;  // the ranks whose gradients it averages
  // Each bucket's flat layout: parameters (indices into parameters()) at element offsets,
  // `numel` used of `padded`, this rank's shard [shard_begin, shard_begin + shard_size).
  struct BucketShard {
    std::vector<int> params;
    std::vector<std::int64_t> offsets;
    std::int64_t numel = 0, padded = 0, shard_begin = 0, shard_size = 0;
  };
  std::vector<BucketShard> shard_layout() const;
  std::int64_t padding_elements() const;  // zeros added so every bucket splits evenly
  // This rank's model state now (parameters, gradients, optimizer state), from the live tensors.
  ModelStateBytes model_state_bytes(const std::vector<torch::Tensor>& optimizer_state) const;

  // --- gradient compression (DdpOptions::compression; src/distributed/grad_compressor.cpp) ---
  const CompressionOptions& compression() const { return o_.compression; }
  // This rank's compression state, for checkpoints (empty without compression):
  // "iteration", "seed_draws", "world_size", "error.<bucket>" (error feedback), "q.<bucket>"
  // (warm-start Q). Different on every rank; tensors on the CPU.
  std::vector<std::pair<std::string, torch::Tensor>> compression_state() const;
  // Restores compression_state() of this rank saved at this world size (DataError when it
  // does not fit this model and settings).
  void load_compression_state(const std::vector<std::pair<std::string, torch::Tensor>>& entries);
  // Drops the error feedback and Q (they belong to another world size); the count of
  // synchronised steps (PowerSGD's start_step) continues from `iteration`.
  void reset_compression_state(std::int64_t iteration);

  // --- stage 3 (src/distributed/zero3.cpp); other stages: nothing ---
  // Collective: every unit all-gathered into the module's parameters, kept there (forwards
  // and steps do not free them; after_step() gathers the update) until release_parameters().
  void gather_parameters();
  void release_parameters();
  // Collective: only the parameters outside the units gathered and kept (as gather_parameters);
  // each unit is then gathered by its own forward and freed after it (no backward follows under
  // NoGradGuard): a forward outside the training step, evaluation, with one unit whole at a time.
  void gather_outside_units();
  std::size_t unit_count() const;  // the units with trainable parameters (stage 3), not counting the rest
  // Stage 3: ModelStateBytes::gathered_peak restarts from what is whole now (a per-step peak).
  void reset_gathered_peak();
  // Around a unit's forward (o.units; others: nothing): its parameters gathered, the next unit's
  // prefetched; after: freed, and a hook on the output that gathers them again for the backward.
  void before_unit(const torch::nn::Module& unit);
  torch::Tensor after_unit(const torch::nn::Module& unit, const torch::Tensor& y);

  // Called by the gradient hooks and the end-of-backward callback.
  void on_grad_ready(int param);
  void finalize_backward();

 private:
  struct Bucket {
    std::vector<int> params;  // indices into params_
    std::vector<std::int64_t> offsets;
    // The gradients. Stages 2 and 3: allocated at the bucket's first gradient in a backward and
    // freed once its reduce-scatter is done (at most kGradBucketsInFlight launched buckets wait
    // whole; the older one is finished as the next launches), so no rank holds the whole gradient.
    torch::Tensor flat;
    std::int64_t numel = 0, padded = 0;   // elements used; allocated (sharded: a multiple of the world size)
    torch::Tensor pflat, pshard, gshard;  // sharded: flat parameters; this rank's slice of them; its gradient
    int pending = 0;
    c10::intrusive_ptr<c10d::Work> work;  // the bucket's allreduce, once launched
  };
  static constexpr std::size_t kGradBucketsInFlight = 1;  // stages 2 and 3: launched, not yet finished
  static torch::Tensor bucket_alias(Bucket& bk, std::size_t k, const torch::Tensor& p);
  void check_shapes();
  void broadcast_from_rank0(std::vector<torch::Tensor> tensors);
  void build_buckets();
  void setup_compression();
  void launch_ready_buckets();
  void finish_bucket(std::size_t b);  // wait for its collective, the average in place; stage 2/3: freed
  void reset_iteration();
  void setup_shards();                   // zero.cpp: flat parameters, shards
  void ensure_bucket_grads(Bucket& bk);  // stages 2/3: the bucket's gradients back, zeroed (aliases)
  void release_bucket_grads(Bucket& bk);
  void release_full_grads();
  std::int64_t shard_begin(const Bucket& bk) const;
  // stage 3 (zero3.cpp)
  struct Zero3;
  void group_by_unit();          // the buckets: one per unit, then the rest
  void setup_zero3(int bucket);  // its shard in its own storage, the whole bucket freed
  void zero3_before_forward();
  void zero3_grads_done(int bucket);
  void zero3_end_backward();
  void zero3_after_step();
  ModelStateBytes zero3_model_state(const std::vector<torch::Tensor>& grads,
                                    const std::vector<torch::Tensor>& optimizer_state) const;
  std::shared_ptr<Zero3> z3_;  // shared_ptr: its type is complete in zero3.cpp only

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  DdpOptions o_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::pair<int, int>> slot_;  // param → (bucket, position in bucket)
  std::vector<Bucket> buckets_;
  std::vector<bool> ready_;
  std::vector<bool> unused_;
  std::size_t next_launch_ = 0, next_finish_ = 0;
  bool callback_queued_ = false;
  bool no_sync_ = false;
  std::mutex mu_;
  std::vector<DdpEvent> events_;
  std::unique_ptr<GradCompressor> compressor_;
  torch::Tensor
      no_shard_;  // undefined: the compressor all-reduces whole buckets  // with DdpOptions::compression.method != none
};

}  // namespace trainbox::dist
