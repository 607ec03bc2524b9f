// Normalizers of tokenizer.json, with HF tokenizers' semantics (normalizers/*.rs there).
#include <string>

#include <nlohmann/json.hpp>

#include "parts.h"
#include <trainbox/util/errors.h>

namespace trainbox::text {

using json = nlohmann::json;

bool json_flag(const json& j, const char* key, bool dflt) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : dflt;
}

std::unique_ptr<Regex> pattern_of(const json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string())
    return std::make_unique<Regex>(Regex::escape(j["String"].get<std::string>()));
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string())
    return std::make_unique<Regex>(j["Regex"].get<std::string>());
  throw UsageError(where + ": pattern " + j.dump() + " is neither {\"String\": …} nor {\"Regex\": …}",
                   "the tokenizer.json is damaged");
}

namespace {

struct Sequence : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> parts;
  void normalize(std::string& s) const override {
    for (const auto& p : parts) p->normalize(s);
  }
};

struct Unicode : Normalizer {
  uni::Form form;
  explicit Unicode(uni::Form f) : form(f) {}
  void normalize(std::string& s) const override { s = uni::normalize(s, form); }
};

struct Lowercase : Normalizer {
  void normalize(std::string& s) const override { s = uni::lowercase(s); }
};

std::string without_marks(std::string_view s, bool (*is_mark)(char32_t)) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    int n = 0;
    const char32_t c = uni::next(s, i, &n);
    if (!is_mark(c)) out.append(s.substr(i, static_cast<std::size_t>(n)));
    i += static_cast<std::size_t>(n);
  }
  return out;
}

struct StripAccents : Normalizer {  // HF: removes combining marks; the NFD before it is the Sequence's
  void normalize(std::string& s) const override { s = without_marks(s, uni::is_combining_mark); }
};

struct Strip : Normalizer {
  bool left = true, right = true;
  void normalize(std::string& s) const override {
    std::size_t b = 0, e = s.size();
    if (left)
      while (b < e) {
        int n = 0;
        if (!uni::is_whitespace(uni::next(s, b, &n))) break;
        b += static_cast<std::size_t>(n);
      }
    if (right)
      while (e > b) {
        std::size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        int n = 0;
        if (!uni::is_whitespace(uni::next(s, k, &n))) break;
        e = k;
      }
    s = s.substr(b, e - b);
  }
};

struct Replace : Normalizer {
  std::unique_ptr<Regex> pattern;
  std::string content;
  void normalize(std::string& s) const override { s = pattern->replace_all(s, content); }
};

struct Prepend : Normalizer {
  std::string prepend;
  void normalize(std::string& s) const override {
    if (!s.empty()) s = prepend + s;
  }
};

struct Bert : Normalizer {
  bool clean_text = true, chinese = true, strip_accents = true, lowercase = true;
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size() + 8);
    for (std::size_t i = 0; i < s.size();) {
      int n = 0;
      const char32_t c = uni::next(s, i, &n);
      i += static_cast<std::size_t>(n);
      if (clean_text) {
        if (c == 0 || c == 0xFFFD || uni::is_control(c)) continue;
        if (uni::is_whitespace(c)) {
          out += ' ';
          continue;
        }
      }
      if (chinese && uni::is_chinese(c)) {
        out += ' ';
        uni::append(out, c);
        out += ' ';
        continue;
      }
      uni::append(out, c);
    }
    if (strip_accents) out = without_marks(uni::normalize(out, uni::Form::NFD), uni::is_nonspacing_mark);
    if (lowercase) out = uni::lowercase(out);
    s = std::move(out);
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  const std::string at = where + " normalizer " + type;
  if (type == "Sequence") {
    auto s = std::make_unique<Sequence>();
    for (const auto& p : j.at("normalizers"))
      if (auto n = make_normalizer(p, where)) s->parts.push_back(std::move(n));
    return s;
  }
  if (type == "NFC") return std::make_unique<Unicode>(uni::Form::NFC);
  if (type == "NFD") return std::make_unique<Unicode>(uni::Form::NFD);
  if (type == "NFKC") return std::make_unique<Unicode>(uni::Form::NFKC);
  if (type == "NFKD") return std::make_unique<Unicode>(uni::Form::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip") {
    auto s = std::make_unique<Strip>();
    s->left = json_flag(j, "strip_left", true);
    s->right = json_flag(j, "strip_right", true);
    return s;
  }
  if (type == "Replace") {
    auto r = std::make_unique<Replace>();
    r->pattern = pattern_of(j.at("pattern"), at);
    r->content = j.at("content").get<std::string>();
    return r;
  }
  if (type == "Prepend") {
    auto p = std::make_unique<Prepend>();
    p->prepend = j.at("prepend").get<std::string>();
    return p;
  }
  if (type == "BertNormalizer") {
    auto b = std::make_unique<Bert>();
    b->clean_text = json_flag(j, "clean_text", true);
    b->chinese = json_flag(j, "handle_chinese_chars", true);
    b->lowercase = json_flag(j, "lowercase", true);
    b->strip_accents =
        j.contains("strip_accents") && j["strip_accents"].is_boolean() ? j["strip_accents"].get<bool>() : b->lowercase;
    return b;
  }
  throw UsageError(where + ": normalizer type '" + type + "' is not supported" +
                       (type == "Precompiled" ? " (a SentencePiece charsmap, as T5/ALBERT/XLM-R ship)" : ""),
                   "supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Replace, Prepend, "
                   "BertNormalizer (docs/tokenizers.md)");
}

}  // namespace trainbox::text
