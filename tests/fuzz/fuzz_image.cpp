// Bytes as an image file -> data::image::read_header, decode (full size, DCT-scaled, and the
// region of a crop box drawn from the input) and a resized_crop of what decoded (src/data/image).
// Rejection is a DataError; what is accepted is an RGB8 buffer of exactly width x height x 3 whose
// size agrees with read_header, a scaled decode is never smaller than asked for nor larger than the
// full one, and a region decode lies inside the scaled image and holds its box (resized_crop of
// the box on it throws no UsageError).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <trainbox/data/image/decode.h>
#include <trainbox/data/image/transform.h>
#include "fuzz_common.h"
#include <trainbox/util/errors.h>

namespace img = trainbox::data::image;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* in, std::size_t size) {
  try {
    const img::ImageHeader h = img::read_header(in, size);
    const img::Image full = img::decode(in, size);
    FUZZ_CHECK(full.width == h.width && full.height == h.height && full.scale_num == full.scale_den);
    FUZZ_CHECK(full.rgb.size() == std::size_t(full.width) * full.height * 3);
    const int mw = std::max(1, h.width / 3), mh = std::max(1, h.height / 5);
    const img::Image small = img::decode(in, size, mw, mh);
    FUZZ_CHECK(small.width >= mw && small.height >= mh && small.width <= full.width && small.height <= full.height);
    FUZZ_CHECK(small.rgb.size() == std::size_t(small.width) * small.height * 3);
    // The crop a training sample would take of it, mapped onto the scaled decode.
    img::Rng rng(size);
    const img::CropBox box = img::random_resized_crop_box(h.width, h.height, 0.08, 1.0, 0.75, 4.0 / 3, rng);
    const float mean[3] = {0.5f, 0.5f, 0.5f}, stdv[3] = {0.25f, 0.25f, 0.25f};
    std::vector<float> out(3 * 8 * 8);
    img::resized_crop(small, box, 8, 8, size % 2 == 0, mean, stdv, out.data());
    for (float v : out) FUZZ_CHECK(v >= -2.01f && v <= 2.01f);
    // The same box as a region: decoded at the scale the crop allows (transform.h's rule).
    const img::Size need = img::decode_size_for_crop(h.width, h.height, box, 8, 8);
    const img::Image reg = img::decode(in, size, need.width, need.height, &box);
    FUZZ_CHECK(reg.rgb.size() == std::size_t(reg.width) * reg.height * 3 && reg.width > 0 && reg.height > 0);
    FUZZ_CHECK(reg.origin_x >= 0 && reg.origin_y >= 0 && reg.full_width == h.width && reg.full_height == h.height);
    const auto scaled = [&](int n) {
      return int((std::int64_t(n) * reg.scale_num + reg.scale_den - 1) / reg.scale_den);
    };
    FUZZ_CHECK(reg.origin_x + reg.width <= scaled(h.width) && reg.origin_y + reg.height <= scaled(h.height));
    img::resized_crop(reg, box, 8, 8, false, mean, stdv, out.data());
    for (float v : out) FUZZ_CHECK(v >= -2.01f && v <= 2.01f);
  } catch (const trainbox::DataError&) {
  }
  return 0;
}
