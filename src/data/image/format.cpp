// Image formats by magic bytes (format.h).
#include <trainbox/data/image/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include <trainbox/util/errors.h>

namespace trainbox::data::image {

namespace {

constexpr std::uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};

std::string first_bytes(const std::uint8_t* data, std::size_t size) {
  std::string s;
  for (std::size_t i = 0; i < std::min<std::size_t>(size, 8); ++i) s += fmt::format("{}{:02x}", i ? " " : "", data[i]);
  return s;
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

ImageFormat identify(const std::uint8_t* data, std::size_t size) {
  if (size == 0) throw DataError("zero bytes", "the file is empty: re-fetch it or remove it from the dataset");
  const ImageFormat f = sniff(data, size);
  if (f == ImageFormat::unknown)
    throw DataError(
        fmt::format("not an image (unknown format; starts with {})", first_bytes(data, size)),
        "trainbox reads JPEG and PNG files: convert other formats first, or remove the file from the dataset");
  return f;
}

}  // namespace trainbox::data::image
