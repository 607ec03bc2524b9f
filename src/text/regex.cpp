// Oniguruma for the tokenizer's patterns. Why this engine (docs/tokenizers.md): HF tokenizers
// compiles every Split/Replace/ByteLevel pattern with Oniguruma (the onig crate), so the same
// library gives the same \p{L}/\p{N}/\s tables and the same lookahead (`\s+(?!\S)` in GPT-2's
// pattern), which RE2 lacks and std::regex cannot spell. PCRE2 would be faster with its JIT, but
// an id that differs from HF's on some script is the one failure a tokenizer must not have.
#include <mutex>
#include <string>

#include <oniguruma.h>

#include "parts.h"
#include <trainbox/util/errors.h>

namespace trainbox::text {

namespace {
std::once_flag g_init;
}

Regex::Regex(const std::string& pattern) {
  std::call_once(g_init, [] {
    OnigEncoding enc[] = {ONIG_ENCODING_UTF8};
    onig_initialize(enc, 1);
  });
  OnigErrorInfo info;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int r = onig_new(&re_, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &info);
    re_ = nullptr;
    throw UsageError("tokenizer pattern '" + pattern + "' does not compile: " + reinterpret_cast<char*>(msg),
                     "the tokenizer.json is damaged, or uses a regex feature Oniguruma lacks");
  }
}

Regex::~Regex() {
  if (re_) onig_free(re_);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  OnigRegion* region = onig_region_new();
  const auto* begin = reinterpret_cast<const OnigUChar*>(s.data());
  const auto* end = begin + s.size();
  std::size_t from = 0;
  std::ptrdiff_t last_match_end = -1;
  while (from <= s.size()) {
    onig_region_clear(region);
    const int r = onig_search(re_, begin, end, begin + from, end, region, ONIG_OPTION_NONE);
    if (r < 0) break;  // ONIG_MISMATCH (or an engine error: no more matches either way)
    const auto ms = static_cast<std::size_t>(region->beg[0]);
    const auto me = static_cast<std::size_t>(region->end[0]);
    if (ms == me && last_match_end == static_cast<std::ptrdiff_t>(me)) {
      if (from >= s.size()) break;
      int n = 0;
      uni::next(s, from, &n);
      from += static_cast<std::size_t>(n);
      continue;
    }
    out.emplace_back(ms, me);
    from = me;
    last_match_end = static_cast<std::ptrdiff_t>(me);
    if (ms == me) {  // an empty match: the next search starts one character on
      if (from >= s.size()) break;
      int n = 0;
      uni::next(s, from, &n);
      from += static_cast<std::size_t>(n);
    }
  }
  onig_region_free(region, 1);
  return out;
}

std::string Regex::replace_all(std::string_view s, const std::string& content) const {
  std::string out;
  std::size_t at = 0;
  for (const auto& [b, e] : find_all(s)) {
    out.append(s.substr(at, b - at));
    out += content;
    at = e;
  }
  out.append(s.substr(at));
  return out;
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace trainbox::text
