// trainbox/data/image/transform.h — the training and evaluation crops of torchvision's ImageNet
// recipe (RandomResizedCrop + RandomHorizontalFlip, Resize + CenterCrop, ToTensor + Normalize) as
// one pass from a decoded RGB8 image (decode.h) to normalised float32 CHW. torch-free (trainbox_image).
//
// Contract:
// - Crop boxes are in the file's full-size pixel coordinates (torchvision's i, j, h, w), whatever
//   scale decode() used: resized_crop maps them onto a DCT-downscaled Image by its scale factor.
// - resized_crop is torchvision's resize(antialias=True, bilinear) of the crop: PIL's separable
//   triangle filter, its support widened by the downscale factor, weights normalised per output
//   pixel, pixel centres at +0.5. Against torchvision.transforms.v2.functional.resized_crop on the
//   same pixels it differs by float rounding only (docs/datasets.md has the measured PSNR).
// - Random numbers come from Rng, seeded per sample from (seed, epoch, index): a sample's crop and
//   flip do not depend on which thread decodes it or in what order.
// - All functions are thread-safe; resized_crop allocates two scratch buffers per call, none per pixel.
//
//   Rng rng = sample_rng(seed, epoch, index);
//   CropBox box = random_resized_crop_box(w, h, 0.08, 1.0, 3. / 4, 4. / 3, rng);
//   bool flip = rng.uniform(0, 1) < 0.5;
//   resized_crop(img, box, 224, 224, flip, kImageNetMean, kImageNetStd, out_chw);
#pragma once
#include <cmath>
#include <cstdint>

#include <trainbox/data/image/decode.h>

namespace trainbox::data::image {

// CropBox (a rectangle of the full-size image) is in decode.h: decode() takes one as its region.
struct Size {
  int width = 0, height = 0;
};

// splitmix64 as a counter-based generator: the n-th draw is mix(key + n * golden gamma), so a
// stream costs one 64-bit multiply-xorshift per draw and any (seed, epoch, index) is its own
// independent stream. Passes BigCrush (Steele et al., "Fast splittable PRNGs", 2014).
class Rng {
 public:
  explicit Rng(std::uint64_t key) : state_(key) {}
  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi), 53 random bits.
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next_u64() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi) (torch.randint's bounds), unbiased (rejection of the top partial range).
  std::int64_t randint(std::int64_t lo, std::int64_t hi);

 private:
  std::uint64_t state_;
};

// The generator of one sample in one epoch: the same triple always gives the same stream.
Rng sample_rng(std::uint64_t seed, std::int64_t epoch, std::int64_t index);

// torchvision.transforms.RandomResizedCrop.get_params (0.26), rule for rule: 10 tries of an area
// fraction U(scale) and a log-uniform aspect ratio, w = round(sqrt(area * ratio)),
// h = round(sqrt(area / ratio)), accepted when 0 < w <= width and 0 < h <= height, placed at
// top = randint(0, height - h + 1), left = randint(0, width - w + 1); else the whole image, clamped
// to the ratio range, centred. round() is Python's (half to even). `R` is Rng or any type with the
// same uniform/randint (tests record the draws to replay them through torchvision).
template <class R>
CropBox random_resized_crop_box(int width, int height, double scale_lo, double scale_hi, double ratio_lo,
                                double ratio_hi, R& rng) {
  const double area = double(height) * double(width);
  const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale_lo, scale_hi);
    const double aspect_ratio = std::exp(rng.uniform(log_lo, log_hi));
    const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect_ratio)));
    const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect_ratio)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int top = static_cast<int>(rng.randint(0, height - h + 1));
      const int left = static_cast<int>(rng.randint(0, width - w + 1));
      return {top, left, h, w};
    }
  }
  // Fallback to a central crop.
  const double in_ratio = double(width) / double(height);
  int w = width, h = height;
  if (in_ratio < std::min(ratio_lo, ratio_hi)) {
    h = static_cast<int>(std::nearbyint(w / std::min(ratio_lo, ratio_hi)));
  } else if (in_ratio > std::max(ratio_lo, ratio_hi)) {
    w = static_cast<int>(std::nearbyint(h * std::max(ratio_lo, ratio_hi)));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

// Evaluation: Resize(resize_shorter) then CenterCrop(crop_h, crop_w), as one box of the source.
// torchvision resizes the shorter side to S and the longer to int(S * long / short), then crops at
// round((resized - crop) / 2); the box is that crop mapped back by source/resized per axis, each
// edge rounded to the nearest source pixel. Resampling that box to crop_h x crop_w therefore
// differs from the two-step result by at most half a source pixel of placement (sub-pixel once
// the source is larger than the output; PSNR in docs/datasets.md). A crop larger than the resized
// image is clamped to the whole image (torchvision would pad with zeros instead).
CropBox center_crop_box(int width, int height, int resize_shorter, int crop_h, int crop_w);

// The smallest full-size-equivalent decode size that keeps `box` at least out_w x out_h pixels
// after scaling: pass it to decode() as (min_width, min_height) so the DCT downscale never makes
// the crop upsample.
Size decode_size_for_crop(int width, int height, CropBox box, int out_h, int out_w);

// The box cut out of `src` (full-size coordinates; mapped by src.scale_num/scale_den and, for a
// region decode, src.origin_x/y; the box must lie inside the decoded rectangle), resampled to
// out_h x out_w with the antialiased bilinear filter, mirrored left-right when hflip, then
// (x / 255 - mean[c]) / std[c] written as float32 planar CHW: out_chw[c * out_h * out_w + y * out_w + x].
// Throws UsageError for an empty box, a box outside the image (or the decoded region) or a
// non-positive output size. Filter taps are clamped to the box's pixels, so a region decode of the
// same box holds every pixel read.
void resized_crop(const Image& src, CropBox box, int out_h, int out_w, bool hflip, const float mean[3],
                  const float std[3], float* out_chw);
// The same resampling to RGB8 HWC (rounded, clamped), for tests and image dumps.
void resized_crop_u8(const Image& src, CropBox box, int out_h, int out_w, bool hflip, std::uint8_t* out_hwc);

}  // namespace trainbox::data::image
