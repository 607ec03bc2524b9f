// trainbox/data/formats.h — the byte-level half of the dataset readers: IDX, CIFAR-10
// binary, UTF-8 text and the llm.c .bin token file. Each function takes a file's bytes (and
// its path, for messages), checks everything a reader relies on — sizes, offsets, magic
// numbers, label ranges — and returns where the data is; the torch half (dataset.cpp,
// text.cpp) only copies bytes into tensors. No torch here, so trainbox_core holds it and the
// libFuzzer harnesses (tests/fuzz: idx, cifar, text) run it on arbitrary input.
//
// Every rejection is a DataError naming the file, the offset or count, what was expected and
// the fix; nothing reads outside `bytes`.
//
//   std::string ib = read_maybe_gz(images_path), lb = read_maybe_gz(labels_path);
//   IdxPair idx = parse_idx_pair(ib, images_path, lb, labels_path, 10);
//   std::memcpy(dst, ib.data() + idx.images.data_offset, ib.size() - idx.images.data_offset);
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::data {

// The whole file, decompressed when it is gzip (zlib reads plain files unchanged).
std::string read_maybe_gz(const std::string& path);

// --- IDX (MNIST, Fashion-MNIST): big-endian header, then unsigned bytes ---

struct IdxHeader {
  std::vector<std::int64_t> dims;  // each 1..2^28; their product is the data's size
  std::size_t data_offset = 0;     // 4 + 4 * dims.size(); the data runs to the end of the file
};
// An IDX file of unsigned bytes with `ndim` dimensions, exactly as long as they say.
IdxHeader parse_idx_header(std::string_view bytes, const std::string& path, int ndim);

struct IdxPair {
  IdxHeader images;  // dims {n, rows, cols}
  IdxHeader labels;  // dims {n}, every label < classes
};
// An images file (3 dimensions) and its labels file (1): the same count, labels in range.
IdxPair parse_idx_pair(std::string_view images, const std::string& images_path, std::string_view labels,
                       const std::string& labels_path, std::int64_t classes);

// --- CIFAR-10 binary version: records of a label byte and a 3x32x32 image ---

inline constexpr std::size_t kCifar10RecordBytes = 1 + 3 * 32 * 32;
// The number of records (>= 1) in a data_batch_N.bin / test_batch.bin; every label < 10.
std::int64_t parse_cifar10(std::string_view bytes, const std::string& path);

// --- the llm.c .bin token file (layout: trainbox/data/text.h) ---

struct TokenFileHeader {
  std::int64_t count = 0;      // ids, from the header; the file holds exactly these
  std::size_t ids_offset = 0;  // kTokenFileHeaderBytes
  int width = 2;               // bytes per id: 2 (version 1) or 4 (llm.c's Llama 3 layout)
};
// Whether `bytes` starts with the token file's magic (a .bin by content, whatever its name).
bool has_token_file_magic(std::string_view bytes);
TokenFileHeader parse_token_file(std::string_view bytes, const std::string& path);
// Writes the header's `count` ids (little-endian uint16 or uint32, any host byte order) to
// out[0..count); returns the vocabulary, the largest id + 1 (0 without tokens). DataError: a
// uint32 id above INT32_MAX.
std::int64_t decode_token_ids(std::string_view bytes, const TokenFileHeader& header, std::int32_t* out);
// The 1024-byte header of a token file of `count` ids, `width` 2 or 4 bytes each.
std::string token_file_header(std::int64_t count, int width);
// The .mask sidecar (layout: trainbox/data/token_file.h): its header checked against the token
// count of its .bin; returns the offset of the mask bytes. DataError naming what differs.
std::size_t parse_mask_file(std::string_view bytes, const std::string& path, std::int64_t tokens);
std::string mask_file_header(std::int64_t count);

// --- UTF-8 text ---

struct NotText {
  std::int64_t offset = -1;  // -1: the bytes are text
  std::string why;
};
// The first byte that makes `bytes` not UTF-8 text: an invalid, overlong, surrogate or cut-off
// sequence (RFC 3629's table), or a NUL — valid UTF-8, but no text file holds one, and every
// binary format (the fortune .dat indexes, .bin headers, images) does.
NotText find_non_text(std::string_view bytes);
// "PATH is not UTF-8 text: byte 0xNN at offset O (line L) WHY", for a `bad` that
// find_non_text(bytes) returned.
std::string not_text_message(const std::string& path, std::string_view bytes, const NotText& bad);
// Throws DataError (that message, and how to convert or give token ids instead) unless
// `bytes` is text.
void check_text(std::string_view bytes, const std::string& path);

// --- JSON in a "text" file ---
// A JSON Lines file (a chat or instruction set) is valid UTF-8, and data.dataset = "text" would
// train on its bytes, braces and quotes included: refused instead. JSON Lines: its first
// non-empty lines (up to 5) are each one JSON object. A JSON document: the whole file is one
// JSON object or array (a pretty-printed .json).
struct JsonText {
  enum class Kind { kNone, kLines, kDocument } kind = Kind::kNone;
  std::int64_t lines = 0;         // kLines: how many lines were read, every one an object
  std::vector<std::string> keys;  // the first object's keys
};
JsonText find_json(std::string_view bytes);
// Throws DataError naming `path`, what the JSON holds and how to extract its text, when
// find_json(bytes) finds JSON.
void check_not_json(std::string_view bytes, const std::string& path);

}  // namespace trainbox::data
