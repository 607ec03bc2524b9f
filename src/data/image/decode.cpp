#include <trainbox/data/image/decode.h>

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

// jpeglib.h needs size_t and FILE declared first (cstdio above).
#include <jerror.h>
#include <jpeglib.h>

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
  void reset() {
    if (h_) tjDestroy(h_);
    h_ = tjInitDecompress();
  }

 private:
  tjhandle h_;
};

TjHandle& thread_handle() {
  thread_local TjHandle handle;
  return handle;
}
tjhandle thread_decompressor() { return thread_handle().get(); }

// libjpeg's warnings (TJERR_WARNING) are errors here too: "Premature end of JPEG file" means the
// pixels below the cut are invented gray. The one benign warning is extraneous bytes before a
// marker (e.g. padding before EOI), which some cameras write and which loses no pixel.
bool benign_jpeg_warning(tjhandle h) {
  return tjGetErrorCode(h) == TJERR_WARNING && std::strstr(tjGetErrorStr2(h), "extraneous bytes") != nullptr;
}

[[noreturn]] void fail_jpeg_message(const std::string& msg) {
  if (msg.find("Premature end") != std::string::npos || msg.find("premature end") != std::string::npos)
    fail("truncated JPEG (libjpeg: " + msg + ")", kHintTruncated);
  fail("corrupt JPEG (libjpeg: " + msg + ")");
}

// A failed call can leave TurboJPEG 2.1.5's handle unusable: after a bad DHT in
// tjDecompressHeader3, every later valid file failed with "Bogus Huffman table definition"
// (tests/unit/test_image.cpp, DamagedJpegsOnlyThrowDataError). The thread's next file gets a fresh one.
[[noreturn]] void fail_jpeg(tjhandle h) {
  const std::string msg = tjGetErrorStr2(h);
  thread_handle().reset();
  fail_jpeg_message(msg);
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

// --- JPEG region (the libjpeg API: TurboJPEG 2.1 has no partial decode) ---

// Same settings as tjDecompress2 without flags (islow IDCT, fancy upsampling), so the pixels of a
// region equal the whole decode's. TJFLAG_LIMITSCANS's 500-scan limit is the progress monitor below.
constexpr int kMaxScans = 500;

// Scaled-pixel rectangle [x0, x1) x [y0, y1) to decode, and the scale.
struct RegionPlan {
  tjscalingfactor sf{1, 1};
  int scaled_w = 0, scaled_h = 0;
  int x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};

RegionPlan plan_region(const JpegInfo& info, int min_width, int min_height, const CropBox& box) {
  if (box.width <= 0 || box.height <= 0 || box.top < 0 || box.left < 0 || box.left > info.width - box.width ||
      box.top > info.height - box.height)
    throw UsageError(fmt::format("decode region (top {}, left {}, height {}, width {}) is not inside the {}x{} image",
                                 box.top, box.left, box.height, box.width, info.width, info.height));
  RegionPlan p;
  p.sf = pick_scale(info.width, info.height, min_width, min_height);
  p.scaled_w = TJSCALED(info.width, p.sf);
  p.scaled_h = TJSCALED(info.height, p.sf);
  // transform.cpp's map_box: [floor(a * s), ceil(b * s)), here in integers (s = num / den).
  const std::int64_t num = p.sf.num, den = p.sf.denom;
  auto lo = [&](std::int64_t a) { return static_cast<int>(a * num / den); };
  auto hi = [&](std::int64_t b) { return static_cast<int>((b * num + den - 1) / den); };
  p.x0 = std::max(lo(box.left) - kRegionMargin, 0);
  p.x1 = std::min(hi(std::int64_t(box.left) + box.width) + kRegionMargin, p.scaled_w);
  p.y0 = std::max(lo(box.top) - kRegionMargin, 0);
  p.y1 = std::min(hi(std::int64_t(box.top) + box.height) + kRegionMargin, p.scaled_h);
  return p;
}

// Everything libjpeg's callbacks touch. libjpeg reports errors by calling error_exit, which
// longjmps back into jpeg_region_core: no C++ object with a destructor lives in the frames it
// jumps over, and this state, owned by decode_jpeg_region's frame, frees libjpeg's memory.
struct JpegRegionState {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};
  std::vector<std::uint8_t> cmyk;                          // CMYK/YCCK files decode to CMYK first, then cmyk_to_rgb
  ~JpegRegionState() { jpeg_destroy_decompress(&cinfo); }  // a no-op when create failed (mem == NULL)
};

JpegRegionState* region_state(j_common_ptr c) { return static_cast<JpegRegionState*>(c->client_data); }

extern "C" void jpeg_on_error(j_common_ptr c) {
  JpegRegionState* st = region_state(c);
  c->err->format_message(c, st->message);
  std::longjmp(st->jump, 1);
}

// Warnings (level -1) are errors, as TJERR_WARNING is in decode_jpeg; the exception is extraneous
// bytes before a marker (padding some cameras write). Trace messages (level >= 0) are ignored.
extern "C" void jpeg_on_message(j_common_ptr c, int level) {
  if (level >= 0 || c->err->msg_code == JWRN_EXTRANEOUS_DATA) return;
  jpeg_on_error(c);
}

extern "C" void jpeg_on_progress(j_common_ptr c) {
  if (!c->is_decompressor || reinterpret_cast<j_decompress_ptr>(c)->input_scan_number <= kMaxScans) return;
  JpegRegionState* st = region_state(c);
  std::snprintf(st->message, sizeof st->message, "Progressive JPEG image has more than %d scans", kMaxScans);
  std::longjmp(st->jump, 1);
}

// Returns false when libjpeg gave up (st.message says why). The only function that calls setjmp:
// its locals are plain values, and none is read after a jump.
bool jpeg_region_core(JpegRegionState& st, const std::uint8_t* data, std::size_t size, const RegionPlan& p, bool cmyk,
                      Image& img) {
  if (setjmp(st.jump)) return false;
  jpeg_decompress_struct& ci = st.cinfo;
  ci.err = jpeg_std_error(&st.err);
  st.err.error_exit = jpeg_on_error;
  st.err.emit_message = jpeg_on_message;
  ci.client_data = &st;
  jpeg_create_decompress(&ci);
  st.progress.progress_monitor = jpeg_on_progress;
  ci.progress = &st.progress;
  jpeg_mem_src(&ci, data, static_cast<unsigned long>(size));
  jpeg_read_header(&ci, TRUE);
  ci.out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;  // gray is replicated to RGB by libjpeg
  ci.scale_num = static_cast<unsigned>(p.sf.num);
  ci.scale_denom = static_cast<unsigned>(p.sf.denom);
  jpeg_start_decompress(&ci);  // a progressive file reads all its scans here
  // --- columns: libjpeg moves x0 left to its iMCU grid and keeps the right edge ---
  JDIMENSION x = static_cast<JDIMENSION>(p.x0), w = static_cast<JDIMENSION>(p.x1 - p.x0);
  if (w < ci.output_width) jpeg_crop_scanline(&ci, &x, &w);
  // --- rows: skip those above, read down to y1 ---
  if (p.y0 > 0) jpeg_skip_scanlines(&ci, static_cast<JDIMENSION>(p.y0));
  img.origin_x = static_cast<int>(x);
  img.origin_y = static_cast<int>(ci.output_scanline);
  img.width = static_cast<int>(ci.output_width);
  img.height = p.y1 - img.origin_y;
  const std::size_t channels = cmyk ? 4 : 3, stride = std::size_t(img.width) * channels;
  std::vector<std::uint8_t>& out = cmyk ? st.cmyk : img.rgb;
  out.resize(stride * std::size_t(img.height));
  while (int(ci.output_scanline) < p.y1) {
    JSAMPROW row = out.data() + std::size_t(int(ci.output_scanline) - img.origin_y) * stride;
    if (jpeg_read_scanlines(&ci, &row, 1) != 1) ERREXIT(&ci, JERR_INPUT_EMPTY);
  }
  // The whole height read: finish, which checks the rest of the file up to EOI as TurboJPEG does.
  if (ci.output_scanline == ci.output_height) jpeg_finish_decompress(&ci);
  return true;
}

// The data ends with EOI (FF D9), give or take a trailer: entropy-coded data cannot hold FF D9
// (a data FF is stuffed as FF 00), so a file cut anywhere in its scans fails this.
bool ends_with_eoi(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kTail = 64;
  for (std::size_t i = size > kTail ? size - kTail : 0; i + 1 < size; ++i)
    if (data[i] == 0xff && data[i + 1] == 0xd9) return true;
  return false;
}

Image decode_jpeg_region(const std::uint8_t* data, std::size_t size, int min_width, int min_height,
                         const CropBox& box) {
  const JpegInfo info = jpeg_info(thread_decompressor(), data, size);
  const RegionPlan plan = plan_region(info, min_width, min_height, box);
  // No EOI near the end: truncated, or a long trailer. The whole decode tells which.
  if (!ends_with_eoi(data, size)) return decode_jpeg(data, size, min_width, min_height);
  Image img;
  img.full_width = info.width;
  img.full_height = info.height;
  img.scale_num = plan.sf.num;
  img.scale_den = plan.sf.denom;
  const bool cmyk = info.colorspace == TJCS_CMYK || info.colorspace == TJCS_YCCK;
  JpegRegionState st;
  if (!jpeg_region_core(st, data, size, plan, cmyk, img)) fail_jpeg_message(st.message);
  if (cmyk) {
    img.rgb.resize(std::size_t(img.width) * img.height * 3);
    cmyk_to_rgb(st.cmyk.data(), std::size_t(img.width) * img.height, img.rgb.data());
  }
  return img;
}

// --- PNG (libpng) ---

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

ImageHeader read_header(const std::uint8_t* data, std::size_t size) {
  if (identify(data, size) == ImageFormat::png) return png_header(data, size);
  const JpegInfo info = jpeg_info(thread_decompressor(), data, size);
  return {info.width, info.height, ImageFormat::jpeg};
}

Image decode(const std::uint8_t* data, std::size_t size, int min_width, int min_height, const CropBox* region) {
  if (identify(data, size) == ImageFormat::png) return decode_png(data, size);
  return region ? decode_jpeg_region(data, size, min_width, min_height, *region)
                : decode_jpeg(data, size, min_width, min_height);
}

}  // namespace trainbox::data::image
