#include <trainbox/data/image/transform.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::data::image {

namespace {

std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One output axis of the separable filter: output i reads count[i] source pixels from start[i]
// with weights w[i * stride ...], normalised to sum 1.
struct Taps {
  std::vector<int> start, count;
  std::vector<float> w;
  int stride = 0;
};

// PIL's precompute_coeffs (Resample.c) = torch's _compute_indices_weights_aa for the bilinear
// (triangle) filter: source interval [in0, in1) to `out` pixels, scale = (in1 - in0) / out, support
// 1 widened to `scale` when downscaling, centres at in0 + (i + 0.5) * scale. Taps are clamped to
// [lo, hi): the crop's own pixels, as torchvision crops before it resizes.
Taps make_taps(double in0, double in1, int lo, int hi, int out) {
  const double scale = (in1 - in0) / out;
  const double support = scale >= 1.0 ? scale : 1.0;
  const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.start.resize(out);
  t.count.resize(out);
  t.w.assign(std::size_t(out) * t.stride, 0.f);
  std::vector<double> ww(t.stride);
  for (int i = 0; i < out; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    const int xmin = std::max(static_cast<int>(std::floor(center - support + 0.5)), lo);
    const int xmax = std::min(static_cast<int>(std::floor(center + support + 0.5)), hi);
    const int n = std::clamp(xmax - xmin, 0, t.stride);
    double total = 0;
    for (int j = 0; j < n; ++j) {
      const double x = std::abs((j + xmin - center + 0.5) * inv);
      ww[j] = x < 1.0 ? 1.0 - x : 0.0;
      total += ww[j];
    }
    for (int j = 0; j < n; ++j) t.w[std::size_t(i) * t.stride + j] = static_cast<float>(total > 0 ? ww[j] / total : 0);
    t.start[i] = xmin;
    t.count[i] = n;
  }
  return t;
}

struct SourceRect {
  double x0, x1, y0, y1;   // the box on the decoded image
  int xlo, xhi, ylo, yhi;  // the pixels it covers
};

SourceRect map_box(const Image& src, CropBox box, int out_h, int out_w) {
  const int fw = src.full_width > 0 ? src.full_width : src.width;
  const int fh = src.full_height > 0 ? src.full_height : src.height;
  if (out_h <= 0 || out_w <= 0) throw UsageError(fmt::format("crop output size {}x{} is empty", out_w, out_h));
  if (box.width <= 0 || box.height <= 0 || box.top < 0 || box.left < 0 || box.left > fw - box.width ||
      box.top > fh - box.height || src.width <= 0 || src.height <= 0)
    throw UsageError(fmt::format("crop box (top {}, left {}, height {}, width {}) is not inside the {}x{} image",
                                 box.top, box.left, box.height, box.width, fw, fh));
  // Scale factors are n/8, so these products are exact: the same pixels decode()'s region rule takes.
  const double s = double(src.scale_num) / double(src.scale_den);
  const double ox = src.origin_x, oy = src.origin_y;
  SourceRect r{box.left * s - ox,
               (box.left + box.width) * s - ox,
               box.top * s - oy,
               (box.top + box.height) * s - oy,
               0,
               0,
               0,
               0};
  if (std::floor(r.x0) < 0 || std::ceil(r.x1) > src.width || std::floor(r.y0) < 0 || std::ceil(r.y1) > src.height)
    throw UsageError(
        fmt::format("crop box (top {}, left {}, height {}, width {}) is not inside the decoded region "
                    "({}x{} at ({}, {}) of the image scaled {}/{}): decode with this box as the region",
                    box.top, box.left, box.height, box.width, src.width, src.height, src.origin_x, src.origin_y,
                    src.scale_num, src.scale_den));
  r.xlo = std::clamp(static_cast<int>(std::floor(r.x0)), 0, src.width - 1);
  r.xhi = std::clamp(static_cast<int>(std::ceil(r.x1)), r.xlo + 1, src.width);
  r.ylo = std::clamp(static_cast<int>(std::floor(r.y0)), 0, src.height - 1);
  r.yhi = std::clamp(static_cast<int>(std::ceil(r.y1)), r.ylo + 1, src.height);
  return r;
}

// Horizontal pass over the source rows the vertical taps read, then the vertical pass one output
// row at a time; store(y, row) receives out_w * 3 floats (RGB interleaved, 0..255, already flipped).
template <class Store>
void resample(const Image& src, CropBox box, int out_h, int out_w, bool hflip, Store&& store) {
  const SourceRect r = map_box(src, box, out_h, out_w);
  const Taps tx = make_taps(r.x0, r.x1, r.xlo, r.xhi, out_w);
  const Taps ty = make_taps(r.y0, r.y1, r.ylo, r.yhi, out_h);
  const int row_lo = ty.start[0], row_hi = ty.start[out_h - 1] + ty.count[out_h - 1];
  const std::size_t row_floats = std::size_t(out_w) * 3;
  // --- horizontal: source rows [row_lo, row_hi) of the crop to out_w columns ---
  std::vector<float> tmp(std::size_t(std::max(row_hi - row_lo, 0)) * row_floats);
  for (int y = row_lo; y < row_hi; ++y) {
    const std::uint8_t* in = src.rgb.data() + std::size_t(y) * src.width * 3;
    float* dst = tmp.data() + std::size_t(y - row_lo) * row_floats;
    for (int x = 0; x < out_w; ++x) {
      const float* w = tx.w.data() + std::size_t(x) * tx.stride;
      const std::uint8_t* p = in + std::size_t(tx.start[x]) * 3;
      float a0 = 0, a1 = 0, a2 = 0;
      for (int k = 0; k < tx.count[x]; ++k, p += 3) {
        a0 += w[k] * p[0];
        a1 += w[k] * p[1];
        a2 += w[k] * p[2];
      }
      float* o = dst + std::size_t(hflip ? out_w - 1 - x : x) * 3;
      o[0] = a0;
      o[1] = a1;
      o[2] = a2;
    }
  }
  // --- vertical: each output row from ty.count rows of tmp ---
  std::vector<float> acc(row_floats);
  for (int y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), 0.f);
    const float* w = ty.w.data() + std::size_t(y) * ty.stride;
    for (int k = 0; k < ty.count[y]; ++k) {
      const float* in = tmp.data() + std::size_t(ty.start[y] + k - row_lo) * row_floats;
      const float wk = w[k];
      for (std::size_t i = 0; i < row_floats; ++i) acc[i] += wk * in[i];
    }
    store(y, acc.data());
  }
}

}  // namespace

std::int64_t Rng::randint(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return lo;
  const std::uint64_t n = std::uint64_t(hi) - std::uint64_t(lo);
  // Draws in the last partial block of n (2^64 mod n of them) are redrawn.
  const std::uint64_t rem = (std::numeric_limits<std::uint64_t>::max() % n + 1) % n;
  std::uint64_t x = next_u64();
  while (rem != 0 && x >= 0 - rem) x = next_u64();
  return lo + static_cast<std::int64_t>(x % n);
}

Rng sample_rng(std::uint64_t seed, std::int64_t epoch, std::int64_t index) {
  // Each input goes through the full mixer before the next joins, so nearby triples
  // ((s, e, i) and (s, e, i + 1), or (s, e + 1, i)) give unrelated keys.
  std::uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ull);
  k = mix64(k ^ (std::uint64_t(epoch) + 0x632be59bd9b4e019ull));
  k = mix64(k ^ (std::uint64_t(index) + 0x85157af5ull));
  return Rng(k);
}

CropBox center_crop_box(int width, int height, int resize_shorter, int crop_h, int crop_w) {
  if (width <= 0 || height <= 0 || resize_shorter <= 0 || crop_h <= 0 || crop_w <= 0)
    throw UsageError(fmt::format("center crop of a {}x{} image: resize {} and crop {}x{} must all be positive", width,
                                 height, resize_shorter, crop_w, crop_h));
  const int shorter = std::min(width, height), longer = std::max(width, height);
  const int new_long =
      static_cast<int>(double(resize_shorter) * longer / shorter);  // torchvision: int(S * long / short)
  const int new_w = width <= height ? resize_shorter : new_long;
  const int new_h = width <= height ? new_long : resize_shorter;
  const int ch = std::min(crop_h, new_h), cw = std::min(crop_w, new_w);
  const double top_r = std::nearbyint((new_h - ch) / 2.0), left_r = std::nearbyint((new_w - cw) / 2.0);
  const double sy = double(height) / new_h, sx = double(width) / new_w;
  const int top = static_cast<int>(std::nearbyint(top_r * sy)), left = static_cast<int>(std::nearbyint(left_r * sx));
  const int bottom = std::clamp(static_cast<int>(std::nearbyint((top_r + ch) * sy)), top + 1, height);
  const int right = std::clamp(static_cast<int>(std::nearbyint((left_r + cw) * sx)), left + 1, width);
  return {top, left, bottom - top, right - left};
}

Size decode_size_for_crop(int width, int height, CropBox box, int out_h, int out_w) {
  if (box.width <= 0 || box.height <= 0) return {width, height};
  return {static_cast<int>(std::ceil(double(width) * out_w / box.width)),
          static_cast<int>(std::ceil(double(height) * out_h / box.height))};
}

void resized_crop(const Image& src, CropBox box, int out_h, int out_w, bool hflip, const float mean[3],
                  const float std[3], float* out_chw) {
  // (x / 255 - mean) / std as one multiply-add per value.
  float a[3], b[3];
  for (int c = 0; c < 3; ++c) {
    a[c] = 1.f / (255.f * std[c]);
    b[c] = -mean[c] / std[c];
  }
  const std::size_t plane = std::size_t(out_h) * out_w;
  resample(src, box, out_h, out_w, hflip, [&](int y, const float* row) {
    float* r = out_chw + std::size_t(y) * out_w;
    float* g = r + plane;
    float* bl = g + plane;
    for (int x = 0; x < out_w; ++x, row += 3) {
      r[x] = row[0] * a[0] + b[0];
      g[x] = row[1] * a[1] + b[1];
      bl[x] = row[2] * a[2] + b[2];
    }
  });
}

void resized_crop_u8(const Image& src, CropBox box, int out_h, int out_w, bool hflip, std::uint8_t* out_hwc) {
  resample(src, box, out_h, out_w, hflip, [&](int y, const float* row) {
    std::uint8_t* o = out_hwc + std::size_t(y) * out_w * 3;
    for (std::size_t i = 0; i < std::size_t(out_w) * 3; ++i)
      o[i] = static_cast<std::uint8_t>(std::clamp(std::nearbyint(row[i]), 0.f, 255.f));
  });
}

}  // namespace trainbox::data::image
