// trainbox/data/image/format.h — which image format a file's first bytes are, without a
// decoder: torch-free and codec-free (trainbox_core), so the pip package's `trainbox data pack`
// refuses a file that cannot be an image with the same words the trainer's decoder uses.
//
//   ImageFormat f = identify(bytes.data(), bytes.size());   // DataError: "zero bytes", "not an image (…)"
#pragma once
#include <cstddef>
#include <cstdint>

namespace trainbox::data::image {

enum class ImageFormat { jpeg, png, unknown };

// By magic bytes: FF D8 FF (JPEG), 89 'PNG' 0D 0A 1A 0A (PNG); anything else (or too short) is unknown.
ImageFormat sniff(const std::uint8_t* data, std::size_t size);
const char* format_name(ImageFormat f);
// sniff(), and a DataError (one line: the reason, then a fix) for zero bytes or an unknown format:
// returns jpeg or png. A file that passes may still fail to decode (a cut JPEG, a bad PNG CRC).
ImageFormat identify(const std::uint8_t* data, std::size_t size);

}  // namespace trainbox::data::image
