#include <trainbox/models/attention.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <vector>

#include <ATen/TensorIterator.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/util/errors.h>

#include "causal_attention_kernel.h"

namespace trainbox::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool cpu_runs_kernel() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return true;  // the kernel's vector code is portable off x86
#endif
}

bool sdpa_forced() {
  static const bool forced = [] {
    const char* e = std::getenv("TRAINBOX_ATTENTION");
    return e != nullptr && std::string_view(e) == "sdpa";
  }();
  return forced;
}

// The shape of a [B, T, 3C] qkv tensor and the head geometry, and where head (b, h)'s rows start.
struct Heads {
  std::int64_t B, T, C, H, D;
  explicit Heads(const torch::Tensor& qkv, std::int64_t n_head)
      : B(qkv.size(0)), T(qkv.size(1)), C(qkv.size(2) / 3), H(n_head), D(C / n_head) {}
  std::int64_t qkv_offset(std::int64_t pair) const { return (pair / H) * T * 3 * C + (pair % H) * D; }
  std::int64_t out_offset(std::int64_t pair) const { return (pair / H) * T * C + (pair % H) * D; }
  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))); }
};

// Runs fn(pair, scratch) for every (batch, head) pair over ATen's intra-op threads, each
// thread with its own scratch. Why not at::parallel_for: in an OpenMP build of torch it is an
// inline `#pragma omp parallel` template, which runs serially unless this file is compiled
// with -fopenmp and linked to the very libgomp torch loads (the wheel's, or LibTorch's
// renamed copy). TensorIteratorBase::for_each is compiled inside libtorch and splits an
// index tensor over the same threads.
template <typename F>
void for_each_head(const Heads& g, F&& fn) {
  auto pairs = torch::arange(g.B * g.H, torch::kLong);
  auto iter = at::TensorIteratorConfig().add_output(pairs).resize_outputs(false).check_all_same_dtype(false).build();
  iter.for_each(
      [&](char** data, const std::int64_t* strides, std::int64_t size0, std::int64_t size1) {
        std::vector<float> scratch(kernels::causal_attention_scratch_floats(g.T, g.D));
        for (std::int64_t j = 0; j < size1; ++j)
          for (std::int64_t i = 0; i < size0; ++i)
            fn(*reinterpret_cast<const std::int64_t*>(data[0] + i * strides[0] + j * strides[1]), scratch.data());
      },
      /*grain_size=*/1);
}

class CausalAttentionCpu : public torch::autograd::Function<CausalAttentionCpu> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv, std::int64_t n_head) {
    const Heads g(qkv, n_head);
    auto out = torch::empty({g.B, g.T, g.C}, qkv.options());
    auto lse = torch::empty({g.B * g.H, g.T}, qkv.options());
    const float* in = qkv.data_ptr<float>();
    float* o = out.data_ptr<float>();
    float* l = lse.data_ptr<float>();
    for_each_head(g, [&](std::int64_t pair, float* scratch) {
      kernels::HeadForward f;
      f.seq_len = g.T, f.head_dim = g.D, f.scale = g.scale();
      f.q = in + g.qkv_offset(pair), f.k = f.q + g.C, f.v = f.q + 2 * g.C, f.qkv_stride = 3 * g.C;
      f.out = o + g.out_offset(pair), f.out_stride = g.C, f.lse = l + pair * g.T;
      kernels::causal_attention_forward(f, scratch);
    });
    ctx->save_for_backward({qkv, out, lse});
    ctx->saved_data["n_head"] = n_head;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& qkv = saved[0];
    const Heads g(qkv, ctx->saved_data["n_head"].toInt());
    const auto dout = grads[0].contiguous();
    auto dqkv = torch::empty_like(qkv);
    const float* in = qkv.data_ptr<float>();
    const float* o = saved[1].data_ptr<float>();
    const float* l = saved[2].data_ptr<float>();
    const float* go = dout.data_ptr<float>();
    float* gi = dqkv.data_ptr<float>();
    for_each_head(g, [&](std::int64_t pair, float* scratch) {
      kernels::HeadBackward b;
      b.seq_len = g.T, b.head_dim = g.D, b.scale = g.scale();
      b.q = in + g.qkv_offset(pair), b.k = b.q + g.C, b.v = b.q + 2 * g.C, b.qkv_stride = 3 * g.C;
      b.out = o + g.out_offset(pair), b.dout = go + g.out_offset(pair), b.out_stride = g.C;
      b.lse = l + pair * g.T;
      b.dq = gi + g.qkv_offset(pair), b.dk = b.dq + g.C, b.dv = b.dq + 2 * g.C, b.grad_stride = 3 * g.C;
      kernels::causal_attention_backward(b, scratch);
    });
    return {dqkv, torch::Tensor()};
  }
};

void check_shape(const torch::Tensor& qkv, std::int64_t n_head) {
  if (qkv.dim() != 3 || qkv.size(2) % 3 != 0 || n_head < 1 || (qkv.size(2) / 3) % n_head != 0)
    throw UsageError(fmt::format("causal_self_attention: qkv of shape {} with n_head = {}", qkv.sizes(), n_head),
                     "pass [B, T, 3C] (q, k, v along the last dim) with C divisible by n_head");
}

}  // namespace

bool uses_cpu_attention_kernel(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p) {
  check_shape(qkv, n_head);
  return qkv.device().is_cpu() && qkv.scalar_type() == torch::kFloat && dropout_p == 0.0 &&
         kernels::causal_attention_kernel_supports(qkv.size(2) / 3 / n_head) && cpu_runs_kernel() && !sdpa_forced();
}

torch::Tensor causal_self_attention(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p) {
  if (uses_cpu_attention_kernel(qkv, n_head, dropout_p)) return CausalAttentionCpu::apply(qkv.contiguous(), n_head);
  // inside a checkpointed block: the same math as ATen's (bit for bit), its dropout mask kept
  if (dropout_p > 0.0 && qkv.device().is_cpu() && !sdpa_forced() && keeps_dropout_masks())
    return math_causal_self_attention(qkv, n_head, dropout_p);
  return sdpa_causal_self_attention(qkv, n_head, dropout_p);
}

torch::Tensor math_causal_self_attention(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p) {
  check_shape(qkv, n_head);
  const auto B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  auto parts = qkv.split(C, 2);
  // ATen's math path of scaled_dot_product_attention, step by step, its dropout through
  // trainbox::dropout. Under CPU autocast SDPA takes its inputs in the autocast dtype and runs
  // without autocast inside; the math path computes 16-bit inputs in fp32 and casts back.
  auto out_type = qkv.scalar_type();
  if (qkv.is_cpu() && at::autocast::is_autocast_enabled(c10::DeviceType::CPU) && qkv.is_floating_point())
    out_type = at::autocast::get_autocast_dtype(c10::DeviceType::CPU);
  const bool low = out_type == torch::kBFloat16 || out_type == torch::kHalf;
  const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  auto heads = [&](const torch::Tensor& t) {
    auto h = t.view({B, T, n_head, C / n_head}).transpose(1, 2).to(out_type);
    return low ? h.to(torch::kFloat) : h;
  };
  const double s = std::sqrt(1.0 / std::sqrt(double(C / n_head)));  // the scale split over q and k
  auto att = torch::matmul(heads(parts[0]) * s, heads(parts[1]).transpose(-2, -1) * s);
  // the causal mask added in place, as ATen adds it
  const auto future = torch::zeros({T, T}, att.options().requires_grad(false))
                          .masked_fill_(torch::ones({T, T}, qkv.options().dtype(torch::kBool)).triu(1),
                                        -std::numeric_limits<double>::infinity());
  att = torch::softmax(att.add_(future), -1);
  auto y = torch::matmul(trainbox::dropout(att, dropout_p, true), heads(parts[2])).to(out_type);
  return y.transpose(1, 2).contiguous().view({B, T, C});
}

torch::Tensor sdpa_causal_self_attention(const torch::Tensor& qkv, std::int64_t n_head, double dropout_p) {
  check_shape(qkv, n_head);
  const auto B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3;
  auto parts = qkv.split(C, 2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
  auto y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), /*attn_mask=*/{},
                                            dropout_p, /*is_causal=*/true);
  return y.transpose(1, 2).contiguous().view({B, T, C});
}

}  // namespace trainbox::models
