#include "decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::data::image {

namespace {

constexpr const char* kHintCorrupt = "re-fetch or re-export the file, or remove it from the dataset";
constexpr const char* kHintTruncated =
    "the file was cut short (an interrupted download or copy?): re-fetch it or remove it from the dataset";

[[noreturn]] void fail(const std::string& reason, const char* hint = kHintCorrupt) { throw DataError(reason, hint); }

void check_pixels(std::int64_t w, std::int64_t h) {
  if (w <= 0 || h <= 0) fail(fmt::format("image has no pixels ({}x{})", w, h));
  if (w * h > kMaxPixels)
    fail(fmt::format("image too large: {}x{} is over {} pixels", w, h, kMaxPixels),
         "downscale the image before training (trainbox refuses images over 2^28 pixels to bound memory)");
}

void check_not_empty(std::size_t size) {
  if (size == 0) fail("zero bytes", "the file is empty: re-fetch it or remove it from the dataset");
}

std::string first_bytes(const std::uint8_t* data, std::size_t size) {
  std::string s;
  for (std::size_t i = 0; i < std::min<std::size_t>(size, 8); ++i) s += fmt::format("{}{:02x}", i ? " " : "", data[i]);
  return s;
}

[[noreturn]] void fail_unknown(const std::uint8_t* data, std::size_t size) {
  fail(fmt::format("not an image (unknown format; starts with {})", first_bytes(data, size)),
       "trainbox reads JPEG and PNG files: convert other formats first, or remove the file from the dataset");
}

// --- JPEG (TurboJPEG) ---

// One decompressor per thread: tjInitDecompress costs ~100 µs of allocations; the handle is not thread-safe.
class TjHandle {
 public:
  TjHandle() : h_(tjInitDecompress()) {}
  ~TjHandle() {
    if (h_) tjDestroy(h_);
  }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  tjhandle get() {
    if (!h_) throw SystemError(std::string("TurboJPEG: cannot create a decompressor: ") + tjGetErrorStr2(nullptr));
    return h_;
  }

 private:
  tjhandle h_;
};

tjhandle thread_decompressor() {
  thread_local TjHandle handle;
  return handle.get();
}

// libjpeg's warnings (TJERR_WARNING) are errors here too: "Premature end of JPEG file" means the
// pixels below the cut are invented gray. The one benign warning is extraneous bytes before a
// marker (e.g. padding before EOI), which some cameras write and which loses no pixel.
bool benign_jpeg_warning(tjhandle h) {
  return tjGetErrorCode(h) == TJERR_WARNING && std::strstr(tjGetErrorStr2(h), "extraneous bytes") != nullptr;
}

[[noreturn]] void fail_jpeg(tjhandle h) {
  const std::string msg = tjGetErrorStr2(h);
  if (msg.find("Premature end") != std::string::npos || msg.find("premature end") != std::string::npos)
    fail("truncated JPEG (libjpeg: " + msg + ")", kHintTruncated);
  fail("corrupt JPEG (libjpeg: " + msg + ")");
}

struct JpegInfo {
  int width = 0, height = 0, colorspace = 0;
};

JpegInfo jpeg_info(tjhandle h, const std::uint8_t* data, std::size_t size) {
  JpegInfo info;
  int subsamp = 0;
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &info.width, &info.height, &subsamp,
                          &info.colorspace) != 0)
    fail_jpeg(h);
  check_pixels(info.width, info.height);
  return info;
}

// The smallest factor <= 1 that keeps the scaled size >= the minimum on each constrained axis.
tjscalingfactor pick_scale(int width, int height, int min_width, int min_height) {
  tjscalingfactor best{1, 1};
  if (min_width <= 0 && min_height <= 0) return best;
  int n = 0;
  const tjscalingfactor* f = tjGetScalingFactors(&n);
  for (int i = 0; f && i < n; ++i) {
    if (f[i].num > f[i].denom) continue;
    const bool ok = (min_width <= 0 || TJSCALED(width, f[i]) >= min_width) &&
                    (min_height <= 0 || TJSCALED(height, f[i]) >= min_height);
    if (ok && double(f[i].num) / f[i].denom < double(best.num) / best.denom) best = f[i];
  }
  return best;
}

// PIL's CMYK -> RGB (Convert.c cmyk2rgb) on Adobe-polarity CMYK as PIL reads it ("CMYK;I": every
// JPEG's CMYK is taken as inverted): with c = 255 - raw_c and nk = 255 - k = raw_k,
// R = nk - c * nk / 255, rounded as PIL's MULDIV255.
void cmyk_to_rgb(const std::uint8_t* cmyk, std::size_t pixels, std::uint8_t* rgb) {
  for (std::size_t p = 0; p < pixels; ++p, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const int t = (255 - cmyk[c]) * nk + 128;
      rgb[c] = static_cast<std::uint8_t>(nk - (((t >> 8) + t) >> 8));
    }
  }
}

Image decode_jpeg(const std::uint8_t* data, std::size_t size, int min_width, int min_height) {
  tjhandle h = thread_decompressor();
  const JpegInfo info = jpeg_info(h, data, size);
  const tjscalingfactor sf = pick_scale(info.width, info.height, min_width, min_height);
  Image img;
  img.full_width = info.width;
  img.full_height = info.height;
  img.scale_num = sf.num;
  img.scale_den = sf.denom;
  img.width = TJSCALED(info.width, sf);
  img.height = TJSCALED(info.height, sf);
  const std::size_t pixels = std::size_t(img.width) * std::size_t(img.height);
  // TJFLAG_LIMITSCANS: a progressive JPEG of thousands of tiny scans (a known denial of service)
  // is refused after 500 scans instead of taking minutes.
  const int flags = TJFLAG_LIMITSCANS;
  const unsigned long jsize = static_cast<unsigned long>(size);
  if (info.colorspace == TJCS_CMYK || info.colorspace == TJCS_YCCK) {
    std::vector<std::uint8_t> cmyk(pixels * 4);
    if (tjDecompress2(h, data, jsize, cmyk.data(), img.width, img.width * 4, img.height, TJPF_CMYK, flags) != 0 &&
        !benign_jpeg_warning(h))
      fail_jpeg(h);
    img.rgb.resize(pixels * 3);
    cmyk_to_rgb(cmyk.data(), pixels, img.rgb.data());
    return img;
  }
  img.rgb.resize(pixels * 3);
  if (tjDecompress2(h, data, jsize, img.rgb.data(), img.width, img.width * 3, img.height, TJPF_RGB, flags) != 0 &&
      !benign_jpeg_warning(h))
    fail_jpeg(h);
  return img;
}

// --- PNG (libpng) ---

constexpr std::uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

ImageHeader png_header(const std::uint8_t* data, std::size_t size) {
  // signature (8), IHDR length (4) and type (4), width, height
  if (size < 33) fail("truncated PNG (no complete IHDR chunk)", kHintTruncated);
  if (be32(data + 8) != 13 || std::memcmp(data + 12, "IHDR", 4) != 0)
    fail("corrupt PNG (libpng: IHDR is not the first chunk)");
  ImageHeader hd{static_cast<int>(std::min<std::uint32_t>(be32(data + 16), 0x7fffffff)),
                 static_cast<int>(std::min<std::uint32_t>(be32(data + 20), 0x7fffffff)), ImageFormat::png};
  check_pixels(hd.width, hd.height);
  return hd;
}

// Everything libpng's callbacks touch. libpng reports errors by longjmp, so no C++ object with a
// destructor may live in a frame it jumps over: the state is here, owned by decode_png's frame.
struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const std::uint8_t* data = nullptr;
  std::size_t size = 0, pos = 0;
  std::vector<png_bytep> rows;
  char message[256] = {};
  bool too_large = false;
  ~PngState() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

extern "C" void png_on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof st->message, "%s", msg ? msg : "unknown error");
  png_longjmp(png, 1);
}
extern "C" void png_on_warning(png_structp, png_const_charp) {}  // benign: gamma, iCCP, text chunks

extern "C" void png_on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) png_error(png, "truncated PNG");
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

// Returns false when libpng gave up (st.message says why). The only function that calls setjmp:
// its locals are plain values set before it or not used after a jump.
bool png_decode_core(PngState& st, Image& img) {
  if (setjmp(png_jmpbuf(st.png))) return false;
  png_set_read_fn(st.png, &st, png_on_read);
  // A CRC error in any chunk is an error (libpng's default only warns for ancillary chunks).
  png_set_crc_action(st.png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  png_read_info(st.png, st.info);
  const png_uint_32 w = png_get_image_width(st.png, st.info), h = png_get_image_height(st.png, st.info);
  if (std::int64_t(w) * std::int64_t(h) > kMaxPixels) {
    st.too_large = true;
    return false;
  }
  // PIL's convert("RGB"): palette and 1/2/4-bit gray expanded, gray replicated, alpha (and tRNS)
  // dropped, 16-bit samples to their high byte (PIL's "RGB;16B"), no gamma applied.
  png_set_palette_to_rgb(st.png);
  png_set_expand_gray_1_2_4_to_8(st.png);
  png_set_strip_16(st.png);
  png_set_strip_alpha(st.png);
  png_set_gray_to_rgb(st.png);
  png_set_interlace_handling(st.png);
  png_read_update_info(st.png, st.info);
  if (png_get_rowbytes(st.png, st.info) != std::size_t(w) * 3) png_error(st.png, "unexpected row size");
  img.width = img.full_width = static_cast<int>(w);
  img.height = img.full_height = static_cast<int>(h);
  img.rgb.resize(std::size_t(w) * h * 3);
  st.rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) st.rows[y] = img.rgb.data() + std::size_t(y) * w * 3;
  png_read_image(st.png, st.rows.data());
  png_read_end(st.png, nullptr);  // the chunks after IDAT: their CRCs, and IEND
  return true;
}

[[noreturn]] void fail_png(const PngState& st) {
  const std::string msg = st.message;
  const std::string crc = ": CRC error";
  if (msg.size() > crc.size() && msg.compare(msg.size() - crc.size(), crc.size(), crc) == 0)
    fail("PNG CRC error in chunk " + msg.substr(0, msg.size() - crc.size()));
  if (msg == "truncated PNG" || msg.find("Not enough image data") != std::string::npos)
    fail("truncated PNG (libpng: " + msg + ")", kHintTruncated);
  fail("corrupt PNG (libpng: " + msg + ")");
}

Image decode_png(const std::uint8_t* data, std::size_t size) {
  png_header(data, size);  // the size limit before libpng allocates anything
  PngState st;
  st.data = data;
  st.size = size;
  st.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, png_on_error, png_on_warning);
  if (st.png) st.info = png_create_info_struct(st.png);
  if (!st.png || !st.info) throw SystemError("libpng: cannot create a reader (out of memory?)");
  Image img;
  if (!png_decode_core(st, img)) {
    if (st.too_large) check_pixels(png_get_image_width(st.png, st.info), png_get_image_height(st.png, st.info));
    fail_png(st);
  }
  return img;
}

}  // namespace

ImageFormat sniff(const std::uint8_t* data, std::size_t size) {
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return ImageFormat::jpeg;
  if (size >= 8 && std::memcmp(data, kPngMagic, 8) == 0) return ImageFormat::png;
  return ImageFormat::unknown;
}

const char* format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::jpeg: return "JPEG";
    case ImageFormat::png: return "PNG";
    case ImageFormat::unknown: break;
  }
  return "unknown";
}

ImageHeader read_header(const std::uint8_t* data, std::size_t size) {
  check_not_empty(size);
  switch (sniff(data, size)) {
    case ImageFormat::jpeg: {
      const JpegInfo info = jpeg_info(thread_decompressor(), data, size);
      return {info.width, info.height, ImageFormat::jpeg};
    }
    case ImageFormat::png: return png_header(data, size);
    case ImageFormat::unknown: break;
  }
  fail_unknown(data, size);
}

Image decode(const std::uint8_t* data, std::size_t size, int min_width, int min_height) {
  check_not_empty(size);
  switch (sniff(data, size)) {
    case ImageFormat::jpeg: return decode_jpeg(data, size, min_width, min_height);
    case ImageFormat::png: return decode_png(data, size);
    case ImageFormat::unknown: break;
  }
  fail_unknown(data, size);
}

}  // namespace trainbox::data::image
