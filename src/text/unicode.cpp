// Unicode helpers for the tokenizer: utf8proc (Unicode 15) for categories, case and
// normalization forms, corrected to HF tokenizers' answers where its tables (Rust crates of older
// and newer Unicode versions) disagree: unicode_tables.h, generated from HF itself by
// scripts/gen-text-tables.py. So the two agree character for character.
#include <algorithm>
#include <cstdlib>
#include <string>

#include <utf8proc.h>

#include "parts.h"
#include "unicode_tables.h"
#include <trainbox/util/errors.h>

namespace trainbox::text::uni {

char32_t next(std::string_view s, std::size_t i, int* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *len = 1;
    return b;
  }
  const int n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t c = b & (0x7F >> n);
  for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return c;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::size_t invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) return i;  // also rejects surrogates and overlong forms
    i += static_cast<std::size_t>(n);
  }
  return std::string_view::npos;
}

const std::array<char32_t, 256>& byte_level_chars() {
  static const std::array<char32_t, 256> chars = [] {
    std::array<char32_t, 256> m{};
    char32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      m[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : 256 + n++;
    }
    return m;
  }();
  return chars;
}

bool is_whitespace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

template <std::size_t N>
bool in(const CodeRange (&table)[N], char32_t c) {
  const auto it = std::upper_bound(table, table + N, c, [](char32_t x, const CodeRange& r) { return x < r.first; });
  return it != table && c <= (it - 1)->last;
}
}  // namespace

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  const auto k = category(c);
  return (k == UTF8PROC_CATEGORY_PC || k == UTF8PROC_CATEGORY_PD || k == UTF8PROC_CATEGORY_PS ||
          k == UTF8PROC_CATEGORY_PE || k == UTF8PROC_CATEGORY_PI || k == UTF8PROC_CATEGORY_PF ||
          k == UTF8PROC_CATEGORY_PO) != in(kPunctuationFlips, c);
}

bool is_numeric(char32_t c) {
  const auto k = category(c);
  return (k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO) != in(kNumericFlips, c);
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto k = category(c);
  return (k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CO ||
          k == UTF8PROC_CATEGORY_CS) != in(kControlFlips, c);
}

bool is_nonspacing_mark(char32_t c) { return (category(c) == UTF8PROC_CATEGORY_MN) != in(kMarkFlips, c); }

bool is_combining_mark(char32_t c) {
  const auto k = category(c);
  return (k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME) !=
         in(kCombiningMarkFlips, c);
}

bool is_chinese(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    int n = 0;
    const char32_t c = next(s, i, &n);
    i += static_cast<std::size_t>(n);
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (const auto* o = std::lower_bound(std::begin(kLowercaseOverrides), std::end(kLowercaseOverrides), c,
                                                [](const Lowercase& l, char32_t x) { return l.cp < x; });
               o != std::end(kLowercaseOverrides) && o->cp == c) {
      out += o->utf8;  // İ → i̇ (SpecialCasing.txt), and where Rust's Unicode differs from utf8proc's
    } else {
      append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

namespace {
std::string utf8proc_form(std::string_view s, Form f) {
  int opts = UTF8PROC_STABLE;
  switch (f) {
    case Form::NFC: opts |= UTF8PROC_COMPOSE; break;
    case Form::NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case Form::NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Form::NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* dst = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &dst, static_cast<utf8proc_option_t>(opts));
  if (n < 0) throw DataError(std::string("Unicode normalization failed: ") + utf8proc_errmsg(n));
  std::string out(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
  std::free(dst);
  return out;
}
}  // namespace

// Characters HF's normalization tables do not know (kNormalizationOpaque) it leaves as they are,
// starters with no decomposition: trainbox normalizes the text between them and keeps them.
std::string normalize(std::string_view s, Form f) {
  std::string out;
  std::size_t from = 0;
  for (std::size_t i = 0; i < s.size();) {
    int n = 0;
    const char32_t c = next(s, i, &n);
    if (c >= 0xA0 && in(kNormalizationOpaque, c)) {
      if (from < i) out += utf8proc_form(s.substr(from, i - from), f);
      out.append(s.substr(i, static_cast<std::size_t>(n)));
      from = i + static_cast<std::size_t>(n);
    }
    i += static_cast<std::size_t>(n);
  }
  if (from == 0) return utf8proc_form(s, f);
  if (from < s.size()) out += utf8proc_form(s.substr(from), f);
  return out;
}

}  // namespace trainbox::text::uni
