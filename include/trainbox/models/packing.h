// trainbox/models/packing.h — a packed batch of token windows: documents that share a window kept apart.
//
// With data.packing = true, a text dataset's window holds the ends and starts of several
// documents (no padding: a document longer than what is left of the window goes on in the
// next one). Its input is then one int64 tensor [B, 2, T]:
//   x[:, 0] the token ids, as an unpacked batch's [B, T];
//   x[:, 1] 1 where a document starts, else 0 (the window's first token starts one whatever it says).
// The text dataset (data/text.h) gives it; the llama family takes it (gpt and bert refuse
// data.packing): positions restart at each start, and a token attends only to the earlier tokens of its own document —
// a block-diagonal causal mask — so a packed row computes what its documents would, each run
// alone (tests/unit/torch/test_packing.cpp checks the losses and gradients). The source also
// sets the target of each document start to -100: no token predicts the next document's first.
// One tensor rather than a second argument, so that the batch travels through the loader,
// DDP, evaluation and the Trainer's ForwardFn unchanged (docs/decisions.md, "Packing").
//
//   auto x = models::packed_input(ids, starts);                      // starts: bool [B, T]
//   if (models::is_packed(x)) {
//     auto [ids, starts] = models::unpack(x);
//     auto pos = models::document_positions(starts);                  // RoPE's positions
//     auto allowed = models::document_mask(pos);                      // SDPA's attn_mask
//   }
#pragma once
#include <utility>

#include <torch/types.h>

namespace trainbox::models {

// Positions within documents from document starts (bool [B, T]): the window's first token
// counts as a start.
inline torch::Tensor document_positions(const torch::Tensor& starts) {
  const auto T = starts.size(1);
  auto s = starts.to(torch::kBool, /*non_blocking=*/false, /*copy=*/true);  // the first column is set below
  s.select(1, 0).fill_(true);
  auto idx = torch::arange(T, starts.options().dtype(torch::kLong)).expand({starts.size(0), T});
  auto last = std::get<0>(torch::where(s, idx, torch::zeros_like(idx)).cummax(1));
  return idx - last;
}

inline torch::Tensor packed_input(const torch::Tensor& ids, const torch::Tensor& starts) {
  return torch::stack({ids, starts.to(ids.scalar_type())}, 1);
}

inline bool is_packed(const torch::Tensor& x) { return x.dim() == 3 && x.size(1) == 2; }

// {ids [B, T], document starts [B, T] (int64, 1 = starts)} of a packed input.
inline std::pair<torch::Tensor, torch::Tensor> unpack(const torch::Tensor& x) {
  return {x.select(1, 0), x.select(1, 1)};
}

// Which keys each query may attend to, bool [B, 1, T, T] (true = attend): earlier or the same
// token of the same document (a document starts where the position is 0), and, with a sliding
// window > 0, fewer than `window` positions back.
inline torch::Tensor document_mask(const torch::Tensor& positions, std::int64_t window = 0) {
  const auto T = positions.size(1);
  auto doc = positions.eq(0).to(torch::kLong).cumsum(1);  // [B, T]: the document's number in the row
  auto idx = torch::arange(T, positions.options().dtype(torch::kLong));
  auto allowed = doc.unsqueeze(2).eq(doc.unsqueeze(1)).logical_and(idx.unsqueeze(0).le(idx.unsqueeze(1)).unsqueeze(0));
  if (window > 0) allowed = allowed.logical_and((idx.unsqueeze(1) - idx.unsqueeze(0)).lt(window).unsqueeze(0));
  return allowed.unsqueeze(1);
}

}  // namespace trainbox::models
