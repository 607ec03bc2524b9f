// Causal self-attention loops for one (batch, head) pair: see causal_attention_kernel.h.
// Built with -O3 -mavx2 -mfma -ffp-contract=fast on x86-64 (cmake/torch.cmake); GCC's vector
// extensions make that AVX2 + FMA code, and portable code elsewhere. No torch, no templates
// from the standard library (an out-of-line copy compiled for AVX2 could be picked by the
// linker for code that runs on a CPU without it): every helper is local to this file.
#include "causal_attention_kernel.h"

#include <math.h>

namespace trainbox::models::kernels {
namespace {

typedef float V8 __attribute__((vector_size(32)));
typedef float V8Unaligned __attribute__((vector_size(32), aligned(4)));
typedef int I8 __attribute__((vector_size(32)));
constexpr int kLanes = 8;
// Query rows per block: each key vector loaded from L1 serves 4 rows (4 FMAs per load), and
// the 8 accumulators of the score pass plus operands fit AVX2's 16 registers.
constexpr int kRows = 4;

// Two-vector shuffle (index i < 8 picks a[i], 8 + i picks b[i]): GCC 12 and clang have
// __builtin_shufflevector; older GCC spells it __builtin_shuffle with a mask vector.
#if defined(__clang__) || __GNUC__ >= 12
#define TRAINBOX_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define TRAINBOX_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, I8{__VA_ARGS__})
#endif

inline V8 load(const float* p) { return *reinterpret_cast<const V8Unaligned*>(p); }
inline void store(float* p, V8 x) { *reinterpret_cast<V8Unaligned*>(p) = x; }
inline V8 splat(float x) { return V8{} + x; }
inline std::int64_t min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
inline std::int64_t round_up(std::int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

inline float hsum(V8 x) {
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += x[l];
  return s;
}
inline float hmax(V8 x) {
  float m = x[0];
  for (int l = 1; l < kLanes; ++l) m = x[l] > m ? x[l] : m;
  return m;
}

// exp(x) as Cephes' expf: x = n·ln2 + r, |r| ≤ ln2/2, a degree-6 polynomial for e^r and the
// exponent bits for 2^n. Relative error < 2e-7 on [-87.3, 88.3]; inputs are clamped there.
inline V8 exp8(V8 x) {
  x = x < splat(-87.3f) ? splat(-87.3f) : x;
  x = x > splat(88.3f) ? splat(88.3f) : x;
  const V8 fx = x * 1.44269504088896341f + 0.5f;
  V8 fn = __builtin_convertvector(__builtin_convertvector(fx, I8), V8);  // truncation…
  fn = fn > fx ? fn - 1.0f : fn;                                         // …made floor
  x = x - fn * 0.693359375f - fn * -2.12194440e-4f;
  V8 y = splat(1.9875691500e-4f);
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * x * x + x + 1.0f;
  const I8 pow2n = (__builtin_convertvector(fn, I8) + 127) << 23;
  return y * (V8)pow2n;  // the bits of 2^n
}

// Lane l of the 8 keys starting at j is key j + l; row r may see keys 0 … last[r].
inline I8 visible(std::int64_t j, std::int64_t last) {
  const I8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  return lane + static_cast<int>(j) <= static_cast<int>(last);
}

// An 8×8 block transposed in registers (AVX2's unpack / shuffle / permute2f128 sequence):
// out[c][i] = in[i][c]. Scalar loops transposing K took a quarter of the forward's time.
inline void transpose8(V8 (&m)[kLanes]) {
  V8 t[kLanes], u[kLanes];
  for (int i = 0; i < kLanes; i += 2) {
    t[i] = TRAINBOX_SHUFFLE(m[i], m[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = TRAINBOX_SHUFFLE(m[i], m[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < kLanes; i += 4)
    for (int k = 0; k < 2; ++k) {
      u[i + 2 * k] = TRAINBOX_SHUFFLE(t[i + k], t[i + k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * k + 1] = TRAINBOX_SHUFFLE(t[i + k], t[i + k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int c = 0; c < 4; ++c) {
    m[c] = TRAINBOX_SHUFFLE(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    m[c + 4] = TRAINBOX_SHUFFLE(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// Rows 0 … T-1 of src (D floats, `stride` apart) as Kᵀ (or Vᵀ) in [D][Tp]: 8 consecutive
// keys of one feature are one vector. Keys T … Tp-1 are 0.
template <int D>
void rows_to_columns(const float* src, std::int64_t stride, std::int64_t T, std::int64_t Tp, float* dst) {
  for (std::int64_t t0 = 0; t0 < Tp; t0 += kLanes)
    for (int d0 = 0; d0 < D; d0 += kLanes) {
      V8 m[kLanes];
      for (int i = 0; i < kLanes; ++i) m[i] = t0 + i < T ? load(src + (t0 + i) * stride + d0) : V8{};
      transpose8(m);
      for (int c = 0; c < kLanes; ++c) store(dst + (d0 + c) * Tp + t0, m[c]);
    }
}

// The inverse: columns [D][Tp] back to rows 0 … T-1 of dst, times `scale`.
template <int D>
void columns_to_rows(const float* src, std::int64_t Tp, std::int64_t T, float scale, float* dst, std::int64_t stride) {
  for (std::int64_t t0 = 0; t0 < T; t0 += kLanes)
    for (int d0 = 0; d0 < D; d0 += kLanes) {
      V8 m[kLanes];
      for (int i = 0; i < kLanes; ++i) m[i] = load(src + (d0 + i) * Tp + t0);
      transpose8(m);
      for (int c = 0; c < kLanes && t0 + c < T; ++c) store(dst + (t0 + c) * stride + d0, m[c] * scale);
    }
}

// The rows of one block: row r is query i0 + r, or (past the end) a padding row that sees no
// key, reads the last real row and writes nothing.
struct RowBlock {
  std::int64_t rows, keys;  // real rows; keys 0 … keys-1 are visible to some row
  std::int64_t last[kRows];
  std::int64_t row_of[kRows];
  RowBlock(std::int64_t i0, std::int64_t T) : rows(min64(kRows, T - i0)), keys(i0 + rows) {
    for (int r = 0; r < kRows; ++r) {
      last[r] = r < rows ? i0 + r : -1;
      row_of[r] = min64(i0 + r, T - 1);
    }
  }
};

// acc[r] (r < R) += Σ_k weight[r][k] · rows[k] over keys 0 … keys-1, for two query rows at a
// time; rows[k] = base + k·stride (D floats). Output = P·V in the forward, dS·K in the backward.
template <int D>
void weighted_rows(const float* w0, const float* w1, const float* base, std::int64_t stride, std::int64_t keys,
                   V8 (&acc0)[D / kLanes], V8 (&acc1)[D / kLanes]) {
  constexpr int kVecs = D / kLanes;
  for (int n = 0; n < kVecs; ++n) acc0[n] = acc1[n] = V8{};
  for (std::int64_t j = 0; j < keys; ++j) {
    const float* row = base + j * stride;
    const float a = w0[j], b = w1[j];
    for (int n = 0; n < kVecs; ++n) {
      const V8 x = load(row + n * kLanes);
      acc0[n] += a * x;
      acc1[n] += b * x;
    }
  }
}

template <int D>
void run_head(const HeadForward& h, float* scratch) {  // the forward
  constexpr int kVecs = D / kLanes;
  const std::int64_t T = h.seq_len, Tp = round_up(T), qs = h.qkv_stride;
  float* kt = scratch;     // [D][Tp]
  float* p = kt + D * Tp;  // [kRows][Tp]: scaled scores, then unnormalised probabilities
  rows_to_columns<D>(h.k, qs, T, Tp, kt);

  for (std::int64_t i0 = 0; i0 < T; i0 += kRows) {
    const RowBlock blk(i0, T);
    const float* q[kRows];
    for (int r = 0; r < kRows; ++r) q[r] = h.q + blk.row_of[r] * qs;

    // --- scores of the visible keys, 8 at a time ---
    for (std::int64_t j = 0; j < blk.keys; j += kLanes) {
      // Even and odd features in separate sums: 8 independent FMA chains keep both FMA
      // units busy through the 4-cycle latency (4 chains ran at half speed).
      V8 even[kRows] = {}, odd[kRows] = {};
      for (int d = 0; d < D; d += 2) {
        const V8 k0 = load(kt + d * Tp + j), k1 = load(kt + (d + 1) * Tp + j);
        for (int r = 0; r < kRows; ++r) {
          even[r] += q[r][d] * k0;
          odd[r] += q[r][d + 1] * k1;
        }
      }
      for (int r = 0; r < kRows; ++r) store(p + r * Tp + j, (even[r] + odd[r]) * h.scale);
    }

    // --- softmax of each row over its visible keys ---
    float inv_sum[kRows];
    for (int r = 0; r < kRows; ++r) {
      float* row = p + r * Tp;
      const std::int64_t last = blk.last[r];
      V8 m = splat(-INFINITY);
      for (std::int64_t j = 0; j < blk.keys; j += kLanes) {
        const V8 x = load(row + j);
        m = (visible(j, last) & (x > m)) ? x : m;
      }
      const float mx = last < 0 ? 0.f : hmax(m);
      V8 sum{};
      for (std::int64_t j = 0; j < blk.keys; j += kLanes) {
        const V8 e = visible(j, last) ? exp8(load(row + j) - mx) : V8{};
        store(row + j, e);
        sum += e;
      }
      const float total = hsum(sum);
      inv_sum[r] = last < 0 ? 0.f : 1.f / total;
      if (last >= 0) h.lse[last] = mx + logf(total);
    }

    // --- out = P·V, normalised ---
    for (int r = 0; r < blk.rows; r += 2) {
      V8 acc0[kVecs], acc1[kVecs];
      weighted_rows<D>(p + r * Tp, p + (r + 1) * Tp, h.v, qs, blk.keys, acc0, acc1);
      float* o0 = h.out + (i0 + r) * h.out_stride;
      for (int n = 0; n < kVecs; ++n) store(o0 + n * kLanes, acc0[n] * inv_sum[r]);
      if (r + 1 < blk.rows)
        for (int n = 0; n < kVecs; ++n) store(o0 + h.out_stride + n * kLanes, acc1[n] * inv_sum[r + 1]);
    }
  }
}

template <int D>
void run_head(const HeadBackward& h, float* scratch) {  // the backward
  constexpr int kVecs = D / kLanes;
  const std::int64_t T = h.seq_len, Tp = round_up(T), qs = h.qkv_stride;
  float* kt = scratch;        // [D][Tp] Kᵀ
  float* vt = kt + D * Tp;    // [D][Tp] Vᵀ
  float* dkt = vt + D * Tp;   // [D][Tp] Σ dS·q, scaled on the way out
  float* dvt = dkt + D * Tp;  // [D][Tp] Σ P·dout
  float* ds = dvt + D * Tp;   // [kRows][Tp] dS of the block's rows
  rows_to_columns<D>(h.k, qs, T, Tp, kt);
  rows_to_columns<D>(h.v, qs, T, Tp, vt);
  for (std::int64_t i = 0; i < 2 * D * Tp; ++i) dkt[i] = 0;

  for (std::int64_t i0 = 0; i0 < T; i0 += kRows) {
    const RowBlock blk(i0, T);
    const float *q[kRows], *dout[kRows];
    float delta[kRows], lse[kRows];  // delta = dout·out = Σ_k P·dP of the row
    for (int r = 0; r < kRows; ++r) {
      q[r] = h.q + blk.row_of[r] * qs;
      dout[r] = h.dout + blk.row_of[r] * h.out_stride;
      const float* out = h.out + blk.row_of[r] * h.out_stride;
      V8 acc{};
      for (int n = 0; n < kVecs; ++n) acc += load(dout[r] + n * kLanes) * load(out + n * kLanes);
      delta[r] = hsum(acc);
      lse[r] = h.lse[blk.row_of[r]];
    }

    for (std::int64_t j = 0; j < blk.keys; j += kLanes) {
      // --- recompute P, and dP = dout·vᵀ, for 8 keys ---
      V8 s[kRows] = {}, dp[kRows] = {};
      for (int d = 0; d < D; ++d) {
        const V8 kv = load(kt + d * Tp + j), vv = load(vt + d * Tp + j);
        for (int r = 0; r < kRows; ++r) {
          s[r] += q[r][d] * kv;
          dp[r] += dout[r][d] * vv;
        }
      }
      V8 prob[kRows], dsv[kRows];
      for (int r = 0; r < kRows; ++r) {
        prob[r] = visible(j, blk.last[r]) ? exp8(s[r] * h.scale - lse[r]) : V8{};
        dsv[r] = prob[r] * (dp[r] - delta[r]);
        store(ds + r * Tp + j, dsv[r]);
      }
      // --- dVᵀ += doutᵀ·P and dKᵀ += qᵀ·dS for these keys ---
      for (int d = 0; d < D; ++d) {
        V8 a = load(dvt + d * Tp + j), b = load(dkt + d * Tp + j);
        for (int r = 0; r < kRows; ++r) {
          a += dout[r][d] * prob[r];
          b += q[r][d] * dsv[r];
        }
        store(dvt + d * Tp + j, a);
        store(dkt + d * Tp + j, b);
      }
    }

    // --- dq = scale · dS·K ---
    for (int r = 0; r < blk.rows; r += 2) {
      V8 acc0[kVecs], acc1[kVecs];
      weighted_rows<D>(ds + r * Tp, ds + (r + 1) * Tp, h.k, qs, blk.keys, acc0, acc1);
      float* dq0 = h.dq + (i0 + r) * h.grad_stride;
      for (int n = 0; n < kVecs; ++n) store(dq0 + n * kLanes, acc0[n] * h.scale);
      if (r + 1 < blk.rows)
        for (int n = 0; n < kVecs; ++n) store(dq0 + h.grad_stride + n * kLanes, acc1[n] * h.scale);
    }
  }

  columns_to_rows<D>(dkt, Tp, T, h.scale, h.dk, h.grad_stride);
  columns_to_rows<D>(dvt, Tp, T, 1.0f, h.dv, h.grad_stride);
}

// One pass (HeadForward or HeadBackward) at the head size it was built for; the head sizes
// here are the ones causal_attention_kernel_supports lists.
template <typename Head>
void dispatch(const Head& head, float* scratch) {
  switch (head.head_dim) {
    case 16: return run_head<16>(head, scratch);
    case 32: return run_head<32>(head, scratch);
    case 64: return run_head<64>(head, scratch);
    case 128: return run_head<128>(head, scratch);
    default: __builtin_trap();  // callers check causal_attention_kernel_supports first
  }
}

}  // namespace

bool causal_attention_kernel_supports(std::int64_t head_dim) {
  return head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128;
}

std::size_t causal_attention_scratch_floats(std::int64_t seq_len, std::int64_t head_dim) {
  return static_cast<std::size_t>((4 * head_dim + kRows) * round_up(seq_len));
}

void causal_attention_forward(const HeadForward& head, float* scratch) { dispatch(head, scratch); }
void causal_attention_backward(const HeadBackward& head, float* scratch) { dispatch(head, scratch); }

}  // namespace trainbox::models::kernels
