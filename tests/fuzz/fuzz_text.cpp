// The text dataset's two kinds of file on the same bytes (trainbox/data/formats.h): UTF-8 text
// (find_non_text, check_text and its message) and the llm.c .bin token file
// (parse_token_file, decode_token_ids). Beyond no crash and DataError only:
//   * find_non_text agrees with glibc's UTF-8 decoder (iconv, RFC 3629: no overlong forms,
//     surrogates or code points above U+10FFFF): the first byte it refuses is the first
//     where iconv stops, or an earlier NUL; text passes check_text, anything else does not;
//   * an accepted token file holds exactly its header's count of uint16 ids after 1024
//     bytes, decoded little-endian, and the vocabulary is the largest id + 1.
#include <iconv.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <trainbox/data/formats.h>
#include "fuzz_common.h"
#include <trainbox/data/token_file.h>
#include <trainbox/util/errors.h>

namespace data = trainbox::data;

namespace {

// Where glibc's UTF-8 decoder stops (an invalid or cut-off sequence), -1 if it decodes all.
std::int64_t iconv_stop(std::string_view s) {
  static iconv_t cd = ::iconv_open("UTF-32LE", "UTF-8");
  if (cd == iconv_t(-1)) std::abort();
  ::iconv(cd, nullptr, nullptr, nullptr, nullptr);  // reset the shift state
  std::vector<char> out(4 * s.size() + 4);
  char* ip = const_cast<char*>(s.data());
  char* op = out.data();
  std::size_t il = s.size(), ol = out.size();
  if (::iconv(cd, &ip, &il, &op, &ol) != std::size_t(-1)) return -1;
  FUZZ_CHECK(errno == EILSEQ || errno == EINVAL);  // not E2BIG: the buffer holds 4 bytes per input byte
  return ip - s.data();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* in, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(in), size);
  const std::string path = "corpus.txt";

  // --- UTF-8 text ---
  const data::NotText bad = data::find_non_text(bytes);
  std::int64_t expect = iconv_stop(bytes);
  if (const void* nul = std::memchr(in, 0, size)) {
    const std::int64_t at = static_cast<const std::uint8_t*>(nul) - in;
    if (expect < 0 || at < expect) expect = at;
  }
  if (bad.offset != expect)
    std::fprintf(stderr, "find_non_text: %lld, iconv or NUL: %lld\n", (long long)bad.offset, (long long)expect);
  FUZZ_CHECK(bad.offset == expect);
  try {
    data::check_text(bytes, path);
    FUZZ_CHECK(bad.offset < 0);
  } catch (const trainbox::DataError& e) {
    FUZZ_CHECK(bad.offset >= 0 && !bad.why.empty());
    FUZZ_CHECK(std::string(e.what()).find("at offset " + std::to_string(bad.offset) + " (line ") != std::string::npos);
  }

  // --- the .bin token file ---
  try {
    const data::TokenFileHeader h = data::parse_token_file(bytes, "tokens.bin");
    FUZZ_CHECK(data::has_token_file_magic(bytes));
    FUZZ_CHECK(h.ids_offset == std::size_t(data::kTokenFileHeaderBytes) && h.count >= 0 &&
               (h.width == 2 || h.width == 4) &&
               h.ids_offset + std::uint64_t(h.width) * std::uint64_t(h.count) == size);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(h.count));
    const std::int64_t vocab = data::decode_token_ids(bytes, h, ids.data());
    FUZZ_CHECK(vocab >= 0 && (h.width == 4 || vocab <= 65536) && (vocab == 0) == ids.empty());
    bool top = false;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::size_t o = h.ids_offset + std::size_t(h.width) * i;
      const std::uint32_t want = h.width == 2 ? std::uint32_t(in[o] | (in[o + 1] << 8))
                                              : std::uint32_t(in[o]) | (std::uint32_t(in[o + 1]) << 8) |
                                                    (std::uint32_t(in[o + 2]) << 16) | (std::uint32_t(in[o + 3]) << 24);
      FUZZ_CHECK(std::uint32_t(ids[i]) == want);
      FUZZ_CHECK(ids[i] < vocab);
      top = top || ids[i] == vocab - 1;
    }
    FUZZ_CHECK(ids.empty() || top);
  } catch (const trainbox::DataError&) {
  }
  return 0;
}
