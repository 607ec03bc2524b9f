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
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/distributed/process_group.h>
#include <trainbox/util/heartbeat.h>

namespace trainbox::dist {

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
};

// What happened during a backward pass, in order (record_events = true).
struct DdpEvent {
  enum class Kind { kGradReady, kLaunch, kFinish } kind;
  int index;  // parameter index (kGradReady) or bucket index (kLaunch, kFinish)
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

  // Called by the gradient hooks and the end-of-backward callback.
  void on_grad_ready(int param);
  void finalize_backward();

 private:
  struct Bucket {
    std::vector<int> params;  // indices into params_
    std::vector<std::int64_t> offsets;
    torch::Tensor flat;
    int pending = 0;
    c10::intrusive_ptr<c10d::Work> work;  // the bucket's allreduce, once launched
  };
  static torch::Tensor bucket_alias(Bucket& bk, std::size_t k, const torch::Tensor& p);
  void check_shapes();
  void broadcast_from_rank0(std::vector<torch::Tensor> tensors);
  void build_buckets();
  void launch_ready_buckets();
  void reset_iteration();

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  DdpOptions o_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::pair<int, int>> slot_;  // param → (bucket, position in bucket)
  std::vector<Bucket> buckets_;
  std::vector<bool> ready_;
  std::vector<bool> unused_;
  std::size_t next_launch_ = 0;
  bool callback_queued_ = false;
  bool no_sync_ = false;
  std::mutex mu_;
  std::vector<DdpEvent> events_;
};

}  // namespace trainbox::dist
