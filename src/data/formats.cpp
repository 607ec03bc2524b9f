#include <trainbox/data/formats.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <trainbox/data/token_file.h>
#include <trainbox/util/errors.h>

namespace trainbox::data {
namespace fs = std::filesystem;

namespace {

constexpr const char* kDocs = "docs/datasets.md";

const unsigned char* ubytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

std::int32_t le32(const unsigned char* p) {
  return static_cast<std::int32_t>(std::uint32_t(p[0]) | (std::uint32_t(p[1]) << 8) | (std::uint32_t(p[2]) << 16) |
                                   (std::uint32_t(p[3]) << 24));
}

}  // namespace

std::string read_maybe_gz(const std::string& path) {
  if (!fs::exists(path))
    throw DataError(
        "dataset file " + path + " does not exist",
        "set data.path to the directory that holds it (docs/datasets.md says where each dataset comes from)");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    throw DataError("cannot open dataset file " + path + ": " + errno_text(errno),
                    "check the file's permissions, or set data.path to a copy you can read");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string what = err < 0 && err != Z_BUF_ERROR ? msg : "";
  gzclose(f);
  if (n < 0 || !what.empty())
    throw DataError(fmt::format("{}: corrupt gzip stream after {} decompressed bytes: {}", path, out.size(),
                                what.empty() ? "read error" : what),
                    "re-download or reinstall the dataset file");
  return out;
}

// --- IDX ---

IdxHeader parse_idx_header(std::string_view bytes, const std::string& path, int ndim) {
  const std::size_t header = 4 + 4 * std::size_t(ndim);
  if (bytes.size() < header)
    throw DataError(fmt::format("{}: truncated header: {} bytes, an IDX file with {} dimensions needs {}", path,
                                bytes.size(), ndim, header));
  const unsigned char* p = ubytes(bytes);
  const std::uint32_t magic = be32(p), want = 0x00000800u | std::uint32_t(ndim);
  if (magic != want)
    throw DataError(fmt::format("{}: bad IDX magic 0x{:08x} at offset 0, expected 0x{:08x} (unsigned bytes, {} "
                                "dimensions)",
                                path, magic, want, ndim),
                    "this is not an IDX " + std::string(ndim == 1 ? "label" : "image") + " file; check data.path");
  IdxHeader h;
  h.data_offset = header;
  // Three dimensions of up to 2^28 multiply to up to 2^84: checked, since a product that
  // wrapped around (256 x 2^28 x 2^28 is 0 in 64 bits) could pass the size check below.
  std::uint64_t total = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; ++i) {
    std::int64_t d = be32(p + 4 + 4 * std::size_t(i));
    if (d <= 0 || d > (1 << 28))
      throw DataError(fmt::format("{}: dimension {} at offset {} is {}, expected 1..2^28", path, i, 4 + 4 * i, d));
    h.dims.push_back(d);
    overflow = overflow || __builtin_mul_overflow(total, static_cast<std::uint64_t>(d), &total);
  }
  const std::size_t data = bytes.size() - header;
  if (overflow || data != total)
    throw DataError(
        fmt::format("{}: {} bytes of data at offset {}, but the header's dimensions {} need {}{}", path, data, header,
                    fmt::join(h.dims, "x"), overflow ? "at least 2^64" : std::to_string(total),
                    overflow || data < total ? " (file truncated)" : " (trailing bytes)"),
        "re-download or reinstall the dataset file");
  return h;
}

IdxPair parse_idx_pair(std::string_view images, const std::string& images_path, std::string_view labels,
                       const std::string& labels_path, std::int64_t classes) {
  IdxPair r{parse_idx_header(images, images_path, 3), parse_idx_header(labels, labels_path, 1)};
  const std::int64_t n = r.images.dims[0];
  if (n != r.labels.dims[0])
    throw DataError(fmt::format("{} has {} images but {} has {} labels", images_path, n, labels_path, r.labels.dims[0]),
                    "use the matching pair of files");
  const unsigned char* lp = ubytes(labels) + r.labels.data_offset;
  for (std::int64_t i = 0; i < n; ++i)
    if (lp[i] >= classes)
      throw DataError(fmt::format("{}: label {} at offset {} is out of range 0..{}", labels_path, int(lp[i]),
                                  r.labels.data_offset + std::size_t(i), classes - 1),
                      "the labels file is corrupt; reinstall it");
  return r;
}

// --- CIFAR-10 ---

std::int64_t parse_cifar10(std::string_view bytes, const std::string& path) {
  constexpr std::size_t kRecord = kCifar10RecordBytes;
  if (bytes.empty() || bytes.size() % kRecord != 0)
    throw DataError(fmt::format("{}: {} bytes is not a whole number of 3073-byte CIFAR-10 records (cut at offset {})",
                                path, bytes.size(), bytes.size() - bytes.size() % kRecord),
                    "re-download the CIFAR-10 binary version");
  const std::size_t n = bytes.size() / kRecord;
  const unsigned char* p = ubytes(bytes);
  for (std::size_t i = 0; i < n; ++i)
    if (p[i * kRecord] >= 10)
      throw DataError(
          fmt::format("{}: label {} at offset {} is out of range 0..9", path, int(p[i * kRecord]), i * kRecord));
  return static_cast<std::int64_t>(n);
}

// --- the .bin token file ---

bool has_token_file_magic(std::string_view bytes) {
  return bytes.size() >= 4 && le32(ubytes(bytes)) == kTokenFileMagic;
}

TokenFileHeader parse_token_file(std::string_view bytes, const std::string& path) {
  const std::int64_t size = static_cast<std::int64_t>(bytes.size());
  const std::string layout =
      "a .bin token file starts with a 1024-byte header: 256 int32 (magic 20240520 and version 1 for uint16 ids, "
      "or llm.c's 20240801 and version 7 for uint32 ids; the token count; zeros), then the ids";
  const std::string remake =
      std::string("re-create it with trainbox data tokenize, or a tokenizer that writes the llm.c header (") + kDocs +
      ")";
  if (size < kTokenFileHeaderBytes)
    throw DataError(fmt::format("{}: {} bytes, shorter than the {}-byte header of a .bin token file ({})", path, size,
                                kTokenFileHeaderBytes, layout),
                    remake + "; for a text file, use a name that does not end in .bin");
  const unsigned char* p = ubytes(bytes);
  const std::int32_t magic = le32(p), version = le32(p + 4), count = le32(p + 8);
  if (magic != kTokenFileMagic && magic != kTokenFileMagicWide)
    throw DataError(
        fmt::format("{}: bad magic {} (0x{:08x}) at offset 0, expected {} or {} (nanoGPT / llm.c token file)", path,
                    magic, static_cast<std::uint32_t>(magic), kTokenFileMagic, kTokenFileMagicWide),
        remake + "; for a text file, use a name that does not end in .bin");
  const bool wide = magic == kTokenFileMagicWide;
  const std::int32_t want = wide ? kTokenFileVersionWide : kTokenFileVersion;
  if (version != want)
    throw DataError(fmt::format("{}: unsupported version {} at offset 4 for magic {}, expected {} ({} token ids)", path,
                                version, magic, want, wide ? "uint32" : "uint16"),
                    remake);
  const int width = wide ? 4 : 2;
  const std::int64_t payload = size - kTokenFileHeaderBytes;
  if (payload % width != 0)
    throw DataError(
        fmt::format("{}: {} bytes of tokens at offset {}, not a multiple of {}: {} token ids take {} bytes each "
                    "(the file is cut off or has a stray byte)",
                    path, payload, kTokenFileHeaderBytes, width, wide ? "uint32" : "uint16", width),
        "re-create or re-copy the file: " + remake);
  const std::int64_t n = payload / width;
  if (count != n)
    throw DataError(
        fmt::format("{}: the header's token count {} (offset 8) does not match the file: {} bytes at offset {} "
                    "hold {} {} tokens{}",
                    path, count, payload, kTokenFileHeaderBytes, n, wide ? "uint32" : "uint16",
                    count > n ? " (file truncated)" : " (trailing data after the tokens)"),
        "re-create or re-copy the file: " + remake);
  return {n, static_cast<std::size_t>(kTokenFileHeaderBytes), width};
}

std::int64_t decode_token_ids(std::string_view bytes, const TokenFileHeader& header, std::int32_t* out) {
  const unsigned char* q = ubytes(bytes) + header.ids_offset;
  std::int64_t top = -1;
  if (header.width == 4) {
    for (std::int64_t i = 0; i < header.count; ++i) {
      const std::uint32_t v = std::uint32_t(q[4 * i]) | (std::uint32_t(q[4 * i + 1]) << 8) |
                              (std::uint32_t(q[4 * i + 2]) << 16) | (std::uint32_t(q[4 * i + 3]) << 24);
      if (v > static_cast<std::uint32_t>(INT32_MAX))
        throw DataError(fmt::format("token id {} at token {} is not a vocabulary id (above 2^31 - 1)", v, i),
                        "the file is not a token file, or is corrupt: re-create it with trainbox data tokenize");
      out[i] = static_cast<std::int32_t>(v);
      top = std::max<std::int64_t>(top, out[i]);
    }
    return top + 1;
  }
  for (std::int64_t i = 0; i < header.count; ++i) {
    out[i] = std::int32_t(q[2 * i]) | (std::int32_t(q[2 * i + 1]) << 8);
    top = std::max<std::int64_t>(top, out[i]);
  }
  return top + 1;
}

namespace {
std::string header_of(std::int32_t magic, std::int32_t version, std::int64_t count) {
  std::string h(static_cast<std::size_t>(kTokenFileHeaderBytes), '\0');
  const std::int32_t words[3] = {magic, version, static_cast<std::int32_t>(count)};
  for (int w = 0; w < 3; ++w)
    for (int b = 0; b < 4; ++b)
      h[static_cast<std::size_t>(4 * w + b)] =
          static_cast<char>((static_cast<std::uint32_t>(words[w]) >> (8 * b)) & 0xff);
  return h;
}
}  // namespace

std::string token_file_header(std::int64_t count, int width) {
  return width == 4 ? header_of(kTokenFileMagicWide, kTokenFileVersionWide, count)
                    : header_of(kTokenFileMagic, kTokenFileVersion, count);
}
std::string mask_file_header(std::int64_t count) { return header_of(kMaskFileMagic, kMaskFileVersion, count); }

std::size_t parse_mask_file(std::string_view bytes, const std::string& path, std::int64_t tokens) {
  const std::string fix =
      "re-create the shards with trainbox data tokenize, or remove the .mask to train on every token";
  if (static_cast<std::int64_t>(bytes.size()) < kTokenFileHeaderBytes)
    throw DataError(fmt::format("{}: {} bytes, shorter than the {}-byte header of a .mask file", path, bytes.size(),
                                kTokenFileHeaderBytes),
                    fix);
  const unsigned char* p = ubytes(bytes);
  const std::int32_t magic = le32(p), version = le32(p + 4), count = le32(p + 8);
  if (magic != kMaskFileMagic || version != kMaskFileVersion)
    throw DataError(fmt::format("{}: magic {} version {} at offset 0, expected {} version {} (a trainbox loss mask)",
                                path, magic, version, kMaskFileMagic, kMaskFileVersion),
                    fix);
  const std::int64_t n = static_cast<std::int64_t>(bytes.size()) - kTokenFileHeaderBytes;
  if (count != tokens || n != tokens)
    throw DataError(fmt::format("{}: {} mask bytes (header: {}) for {} tokens in its .bin", path, n, count, tokens),
                    fix);
  return static_cast<std::size_t>(kTokenFileHeaderBytes);
}

// --- UTF-8 text ---

NotText find_non_text(std::string_view bytes) {
  const unsigned char* p = ubytes(bytes);
  const std::int64_t n = static_cast<std::int64_t>(bytes.size());
  std::int64_t i = 0;
  while (i < n) {
    const std::uint8_t c = p[i];
    if (c < 0x80) {
      if (c == 0) return {i, "is a NUL byte"};
      ++i;
      continue;
    }
    int len = 0;
    std::uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c == 0xE0)
      len = 3, lo = 0xA0;  // no overlong 3-byte forms
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
      len = 3;
    else if (c == 0xED)
      len = 3, hi = 0x9F;  // no UTF-16 surrogates
    else if (c == 0xF0)
      len = 4, lo = 0x90;  // no overlong 4-byte forms
    else if (c >= 0xF1 && c <= 0xF3)
      len = 4;
    else if (c == 0xF4)
      len = 4, hi = 0x8F;  // nothing above U+10FFFF
    else
      return {i, c < 0xC0 ? "is a continuation byte where a character should start"
                          : "cannot start a UTF-8 sequence (overlong or out of range)"};
    if (i + len > n) return {i, fmt::format("starts a {}-byte UTF-8 sequence that the file cuts off", len)};
    bool ok = p[i + 1] >= lo && p[i + 1] <= hi;
    for (int k = 2; ok && k < len; ++k) ok = p[i + k] >= 0x80 && p[i + k] <= 0xBF;
    if (!ok) return {i, fmt::format("starts a {}-byte UTF-8 sequence with an invalid byte after it", len)};
    i += len;
  }
  return {};
}

std::string not_text_message(const std::string& path, std::string_view bytes, const NotText& bad) {
  const std::int64_t line = 1 + std::count(bytes.begin(), bytes.begin() + bad.offset, '\n');
  return fmt::format("{} is not UTF-8 text: byte 0x{:02x} at offset {} (line {}) {}", path,
                     static_cast<unsigned char>(bytes[static_cast<std::size_t>(bad.offset)]), bad.offset, line,
                     bad.why);
}

void check_text(std::string_view bytes, const std::string& path) {
  static const std::string kNotTextHint =
      "data.dataset = \"text\" reads a UTF-8 text file as bytes: check data.path; convert other encodings first "
      "(iconv -f latin1 -t utf-8), and give token ids as a .bin with the llm.c header (" +
      std::string(kDocs) + ")";
  if (auto bad = find_non_text(bytes); bad.offset >= 0)
    throw DataError(not_text_message(path, bytes, bad), kNotTextHint);
}

// --- JSON in a "text" file ---

JsonText find_json(std::string_view bytes) {
  constexpr std::int64_t kLinesRead = 5;  // enough that prose starting with "{" on one line is not taken
  JsonText found;
  const auto first = bytes.find_first_not_of(" \t\r\n\xef\xbb\xbf");  // a UTF-8 byte-order mark too
  if (first == std::string_view::npos || (bytes[first] != '{' && bytes[first] != '[')) return found;
  std::vector<std::string> keys;
  std::size_t at = first;
  while (at < bytes.size() && found.lines < kLinesRead) {
    const auto end = std::min(bytes.find('\n', at), bytes.size());
    auto line = bytes.substr(at, end - at);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    at = end + 1;
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    auto j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      found.lines = 0;
      break;
    }
    if (found.lines++ == 0)
      for (const auto& [k, v] : j.items()) keys.push_back(k);
  }
  if (found.lines > 0) {
    found.kind = JsonText::Kind::kLines;
    found.keys = std::move(keys);
    return found;
  }
  auto doc = nlohmann::ordered_json::parse(bytes.substr(first), nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() || doc.is_array()) {
    found.kind = JsonText::Kind::kDocument;
    if (doc.is_object())
      for (const auto& [k, v] : doc.items()) found.keys.push_back(k);
  }
  return found;
}

void check_not_json(std::string_view bytes, const std::string& path) {
  const JsonText j = find_json(bytes);
  if (j.kind == JsonText::Kind::kNone) return;
  std::vector<std::string> quoted;
  for (std::size_t i = 0; i < std::min<std::size_t>(j.keys.size(), 4); ++i) quoted.push_back('"' + j.keys[i] + '"');
  const std::string keys =
      quoted.empty() ? std::string()
                     : fmt::format(", keys {}{}", fmt::join(quoted, ", "), j.keys.size() > quoted.size() ? ", …" : "");
  const std::string what =
      j.kind == JsonText::Kind::kLines
          ? fmt::format("JSON Lines (its first {} JSON object{}{})",
                        j.lines == 1 ? "line is a" : fmt::format("{} lines are", j.lines), j.lines == 1 ? "" : "s",
                        keys)
          : fmt::format("one JSON document{}", keys.empty() ? "" : fmt::format(" ({})", keys.substr(2)));
  // jq's path to the text: a chat's turns, an instruction set's text, else the first key.
  auto has = [&](std::string_view k) { return std::find(j.keys.begin(), j.keys.end(), k) != j.keys.end(); };
  const std::string jq = has("messages")  ? ".messages[].content"
                         : has("text")    ? ".text"
                         : j.keys.empty() ? "."
                                          : "." + j.keys.front();
  throw DataError(
      fmt::format("{} is {}, not plain text: data.dataset = \"text\" would train on its bytes, JSON syntax "
                  "included",
                  path, what),
      fmt::format("tokenize it: trainbox data tokenize {} OUT --tokenizer MODEL_DIR (text, prompt/completion "
                  "and chat records, the loss on completions and assistant turns), then data.path = OUT; "
                  "or train on its bytes: jq -r '{}' {} > {}.txt and point data.path at that",
                  path, jq, path, std::filesystem::path(path).stem().string()));
}

}  // namespace trainbox::data
