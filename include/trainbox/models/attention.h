// trainbox/models/attention.h — causal multi-head self-attention from a fused qkv tensor.
//
// The attention of the built-in GPT, public for users who write their own transformer for
// the Trainer. Input: qkv [B, T, 3C], the output of one Linear C→3C holding q, k and v one
// after the other along the last dim (nanoGPT's c_attn); n_head heads of C / n_head each.
// Output: [B, T, C], the heads side by side (ready for the output projection).
//
// Which kernel runs:
//   - CPU, fp32, no dropout in effect, head size 16, 32, 64 or 128, on a CPU with AVX2 + FMA
//     (x86-64) or any other architecture: trainbox's own loops (src/models/causal_attention_kernel.h),
//     which skip the masked keys and read q, k, v in place and write the gradient of qkv in
//     one tensor: forward + backward of the built-in GPT's layer (B 16, T 128, 4 heads of 32)
//     in 6.2 ms against 9.6 ms for ATen's CPU flash attention, 2 threads (docs/models.md).
//   - CPU with dropout > 0 inside a checkpointed block (activation_checkpoint.h): ATen's
//     math path written out (q·kᵀ, causal mask, softmax, dropout, ·v; the same bits as
//     ATen's, which is the path SDPA takes on CPU with dropout), its dropout through
//     trainbox::dropout, so the block's recomputation reuses the mask instead of drawing it.
//   - Otherwise (GPU, bf16/fp16 under autocast, dropout > 0, other head sizes):
//     at::scaled_dot_product_attention with is_causal — flash or memory-efficient kernels on GPU.
//   - TRAINBOX_ATTENTION=sdpa in the environment forces the SDPA path everywhere (A/B
//     comparisons; read once per process).
// Both give softmax(q·kᵀ/√(C/n_head) + causal mask)·v; they differ by fp32 rounding only
// (tests/unit/torch/test_attention.cpp checks forward and gradients against ATen's math).
// The trainbox kernel's backward is not itself differentiable (no double backward).
//
//   auto qkv = c_attn->forward(x);                                   // [B, T, 3C]
//   auto y = models::causal_self_attention(qkv, n_head, is_training() ? 0.1 : 0.0);
//   return c_proj->forward(y);                                       // [B, T, C]
#pragma once
#include <cstdint>

#include <torch/types.h>

namespace trainbox::models {

// Throws UsageError when qkv is not [B, T, 3C] with C divisible by n_head.
torch::Tensor causal_self_attention(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p);

// The same attention always through at::scaled_dot_product_attention (is_causal): the path
// causal_self_attention takes where its kernel does not apply; `trainbox bench attention`
// times the two against each other.
torch::Tensor sdpa_causal_self_attention(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p);

// The same attention written as ATen's math path (bit for bit), with its dropout through
// trainbox::dropout: the path causal_self_attention takes on CPU inside a checkpointed block.
torch::Tensor math_causal_self_attention(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p);

// Whether causal_self_attention would run trainbox's CPU kernel for this input.
bool uses_cpu_attention_kernel(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p);

}  // namespace trainbox::models
