// Pre-tokenizers of tokenizer.json, with HF tokenizers' semantics (pre_tokenizers/*.rs there):
// each splits every piece into smaller ones; the model then sees one piece at a time.
#include <array>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "parts.h"
#include <trainbox/util/errors.h>

namespace trainbox::text {

using json = nlohmann::json;
using Ranges = std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>>;

Behavior behavior_of(const json& j, const std::string& where) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  throw UsageError(where + ": split behavior " + j.dump() +
                       " is not one of Removed, Isolated, MergedWithPrevious, "
                       "MergedWithNext, Contiguous",
                   "the tokenizer.json is damaged");
}

void split_by(const Piece& p, Ranges m, Behavior b, std::vector<Piece>& out) {
  Ranges r;  // the pieces, after the behavior (HF NormalizedString::split)
  switch (b) {
    case Behavior::Isolated: r = std::move(m); break;
    case Behavior::Removed:
      for (auto& x : m)
        if (!x.second) r.push_back(x);
      break;
    case Behavior::MergedWithPrevious: {
      bool prev_match = false;
      for (auto& x : m) {
        if (x.second && !prev_match && !r.empty())
          r.back().first.second = x.first.second;
        else
          r.push_back(x);
        prev_match = x.second;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_match = false;
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->second && !prev_match && !r.empty())
          r.back().first.first = it->first.first;
        else
          r.push_back(*it);
        prev_match = it->second;
      }
      std::reverse(r.begin(), r.end());
      break;
    }
    case Behavior::Contiguous: {
      bool prev_match = false;
      for (auto& x : m) {
        if (x.second == prev_match && !r.empty())
          r.back().first.second = x.first.second;
        else
          r.push_back(x);
        prev_match = x.second;
      }
      break;
    }
  }
  for (const auto& [range, is_match] : r) {
    if (range.first == range.second) continue;  // HF drops empty splits
    out.push_back({p.text.substr(range.first, range.second - range.first), p.at_start && range.first == 0});
  }
}

namespace {

// (match, is_match) ranges covering s: the regex's matches and the gaps between them.
Ranges regex_ranges(const Regex& re, std::string_view s, bool invert) {
  Ranges r;
  if (s.empty()) return {{{0, 0}, false}};
  std::size_t prev = 0;
  for (const auto& [b, e] : re.find_all(s)) {
    if (prev != b) r.push_back({{prev, b}, invert});
    r.push_back({{b, e}, !invert});
    prev = e;
  }
  if (prev != s.size()) r.push_back({{prev, s.size()}, invert});
  return r;
}

// Each character for which `pred` holds is a match of its own.
Ranges char_ranges(std::string_view s, const std::function<bool(char32_t)>& pred) {
  Ranges r;
  std::size_t last = 0;
  for (std::size_t i = 0; i < s.size();) {
    int n = 0;
    const char32_t c = uni::next(s, i, &n);
    if (pred(c)) {
      if (last < i) r.push_back({{last, i}, false});
      r.push_back({{i, i + static_cast<std::size_t>(n)}, true});
      last = i + static_cast<std::size_t>(n);
    }
    i += static_cast<std::size_t>(n);
  }
  if (s.size() > last) r.push_back({{last, s.size()}, false});
  return r;
}

template <class F>
void each_piece(std::vector<Piece>& pieces, F split_one) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 4);
  for (const Piece& p : pieces) split_one(p, out);
  pieces = std::move(out);
}

struct Sequence : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts) p->pre_tokenize(pieces);
  }
};

struct RegexSplit : PreTokenizer {
  std::unique_ptr<Regex> re;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    each_piece(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      split_by(p, regex_ranges(*re, p.text, invert), behavior, out);
    });
  }
};

struct CharSplit : PreTokenizer {
  std::function<bool(char32_t)> pred;
  Behavior behavior = Behavior::Isolated;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    each_piece(pieces,
               [&](const Piece& p, std::vector<Piece>& out) { split_by(p, char_ranges(p.text, pred), behavior, out); });
  }
};

// GPT-2's pattern (HF ByteLevel's RE) and its byte → printable character map (bytes_to_unicode).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevel : PreTokenizer {
  bool add_prefix_space = true;
  std::unique_ptr<Regex> re;  // null: use_regex false
  std::array<std::string, 256> chars;
  ByteLevel() {
    for (std::size_t b = 0; b < 256; ++b) uni::append(chars[b], uni::byte_level_chars()[b]);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> split;
    split.reserve(pieces.size() * 4);
    for (Piece& p : pieces) {
      if (add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, 1, ' ');
      if (re)
        split_by(p, regex_ranges(*re, p.text, false), Behavior::Isolated, split);
      else
        split.push_back(std::move(p));
    }
    for (Piece& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (const char c : p.text) mapped += chars[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }
};

struct Metaspace : PreTokenizer {
  std::string replacement = "\xE2\x96\x81";  // ▁
  enum { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    each_piece(pieces, [&](const Piece& in, std::vector<Piece>& out) {
      Piece p{std::string(), in.at_start};
      for (const char c : in.text) {
        if (c == ' ')
          p.text += replacement;
        else
          p.text += c;
      }
      const bool starts = p.text.compare(0, replacement.size(), replacement) == 0;
      if (!starts && (prepend == kAlways || (prepend == kFirst && in.at_start))) p.text.insert(0, replacement);
      if (!split) {
        out.push_back(std::move(p));
        return;
      }
      Ranges r;
      std::size_t last = 0;
      for (std::size_t i = p.text.find(replacement); i != std::string::npos; i = p.text.find(replacement, i + 1)) {
        if (last < i) r.push_back({{last, i}, false});
        r.push_back({{i, i + replacement.size()}, true});
        last = i + replacement.size();
      }
      if (p.text.size() > last) r.push_back({{last, p.text.size()}, false});
      split_by(p, std::move(r), Behavior::MergedWithNext, out);
    });
  }
};

struct BertPre : PreTokenizer {
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    each_piece(pieces, [](const Piece& p, std::vector<Piece>& out) {
      std::vector<Piece> words;
      split_by(p, char_ranges(p.text, uni::is_whitespace), Behavior::Removed, words);
      for (const Piece& w : words) split_by(w, char_ranges(w.text, uni::is_punctuation), Behavior::Isolated, out);
    });
  }
};

std::unique_ptr<PreTokenizer> metaspace(const json& j, const std::string& at) {
  auto m = std::make_unique<Metaspace>();
  m->replacement = j.value("replacement", m->replacement);
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
    const std::string s = j["prepend_scheme"];
    if (s == "always")
      m->prepend = Metaspace::kAlways;
    else if (s == "first")
      m->prepend = Metaspace::kFirst;
    else if (s == "never")
      m->prepend = Metaspace::kNever;
    else
      throw UsageError(at + ": prepend_scheme '" + s + "' is not always, first or never");
  } else {  // tokenizers < 0.15 wrote add_prefix_space
    m->prepend = json_flag(j, "add_prefix_space", true) ? Metaspace::kAlways : Metaspace::kNever;
  }
  m->split = json_flag(j, "split", true);
  return m;
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  const std::string at = where + " pre_tokenizer " + type;
  if (type == "Sequence") {
    auto s = std::make_unique<Sequence>();
    for (const auto& p : j.at("pretokenizers"))
      if (auto n = make_pre_tokenizer(p, where)) s->parts.push_back(std::move(n));
    return s;
  }
  if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevel>();
    b->add_prefix_space = json_flag(j, "add_prefix_space", true);
    if (json_flag(j, "use_regex", true)) b->re = std::make_unique<Regex>(kGpt2Pattern);
    return b;
  }
  if (type == "Split") {
    auto s = std::make_unique<RegexSplit>();
    s->re = pattern_of(j.at("pattern"), at);
    s->behavior = behavior_of(j.at("behavior"), at);
    s->invert = json_flag(j, "invert", false);
    return s;
  }
  if (type == "Whitespace") {  // HF: \w+|[^\w\s]+ kept, the rest removed
    auto s = std::make_unique<RegexSplit>();
    s->re = std::make_unique<Regex>(R"(\w+|[^\w\s]+)");
    s->behavior = Behavior::Removed;
    s->invert = true;
    return s;
  }
  if (type == "Metaspace") return metaspace(j, at);
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  auto chars = std::make_unique<CharSplit>();
  if (type == "WhitespaceSplit") {
    chars->pred = uni::is_whitespace;
    chars->behavior = Behavior::Removed;
    return chars;
  }
  if (type == "Punctuation") {
    chars->pred = uni::is_punctuation;
    chars->behavior = j.contains("behavior") ? behavior_of(j["behavior"], at) : Behavior::Isolated;
    return chars;
  }
  if (type == "Digits") {
    chars->pred = uni::is_numeric;
    chars->behavior = json_flag(j, "individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous;
    return chars;
  }
  if (type == "CharDelimiterSplit") {
    int n = 0;
    const std::string d = j.at("delimiter").get<std::string>();
    const char32_t c = d.empty() ? 0 : uni::next(d, 0, &n);
    chars->pred = [c](char32_t x) { return x == c; };
    chars->behavior = Behavior::Removed;
    return chars;
  }
  throw UsageError(where + ": pre_tokenizer type '" + type + "' is not supported",
                   "supported: Sequence, ByteLevel, Split, Whitespace, WhitespaceSplit, Metaspace, BertPreTokenizer, "
                   "Punctuation, Digits, CharDelimiterSplit (docs/tokenizers.md)");
}

}  // namespace trainbox::text
