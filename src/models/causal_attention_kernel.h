// Causal self-attention for one (batch, head) pair on the CPU, fp32, without torch.
//
// Why hand-written: ATen's CPU flash attention runs its blocks through MKL sgemm calls of
// 32×32 to 32×128, where packing and scaling dominate; on the built-in GPT (T = 128, head
// dim 32) forward + backward of one layer took 12 ms at 2 threads, 28 % of a step, at
// ~35 GFLOP/s where the same machine's large GEMMs reach 115. These loops skip every masked
// key (in 8-key steps), keep K and V transposed in L1/L2 so that 8 keys are one AVX2
// vector, and fuse softmax into the score pass. The backward recomputes the probabilities
// from the saved log-sum-exp (FlashAttention's scheme), so memory stays O(T) per row.
//
// This file is compiled with -mavx2 -mfma on x86-64 and includes no torch header (inline
// functions compiled for AVX2 must not be shared with the rest of the program); the caller
// (models/attention.cpp) checks the CPU before calling. Layout: row t of q, k and v starts at
// q + t·qkv_stride (head_dim contiguous floats), as the heads of nanoGPT's [B, T, 3C] c_attn
// output are laid out; out, dout and the gradients likewise with their own strides.
// Numerics: fp32 throughout; exp by a Cephes polynomial (relative error < 2e-7).
#pragma once
#include <cstddef>
#include <cstdint>

namespace trainbox::models::kernels {

// One head's forward: out = softmax(scale·q·kᵀ, causal)·v, and lse[t] = the log-sum-exp of
// row t of the scaled scores (the backward's input).
struct HeadForward {
  std::int64_t seq_len = 0, head_dim = 0;
  float scale = 1;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  std::int64_t qkv_stride = 0;
  float* out = nullptr;
  std::int64_t out_stride = 0;
  float* lse = nullptr;
};

// One head's backward from the forward's out and lse: dq, dk, dv (every element written).
struct HeadBackward {
  std::int64_t seq_len = 0, head_dim = 0;
  float scale = 1;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  std::int64_t qkv_stride = 0;
  const float *out = nullptr, *dout = nullptr;
  std::int64_t out_stride = 0;
  const float* lse = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;
  std::int64_t grad_stride = 0;
};

// The head sizes these loops are built for (16, 32, 64, 128); others use ATen's kernel.
bool causal_attention_kernel_supports(std::int64_t head_dim);
// Scratch floats one thread needs for either pass of one head.
std::size_t causal_attention_scratch_floats(std::int64_t seq_len, std::int64_t head_dim);

void causal_attention_forward(const HeadForward& head, float* scratch);
void causal_attention_backward(const HeadBackward& head, float* scratch);

}  // namespace trainbox::models::kernels
