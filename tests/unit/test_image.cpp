// src/data/image: sniffing, decoding (JPEG made here with TurboJPEG, PNG written by hand), the
// error reasons, the crop-box rules, resampling identities and the per-sample generator.
// The comparison against PIL and torchvision is tests/integration/image_vs_pil.py.
#include <gtest/gtest.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <trainbox/util/errors.h>

#include <trainbox/data/image/decode.h>
#include <trainbox/data/image/transform.h>

using namespace trainbox;
using namespace trainbox::data::image;
using Bytes = std::vector<std::uint8_t>;

namespace {

// A smooth RGB test pattern, w x h.
Bytes pattern(int w, int h) {
  Bytes p(std::size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) p[(std::size_t(y) * w + x) * 3 + c] = std::uint8_t((x * 4 + y * 2 + c * 60) % 256);
  return p;
}

Bytes jpeg_of(const Bytes& rgb, int w, int h, int pf = TJPF_RGB, int subsamp = TJSAMP_444, int flags = 0) {
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(t, rgb.data(), w, 0, h, pf, &buf, &size, subsamp, 95, flags), 0) << tjGetErrorStr2(t);
  Bytes out(buf, buf + size);
  tjFree(buf);
  tjDestroy(t);
  return out;
}

// A photo-like w x h image with `channels` per pixel: smooth gradients, edges and noise in every
// channel, so chroma differs from luma and the upsampling at a region's edge has something to get wrong.
Bytes textured(int w, int h, int channels = 3) {
  Bytes p(std::size_t(w) * h * channels);
  Rng rng(11);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) {
        const double v = 128 + 60 * std::sin(x / (5.0 + c) + y / 9.0) + 30 * std::cos(y / (4.0 + c)) +
                         ((x / 16 + y / 16 + c) % 2 ? 20 : -20) + rng.uniform(-12, 12);
        p[(std::size_t(y) * w + x) * channels + c] = std::uint8_t(std::clamp(v, 0.0, 255.0));
      }
  return p;
}

void put_chunk(Bytes& png, const char* type, const Bytes& data) {
  const std::uint32_t n = static_cast<std::uint32_t>(data.size());
  for (int s = 24; s >= 0; s -= 8) png.push_back(std::uint8_t(n >> s));
  Bytes body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  png.insert(png.end(), body.begin(), body.end());
  const std::uint32_t crc = static_cast<std::uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size())));
  for (int s = 24; s >= 0; s -= 8) png.push_back(std::uint8_t(crc >> s));
}

// A PNG of `rows` (filter byte 0 prepended here) with colour type `ct` and `depth` bits.
Bytes png_of(int w, int h, int depth, int ct, const Bytes& raw, const Bytes& plte = {}) {
  Bytes png = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  Bytes ihdr;
  for (std::uint32_t v : {std::uint32_t(w), std::uint32_t(h)})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(std::uint8_t(v >> s));
  ihdr.insert(ihdr.end(), {std::uint8_t(depth), std::uint8_t(ct), 0, 0, 0});
  put_chunk(png, "IHDR", ihdr);
  if (!plte.empty()) put_chunk(png, "PLTE", plte);
  const std::size_t row = raw.size() / h;
  Bytes filtered;
  for (int y = 0; y < h; ++y) {
    filtered.push_back(0);
    filtered.insert(filtered.end(), raw.begin() + std::ptrdiff_t(y * row), raw.begin() + std::ptrdiff_t((y + 1) * row));
  }
  uLongf zn = compressBound(static_cast<uLong>(filtered.size()));
  Bytes z(zn);
  EXPECT_EQ(compress(z.data(), &zn, filtered.data(), static_cast<uLong>(filtered.size())), Z_OK);
  z.resize(zn);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", {});
  return png;
}

// The DataError's message for these bytes ("" if it decoded).
std::string decode_error(const Bytes& b) {
  try {
    decode(b.data(), b.size());
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

int max_abs_diff(const Bytes& a, const Bytes& b) {
  int m = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

}  // namespace

TEST(ImageDecode, SniffsByMagicBytes) {
  const Bytes jpg = {0xff, 0xd8, 0xff, 0xe0}, png = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a},
              gif = {'G', 'I', 'F'};
  EXPECT_EQ(sniff(jpg.data(), jpg.size()), ImageFormat::jpeg);
  EXPECT_EQ(sniff(png.data(), png.size()), ImageFormat::png);
  EXPECT_EQ(sniff(gif.data(), gif.size()), ImageFormat::unknown);
  EXPECT_EQ(sniff(png.data(), 7), ImageFormat::unknown);  // cut inside the magic
  EXPECT_EQ(sniff(jpg.data(), 0), ImageFormat::unknown);
}

TEST(ImageDecode, JpegRoundTripAndHeader) {
  const Bytes rgb = pattern(64, 48), jpg = jpeg_of(rgb, 64, 48);
  const ImageHeader h = read_header(jpg.data(), jpg.size());
  EXPECT_EQ(h.width, 64);
  EXPECT_EQ(h.height, 48);
  EXPECT_EQ(h.format, ImageFormat::jpeg);
  const Image im = decode(jpg.data(), jpg.size());
  ASSERT_EQ(im.width, 64);
  ASSERT_EQ(im.height, 48);
  EXPECT_EQ(im.scale_num, 1);
  EXPECT_EQ(im.scale_den, 1);
  // Quality 95, 4:4:4: lossy, but close; the pattern wraps at 256, and JPEG rings at those edges.
  double sum = 0;
  for (std::size_t i = 0; i < rgb.size(); ++i) sum += std::abs(int(im.rgb[i]) - int(rgb[i]));
  EXPECT_LT(sum / double(rgb.size()), 2.0);
  EXPECT_LE(max_abs_diff(im.rgb, rgb), 32);
}

TEST(ImageDecode, JpegScaledDecodePicksTheSmallestFactorAboveTheMinimum) {
  const Bytes jpg = jpeg_of(pattern(64, 48), 64, 48);
  const Image half = decode(jpg.data(), jpg.size(), 32, 20);  // 1/2 is 32x24; 7/16 would be 28 wide
  EXPECT_EQ(half.width, 32);
  EXPECT_EQ(half.height, 24);
  EXPECT_EQ(double(half.scale_num) / half.scale_den, 0.5);
  EXPECT_EQ(half.full_width, 64);
  const Image eighth = decode(jpg.data(), jpg.size(), 1, 1);
  EXPECT_EQ(eighth.width, 8);
  EXPECT_EQ(eighth.height, 6);
  const Image only_h = decode(jpg.data(), jpg.size(), 0, 47);  // height alone constrains: 1/1
  EXPECT_EQ(only_h.width, 64);
}

TEST(ImageDecode, GrayscaleJpegBecomesRgb) {
  Bytes gray(32 * 16);
  for (std::size_t i = 0; i < gray.size(); ++i) gray[i] = std::uint8_t(i % 200);
  const Bytes jpg = jpeg_of(gray, 32, 16, TJPF_GRAY, TJSAMP_GRAY);
  const Image im = decode(jpg.data(), jpg.size());
  ASSERT_EQ(im.rgb.size(), std::size_t(32 * 16 * 3));
  for (std::size_t p = 0; p < 32 * 16; ++p) {
    EXPECT_EQ(im.rgb[p * 3], im.rgb[p * 3 + 1]);
    EXPECT_EQ(im.rgb[p * 3], im.rgb[p * 3 + 2]);
  }
}

TEST(ImageDecode, PngColourTypesBecomeRgb8) {
  const Bytes rgb = pattern(5, 3);
  EXPECT_EQ(decode(png_of(5, 3, 8, 2, rgb).data(), png_of(5, 3, 8, 2, rgb).size()).rgb, rgb);
  // RGBA: alpha dropped, not composited (PIL's convert("RGB")).
  Bytes rgba;
  for (std::size_t p = 0; p < 15; ++p) rgba.insert(rgba.end(), {rgb[p * 3], rgb[p * 3 + 1], rgb[p * 3 + 2], 7});
  const Bytes png_rgba = png_of(5, 3, 8, 6, rgba);
  EXPECT_EQ(decode(png_rgba.data(), png_rgba.size()).rgb, rgb);
  // Palette, 4-bit indices: two pixels per byte.
  const Bytes plte = {10, 20, 30, 200, 100, 50};
  const Bytes pal = png_of(2, 1, 4, 3, {0x01}, plte);
  EXPECT_EQ(decode(pal.data(), pal.size()).rgb, (Bytes{10, 20, 30, 200, 100, 50}));
  // 16-bit gray: the high byte, replicated.
  const Bytes g16 = png_of(2, 1, 16, 0, {0x12, 0x34, 0xfe, 0xdc});
  EXPECT_EQ(decode(g16.data(), g16.size()).rgb, (Bytes{0x12, 0x12, 0x12, 0xfe, 0xfe, 0xfe}));
  const ImageHeader h = read_header(pal.data(), pal.size());
  EXPECT_EQ(h.width, 2);
  EXPECT_EQ(h.format, ImageFormat::png);
}

TEST(ImageDecode, ErrorsNameTheReason) {
  EXPECT_EQ(decode_error({}), "zero bytes");
  EXPECT_EQ(decode_error({'h', 'e', 'l', 'l', 'o'}).rfind("not an image (unknown format; starts with 68 65", 0), 0u);
  const Bytes jpg = jpeg_of(pattern(64, 48), 64, 48);
  const Bytes cut(jpg.begin(), jpg.begin() + std::ptrdiff_t(jpg.size() * 2 / 3));
  EXPECT_EQ(decode_error(cut).rfind("truncated JPEG", 0), 0u) << decode_error(cut);
  Bytes png = png_of(5, 3, 8, 2, pattern(5, 3));
  const Bytes png_cut(png.begin(), png.end() - 20);
  EXPECT_EQ(decode_error(png_cut).rfind("truncated PNG", 0), 0u) << decode_error(png_cut);
  png[png.size() - 12 - 1] ^= 0x01;  // the last byte of IDAT's CRC (IEND is the last 12 bytes)
  EXPECT_EQ(decode_error(png), "PNG CRC error in chunk IDAT");
  // Headers alone refuse what decode refuses, with the same type.
  EXPECT_THROW(read_header(cut.data(), 2), DataError);
  EXPECT_THROW(read_header(png_cut.data(), 20), DataError);
}

TEST(ImageDecode, OversizedImagesAreRefusedBeforeDecoding) {
  // A PNG header claiming 65536 x 65536 (2^32 pixels): refused by its header, nothing allocated.
  Bytes png = png_of(1, 1, 8, 2, {1, 2, 3});
  png[16 + 1] = 0x01, png[16 + 2] = 0, png[16 + 3] = 0;
  png[20 + 1] = 0x01, png[20 + 2] = 0, png[20 + 3] = 0;
  EXPECT_NE(decode_error(png).find("image too large"), std::string::npos) << decode_error(png);
}

TEST(ImageDecode, DamagedJpegsOnlyThrowDataError) {
  const Bytes jpg = jpeg_of(pattern(64, 48), 64, 48);
  const Bytes clean = decode(jpg.data(), jpg.size()).rgb;
  Rng rng(7);
  for (int t = 0; t < 200; ++t) {
    Bytes b = jpg;
    for (int k = 0; k < 4; ++k)
      b[std::size_t(rng.randint(3, std::int64_t(b.size())))] ^= std::uint8_t(rng.randint(1, 256));
    try {
      const Image im = decode(b.data(), b.size());
      EXPECT_EQ(im.rgb.size(), std::size_t(im.width) * im.height * 3);
    } catch (const DataError&) {
    }
    // A bad file leaves this thread's decoder as it found it: the valid file still decodes (a
    // damaged DHT used to break TurboJPEG's handle for every later file at try 15).
    EXPECT_EQ(decode(jpg.data(), jpg.size()).rgb, clean) << "after damaged try " << t;
  }
}

TEST(ImageTransform, RandomResizedCropBoxesStayInsideAndInRange) {
  for (int k = 0; k < 2000; ++k) {
    Rng rng = sample_rng(1, 0, k);
    const int w = 50 + k % 500, h = 40 + (k * 7) % 400;
    const CropBox b = random_resized_crop_box(w, h, 0.08, 1.0, 3. / 4, 4. / 3, rng);
    ASSERT_GT(b.width, 0);
    ASSERT_GT(b.height, 0);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_LE(b.top + b.height, h);
    ASSERT_LE(b.left + b.width, w);
    const double ratio = double(b.width) / b.height, frac = double(b.width) * b.height / (double(w) * h);
    // Rounding w and h to integers moves ratio and area a little: allow two pixels' worth.
    EXPECT_GE(ratio, 3. / 4 * (1 - 2. / std::min(b.width, b.height)) - 1e-9) << k;
    EXPECT_LE(ratio, 4. / 3 * (1 + 2. / std::min(b.width, b.height)) + 1e-9) << k;
    EXPECT_GE(frac, 0.08 * (1 - 4. / std::min(b.width, b.height)) - 1e-9) << k;
  }
}

TEST(ImageTransform, RandomResizedCropFallsBackToTorchvisionsCentreCrop) {
  // 10 x 1000 with scale >= 0.9: every try asks for a ~95-pixel-wide crop; torchvision's fallback
  // clamps the ratio to 3/4: w = 10, h = round(10 / 0.75) = 13, centred.
  Rng rng(3);
  const CropBox b = random_resized_crop_box(10, 1000, 0.9, 1.0, 3. / 4, 4. / 3, rng);
  EXPECT_EQ(b.width, 10);
  EXPECT_EQ(b.height, 13);
  EXPECT_EQ(b.top, (1000 - 13) / 2);
  EXPECT_EQ(b.left, 0);
  const CropBox wide = random_resized_crop_box(1000, 10, 0.9, 1.0, 3. / 4, 4. / 3, rng);
  EXPECT_EQ(wide.height, 10);
  EXPECT_EQ(wide.width, 13);  // round(10 * 4/3) = round(13.33)
  EXPECT_EQ(wide.left, (1000 - 13) / 2);
}

TEST(ImageTransform, CenterCropBoxIsResizeThenCenterCropInSourcePixels) {
  // 500x375, Resize(256) -> 341x256, CenterCrop(224) at top 16, left round(58.5) = 58 (half to even).
  const CropBox b = center_crop_box(500, 375, 256, 224, 224);
  EXPECT_EQ(b.top, 23);      // 16 * 375/256 = 23.44
  EXPECT_EQ(b.height, 329);  // bottom round(240 * 375/256 = 351.56) = 352
  EXPECT_EQ(b.left, 85);     // 58 * 500/341 = 85.04
  EXPECT_EQ(b.width, 328);   // right round(282 * 500/341 = 413.49) = 413
  const CropBox whole = center_crop_box(100, 80, 80, 80, 100);
  EXPECT_EQ(whole.left, 0);
  EXPECT_EQ(whole.width, 100);
}

TEST(ImageTransform, IdentityCropFlipAndNormalise) {
  Image im;
  im.width = 7, im.height = 5, im.rgb = pattern(7, 5);
  Bytes same(im.rgb.size()), flipped(im.rgb.size());
  resized_crop_u8(im, {0, 0, 5, 7}, 5, 7, false, same.data());
  EXPECT_EQ(same, im.rgb);  // scale 1: one tap of weight 1 per pixel
  resized_crop_u8(im, {0, 0, 5, 7}, 5, 7, true, flipped.data());
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(flipped[(y * 7 + x) * 3 + c], im.rgb[(y * 7 + 6 - x) * 3 + c]);
  const float mean[3] = {0.5f, 0.f, 1.f}, stdv[3] = {0.25f, 1.f, 0.5f};
  std::vector<float> chw(3 * 5 * 7);
  resized_crop(im, {1, 2, 3, 4}, 5, 7, false, mean, stdv, chw.data());
  Image white;
  white.width = 4, white.height = 4, white.rgb.assign(48, 255);
  resized_crop(white, {0, 0, 4, 4}, 2, 3, true, mean, stdv, chw.data());
  EXPECT_FLOAT_EQ(chw[0], 2.f);   // (1 - 0.5) / 0.25
  EXPECT_FLOAT_EQ(chw[6], 1.f);   // green plane
  EXPECT_FLOAT_EQ(chw[12], 0.f);  // blue plane
  EXPECT_THROW(resized_crop(white, {0, 0, 5, 4}, 2, 2, false, mean, stdv, chw.data()), UsageError);
  EXPECT_THROW(resized_crop(white, {0, 0, 0, 4}, 2, 2, false, mean, stdv, chw.data()), UsageError);
}

TEST(ImageTransform, BoxesMapOntoAScaledDecode) {
  // The same pixels as a 1/2-scale decode of a 16x12 file: a full-size box halves onto it.
  Image half;
  half.width = 8, half.height = 6, half.rgb = pattern(8, 6);
  half.scale_num = 1, half.scale_den = 2, half.full_width = 16, half.full_height = 12;
  Image plain = half;
  plain.scale_den = 1, plain.full_width = 8, plain.full_height = 6;
  Bytes a(4 * 3 * 3), b(a.size());
  resized_crop_u8(half, {2, 4, 8, 12}, 3, 4, false, a.data());
  resized_crop_u8(plain, {1, 2, 4, 6}, 3, 4, false, b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(decode_size_for_crop(1000, 800, {0, 0, 400, 500}, 224, 224).width, 448);
}

// --- region decode (decode(..., &box)): the box's pixels of a whole decode, and nothing lost ---

namespace {

// Max abs difference between `reg` and the same scaled pixels of `whole`, over the whole decoded
// region (`region_diff`) and over the pixels the box covers, the ones resized_crop reads (`box_diff`).
struct RegionDiff {
  int region_diff = 0, box_diff = 0;
};

RegionDiff compare_region(const Image& whole, const Image& reg, const CropBox& box) {
  EXPECT_EQ(reg.scale_num, whole.scale_num);
  EXPECT_EQ(reg.scale_den, whole.scale_den);
  EXPECT_GE(reg.origin_x, 0);
  EXPECT_GE(reg.origin_y, 0);
  EXPECT_LE(reg.origin_x + reg.width, whole.width);
  EXPECT_LE(reg.origin_y + reg.height, whole.height);
  const int n = reg.scale_num, d = reg.scale_den;
  const int bx0 = box.left * n / d, bx1 = ((box.left + box.width) * n + d - 1) / d;
  const int by0 = box.top * n / d, by1 = ((box.top + box.height) * n + d - 1) / d;
  EXPECT_LE(reg.origin_x, bx0);
  EXPECT_LE(reg.origin_y, by0);
  EXPECT_GE(reg.origin_x + reg.width, bx1);
  EXPECT_GE(reg.origin_y + reg.height, by1);
  RegionDiff r;
  for (int y = 0; y < reg.height; ++y)
    for (int x = 0; x < reg.width; ++x)
      for (int c = 0; c < 3; ++c) {
        const int gx = x + reg.origin_x, gy = y + reg.origin_y;
        const int diff = std::abs(int(reg.rgb[(std::size_t(y) * reg.width + x) * 3 + c]) -
                                  int(whole.rgb[(std::size_t(gy) * whole.width + gx) * 3 + c]));
        r.region_diff = std::max(r.region_diff, diff);
        if (gx >= bx0 && gx < bx1 && gy >= by0 && gy < by1) r.box_diff = std::max(r.box_diff, diff);
      }
  return r;
}

// Random training boxes plus the corners, a 1-pixel box and the whole image.
std::vector<CropBox> test_boxes(int w, int h, int n) {
  std::vector<CropBox> boxes = {
      {0, 0, h, w}, {0, 0, 1, 1}, {h - 1, w - 1, 1, 1}, {0, w - 17, 9, 17}, {h - 9, 0, 9, 17}};
  Rng rng(5);
  for (int i = 0; i < n; ++i) boxes.push_back(random_resized_crop_box(w, h, 0.08, 1.0, 3. / 4, 4. / 3, rng));
  return boxes;
}

double psnr(const std::vector<float>& a, const std::vector<float>& b) {
  double se = 0;
  for (std::size_t i = 0; i < a.size(); ++i) se += double(a[i] - b[i]) * double(a[i] - b[i]);
  const double mse = se / double(a.size());
  return mse == 0 ? INFINITY : 10 * std::log10(255.0 * 255.0 / mse);
}

}  // namespace

TEST(ImageRegionDecode, EqualsTheSameRectangleOfAWholeDecode) {
  // 203 x 157: neither axis a multiple of the 16-pixel MCU. Scale 1/1 and 1/2; every subsampling
  // TurboJPEG writes, baseline and progressive.
  const int w = 203, h = 157;
  const Bytes rgb = textured(w, h), gray = textured(w, h, 1);
  struct Case {
    const char* name;
    int subsamp, flags;
  };
  const Case cases[] = {{"4:4:4", TJSAMP_444, 0},
                        {"4:2:2", TJSAMP_422, 0},
                        {"4:2:0", TJSAMP_420, 0},
                        {"4:4:0", TJSAMP_440, 0},
                        {"4:1:1", TJSAMP_411, 0},
                        {"gray", TJSAMP_GRAY, 0},
                        {"4:2:0 progressive", TJSAMP_420, TJFLAG_PROGRESSIVE}};
  for (const Case& k : cases) {
    const Bytes jpg = k.subsamp == TJSAMP_GRAY ? jpeg_of(gray, w, h, TJPF_GRAY, TJSAMP_GRAY, k.flags)
                                               : jpeg_of(rgb, w, h, TJPF_RGB, k.subsamp, k.flags);
    for (const int den : {1, 2}) {
      const int mw = den == 1 ? 0 : (w + 1) / 2, mh = den == 1 ? 0 : (h + 1) / 2;
      const Image whole = decode(jpg.data(), jpg.size(), mw, mh);
      ASSERT_EQ(whole.scale_den * 1, den * whole.scale_num);
      RegionDiff worst;
      for (const CropBox& box : test_boxes(w, h, 60)) {
        const Image reg = decode(jpg.data(), jpg.size(), mw, mh, &box);
        const RegionDiff d = compare_region(whole, reg, box);
        worst.region_diff = std::max(worst.region_diff, d.region_diff);
        worst.box_diff = std::max(worst.box_diff, d.box_diff);
      }
      std::printf("region vs whole decode, %s, scale 1/%d: max abs diff %d in the box, %d in the margin\n", k.name, den,
                  worst.box_diff, worst.region_diff);
      EXPECT_EQ(worst.box_diff, 0) << k.name << " 1/" << den;
    }
  }
}

TEST(ImageRegionDecode, CmykRegionIsConvertedAsTheWholeDecode) {
  const int w = 97, h = 61;
  const Bytes jpg = jpeg_of(textured(w, h, 4), w, h, TJPF_CMYK, TJSAMP_420);  // written as YCCK
  const Image whole = decode(jpg.data(), jpg.size());
  for (const CropBox& box : test_boxes(w, h, 20)) {
    const Image reg = decode(jpg.data(), jpg.size(), 0, 0, &box);
    EXPECT_EQ(compare_region(whole, reg, box).box_diff, 0);
  }
}

TEST(ImageRegionDecode, CropsMatchTheWholeDecodesCrops) {
  // The training path end to end: scale chosen for the crop, region decode, resized_crop, against
  // the same crop of the whole (same-scale) decode.
  const int w = 500, h = 375;
  const Bytes jpg = jpeg_of(textured(w, h), w, h, TJPF_RGB, TJSAMP_420);
  const float mean[3] = {0.f, 0.f, 0.f}, unit[3] = {1.f / 255, 1.f / 255, 1.f / 255};  // outputs 0..255
  double worst = INFINITY;
  int n = 0;
  for (int k = 0; k < 200; ++k) {
    Rng rng = sample_rng(3, 0, k);
    const CropBox box = random_resized_crop_box(w, h, 0.08, 1.0, 3. / 4, 4. / 3, rng);
    const Size need = decode_size_for_crop(w, h, box, 64, 64);
    const Image whole = decode(jpg.data(), jpg.size(), need.width, need.height);
    const Image reg = decode(jpg.data(), jpg.size(), need.width, need.height, &box);
    std::vector<float> a(3 * 64 * 64), b(a.size());
    resized_crop(whole, box, 64, 64, k % 2 == 0, mean, unit, a.data());
    resized_crop(reg, box, 64, 64, k % 2 == 0, mean, unit, b.data());
    worst = std::min(worst, psnr(a, b));
    n += reg.scale_num != reg.scale_den;
  }
  std::printf("crop of the region decode vs crop of the whole decode: worst PSNR %.1f dB over 200 crops (%d scaled)\n",
              worst, n);
  EXPECT_EQ(worst, INFINITY);  // identical: the same IDCT of the same blocks (docs/datasets.md)
  EXPECT_GT(n, 0);             // some crops were DCT-scaled
}

TEST(ImageRegionDecode, TruncatedFilesAreStillRefused) {
  const int w = 203, h = 157;
  const Bytes jpg = jpeg_of(textured(w, h), w, h, TJPF_RGB, TJSAMP_420);
  const CropBox top = {0, 0, 20, 30};  // decoding stops long before the cut
  auto region_error = [&](const Bytes& b) -> std::string {
    try {
      decode(b.data(), b.size(), 0, 0, &top);
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  };
  for (const std::size_t cut : {jpg.size() * 2 / 3, jpg.size() - 100, jpg.size() - 2, jpg.size() - 1}) {
    const Bytes b(jpg.begin(), jpg.begin() + std::ptrdiff_t(cut));
    EXPECT_EQ(region_error(b).rfind("truncated JPEG", 0), 0u) << cut << " of " << jpg.size() << ": " << region_error(b);
  }
  // What follows EOI is not a cut: zero padding (the region path) and a 200-byte trailer (no EOI in
  // the last 64 bytes: the whole decode decides) both decode, to the same pixels.
  const Image whole = decode(jpg.data(), jpg.size());
  for (const std::size_t extra : {std::size_t(16), std::size_t(200)}) {
    Bytes b = jpg;
    b.insert(b.end(), extra, extra == 16 ? 0 : 'A');
    EXPECT_EQ(region_error(b), "") << extra;
    const Image reg = decode(b.data(), b.size(), 0, 0, &top);
    EXPECT_EQ(compare_region(whole, reg, top).box_diff, 0) << extra;
  }
}

TEST(ImageRegionDecode, DamagedJpegsOnlyThrowDataError) {
  const Bytes jpg = jpeg_of(textured(64, 48), 64, 48, TJPF_RGB, TJSAMP_420);
  Rng rng(9);
  for (int t = 0; t < 300; ++t) {
    Bytes b = jpg;
    for (int k = 0; k < 4; ++k)
      b[std::size_t(rng.randint(3, std::int64_t(b.size())))] ^= std::uint8_t(rng.randint(1, 256));
    const CropBox box = random_resized_crop_box(64, 48, 0.08, 1.0, 3. / 4, 4. / 3, rng);
    try {
      const Image im = decode(b.data(), b.size(), 8, 8, &box);
      EXPECT_EQ(im.rgb.size(), std::size_t(im.width) * im.height * 3);
    } catch (const DataError&) {
    }
  }
}

TEST(ImageRegionDecode, BoxesOutsideTheRegionAreUsageErrors) {
  const Bytes jpg = jpeg_of(textured(203, 157), 203, 157, TJPF_RGB, TJSAMP_420);
  const CropBox outside = {150, 0, 10, 10};  // 150 + 10 > 157
  EXPECT_THROW(decode(jpg.data(), jpg.size(), 0, 0, &outside), UsageError);
  const CropBox box = {100, 120, 40, 60};
  const Image reg = decode(jpg.data(), jpg.size(), 0, 0, &box);
  EXPECT_GT(reg.origin_x, 0);
  EXPECT_GT(reg.origin_y, 0);
  Bytes out(8 * 8 * 3);
  EXPECT_NO_THROW(resized_crop_u8(reg, box, 8, 8, false, out.data()));
  EXPECT_THROW(resized_crop_u8(reg, {0, 0, 40, 60}, 8, 8, false, out.data()), UsageError);  // not what was decoded
  // PNG ignores the region: the whole image, origin 0.
  const Bytes png = png_of(5, 3, 8, 2, pattern(5, 3));
  const CropBox small = {1, 1, 1, 1};
  const Image p = decode(png.data(), png.size(), 0, 0, &small);
  EXPECT_EQ(p.width, 5);
  EXPECT_EQ(p.origin_x, 0);
}

TEST(ImageRng, SampleStreamsAreDeterministicAndDistinct) {
  Rng a = sample_rng(42, 3, 1000), b = sample_rng(42, 3, 1000);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.next_u64(), b.next_u64());
  const std::uint64_t first = sample_rng(42, 3, 1000).next_u64();
  EXPECT_NE(first, sample_rng(42, 3, 1001).next_u64());
  EXPECT_NE(first, sample_rng(42, 4, 1000).next_u64());
  EXPECT_NE(first, sample_rng(43, 3, 1000).next_u64());
  Rng r(1);
  int counts[3] = {};
  double sum = 0;
  for (int i = 0; i < 30000; ++i) {
    const std::int64_t v = r.randint(5, 8);
    ASSERT_GE(v, 5);
    ASSERT_LT(v, 8);
    ++counts[v - 5];
    const double u = r.uniform(2.0, 3.0);
    ASSERT_GE(u, 2.0);
    ASSERT_LT(u, 3.0);
    sum += u;
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);  // > 5 sigma (sigma = 82)
  EXPECT_NEAR(sum / 30000, 2.5, 0.01);              // sigma of the mean = 0.0017
}
