// The DDP's gradient compressor (private to src/distributed; the options and byte counts are
// trainbox/distributed/compression.h). One per DistributedDataParallel with
// dist.grad_compression != none; called under the DDP's mutex, from the bucket hooks and the
// end-of-backward callback, in bucket order on every rank:
//   launch(b, …)   when bucket b is complete (overlaps the rest of backward): bf16/fp16 start
//                  their 16-bit all-reduce (or, given a shard, ZeRO stages 1 and 2, their
//                  16-bit reduce-scatter into it); powersgd adds the error
//                  feedback, computes P = M·Q and starts the all-reduces of the uncompressed
//                  tensors and of P;
//   finish(b, …)   in finalize_backward: the bucket's average is in `flat` (or `shard`). The
//                  first powersgd finish orthogonalises every bucket's P, computes Q = Mᵀ·P and
//                  starts all their Q all-reduces before waiting for the first;
//   end_step()     after every finish: one host check that the reduced gradients are finite;
//                  only then are the new error feedback and Q kept (a step the GradScaler
//                  skips leaves them as they were); counts the synchronised step.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <trainbox/distributed/compression.h>
#include <trainbox/distributed/process_group.h>

namespace trainbox::dist {

class GradCompressor {
 public:
  struct BucketLayout {  // the bucket's gradients: shapes and element offsets in its flat tensor
    std::vector<std::vector<std::int64_t>> shapes;
    std::vector<std::int64_t> offsets;
  };
  // Collective: compares the settings of every rank (ConfigError naming the ranks that differ).
  // keep_buffers: the 16-bit copy of a bucket is kept for the next step (the DDP keeps its
  // buckets: stages 0 and 1), else allocated each step and freed with it (stage 2).
  GradCompressor(const CompressionOptions& o, ProcessGroup& pg, std::vector<BucketLayout> layout, torch::Device device,
                 bool keep_buffers);

  void launch(std::size_t b, torch::Tensor& flat, torch::Tensor& shard, bool native_rs);
  void finish(std::size_t b, torch::Tensor& flat, torch::Tensor& shard, bool native_rs, const std::string& what);
  void end_step();
  void abort_step();  // a backward that failed midway: the transient state dropped, the kept state as it was

  std::int64_t iteration() const { return iter_; }
  const CompressionOptions& options() const { return o_; }
  // This rank's state, for checkpoints: "iteration", "seed_draws", "world_size", and per
  // bucket b that has it, "error.<b>" (error feedback) and "q.<b>" (warm start).
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // From state() of this rank at the same world size (a mismatch throws DataError).
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& entries);
  // The error feedback and Q dropped (a world-size change); the step count kept.
  void reset_state(std::int64_t iteration);

 private:
  struct Matrix {  // one compressed gradient: where it is, and its slices of P and Q
    std::int64_t offset, rows, cols, rank, p_at, q_at;
  };
  struct Bucket {
    std::vector<Matrix> mats;                                  // in PyTorch's order: grouped by shape, first seen first
    std::vector<std::pair<std::int64_t, std::int64_t>> plain;  // (offset, numel) sent whole
    std::int64_t p_size = 0, q_size = 0;
    torch::Tensor error, q;  // kept between steps
    torch::Tensor spare;     // kept between steps: PowerSGD's next input copy (error feedback),
                             // or fp16/bf16's 16-bit gradient (plain DDP, not stage 2)
    // --- this step ---
    bool vanilla = false;
    torch::Tensor grad;   // powersgd: the bucket's flat gradient (shared), from launch to end_step
    torch::Tensor input;  // powersgd: what is compressed, the gradient plus the error feedback
                          // (input_copy), or the gradient itself without error feedback
    torch::Tensor low, input_copy, plain_flat, p, q_before;
    c10::intrusive_ptr<c10d::Work> work, plain_work, p_work, q_work;
  };
  void launch_powersgd(Bucket& bk, torch::Tensor& flat);
  void start_q(Bucket& bk, const std::string& what);
  void finish_powersgd(Bucket& bk, const std::string& what);
  std::uint32_t next_seed();
  void check_same_on_every_rank();
  static void drop_step_tensors(Bucket& bk);  // what one step's collectives held

  CompressionOptions o_;
  ProcessGroup& pg_;
  torch::Device device_;
  std::vector<Bucket> buckets_;
  std::int64_t iter_ = 0;        // synchronised backward passes so far (PowerSGDState.iter)
  std::int64_t seed_draws_ = 0;  // numbers drawn from rng_ (a resume replays them)
  std::mt19937 rng_;             // numpy's RandomState(seed) is this generator
  bool keep_buffers_;            // fp16/bf16: the 16-bit bucket kept between steps (stages 0 and 1)
  bool q_phase_ = false;
  std::vector<torch::Tensor> finite_;  // per compressed bucket of this step: all reduced values finite
};

}  // namespace trainbox::dist
