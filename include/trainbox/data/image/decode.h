// trainbox/data/image/decode.h — JPEG and PNG files to RGB8 pixels, torch-free (trainbox_image),
// for the "your own images" pipeline (docs/datasets.md, "Decoding and transforms").
//
// JPEG goes through TurboJPEG (libjpeg-turbo: the library PIL itself decodes with, so pixels
// match PIL's), PNG through libpng, the reference implementation. Every input ends as HWC RGB8
// the way PIL's Image.convert("RGB") leaves it: grayscale replicated, CMYK/YCCK converted with
// PIL's formula, palettes expanded, alpha dropped (not composited), 16-bit samples cut to their
// high byte.
//
// Contract:
// - Thread-safe: each thread owns its TurboJPEG handle (thread_local, made on first use);
//   libpng state lives in the call. Call from any number of decode threads.
// - Any input is safe: bad bytes are a DataError whose message is one line with the reason
//   ("zero bytes", "truncated JPEG (…)", "not an image (unknown format; …)", "PNG CRC error in chunk
//   IDAT", or the library's own words); the caller prefixes the file name. Nothing crashes, and
//   images over kMaxPixels (2^28, 768 MiB of RGB) are refused before any pixel memory is taken.
// - Speed: decode() may use libjpeg's scaled IDCT (1/8 … 1 in eighths) when the caller says how
//   small the image may become; Image::scale_num/scale_den then say what was used, and
//   transform.h's resized_crop maps a full-size crop box onto the smaller image itself. Given a
//   region (the crop box), a JPEG decodes only the rows and columns that cover it (libjpeg's
//   jpeg_crop_scanline + jpeg_skip_scanlines, stopping after its last row); Image::origin_x/y say
//   where the decoded rectangle sits in the scaled image.
//
// GPU decoding (nvJPEG, later) plugs in at decode(): it is the one function that turns bytes into
// pixels; read_header() already answers the question a batched GPU decoder needs up front (size,
// format) and the Image's scale fields carry its downscale (nvJPEG has none; it would report 1/1).
//
//   ImageHeader h = read_header(bytes.data(), bytes.size());        // cheap: no pixels
//   CropBox box = random_resized_crop_box(h.width, h.height, 0.08, 1.0, 3. / 4, 4. / 3, rng);
//   Size need = decode_size_for_crop(h.width, h.height, box, 224, 224);   // transform.h
//   Image img = decode(bytes.data(), bytes.size(), need.width, need.height, &box);
//   resized_crop(img, box, 224, 224, flip, mean, std, out_chw);
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <trainbox/data/image/format.h>  // ImageFormat, sniff(), identify(): the magic bytes, without a codec

namespace trainbox::data::image {

// 2^28 pixels: 768 MiB as RGB8, far above any training image (a 100-megapixel photo is 2^26.6).
inline constexpr std::int64_t kMaxPixels = std::int64_t(1) << 28;

// A rectangle of the full-size image: torchvision's (i, j, h, w) = (top, left, height, width).
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};

struct ImageHeader {
  int width = 0, height = 0;
  ImageFormat format = ImageFormat::unknown;
};
// Size and format without decoding pixels (JPEG: tjDecompressHeader3; PNG: the IHDR chunk).
// Throws DataError as decode() does, including for sizes over kMaxPixels.
ImageHeader read_header(const std::uint8_t* data, std::size_t size);

struct Image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // HWC RGB8, width * height * 3 bytes
  // The scaled-IDCT factor decode() used: width == ceil(full_width * scale_num / scale_den), and a
  // point x of the full-size image is x * scale_num / scale_den here. 1/1 for PNG and full-size JPEG.
  int scale_num = 1, scale_den = 1;
  int full_width = 0, full_height = 0;  // the file's own size
  // Where pixel (0, 0) sits in the whole scaled image: 0, 0 unless decode() was given a region. The
  // full-size point x is at x * scale_num / scale_den - origin_x here.
  int origin_x = 0, origin_y = 0;
};

// Decodes a JPEG or PNG (by sniff()) to RGB8. min_width/min_height > 0 let a JPEG decode smaller:
// the smallest TurboJPEG scaling factor <= 1 whose scaled size is still >= (min_width, min_height)
// on each axis that has a minimum; 0 on both axes (the default) decodes full size. PNG is always
// full size. Throws DataError (one line: the reason) for anything that is not a whole, valid image.
//
// `region` (full-size coordinates, inside the image, else UsageError): a JPEG decodes only the
// scaled pixels [floor(left * s), ceil(right * s)) x [floor(top * s), ceil(bottom * s)) — exactly
// what resized_crop reads for that box — widened by kRegionMargin pixels on each side and, on the
// left, down to libjpeg's iMCU column grid; the result's origin_x/y place it. Inside the box the
// pixels equal the whole decode's (the margin keeps fancy chroma upsampling away from the cut).
// A region decode stops after the region's last row, so damage below it goes unseen; a truncated
// file is still refused: unless the file's last 64 bytes hold the end-of-image marker FF D9, the
// whole image is decoded instead (a valid file with a long trailer after EOI decodes; a cut one
// throws "truncated JPEG (…)"). PNG ignores the region and decodes whole (origin 0, 0).
inline constexpr int kRegionMargin = 2;
Image decode(const std::uint8_t* data, std::size_t size, int min_width = 0, int min_height = 0,
             const CropBox* region = nullptr);

}  // namespace trainbox::data::image
