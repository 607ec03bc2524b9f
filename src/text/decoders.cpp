// Decoders and post-processors of tokenizer.json, with HF tokenizers' semantics
// (decoders/*.rs and processors/*.rs there).
#include <array>
#include <cctype>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "parts.h"
#include <trainbox/util/errors.h>

namespace trainbox::text {

using json = nlohmann::json;

namespace {

// --- decoders ---
struct DecoderSequence : Decoder {
  std::vector<std::unique_ptr<Decoder>> parts;
  void decode_chain(std::vector<std::string>& t) const override {
    for (const auto& p : parts) p->decode_chain(t);
  }
};

struct ByteLevelDecoder : Decoder {
  std::unordered_map<char32_t, unsigned char> bytes;  // the inverse of bytes_to_unicode
  ByteLevelDecoder() {
    for (std::size_t b = 0; b < 256; ++b) bytes[uni::byte_level_chars()[b]] = static_cast<unsigned char>(b);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string raw;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all = true;
      for (std::size_t i = 0; i < t.size();) {
        int n = 0;
        const auto it = bytes.find(uni::next(t, i, &n));
        i += static_cast<std::size_t>(n);
        if (it == bytes.end()) {
          all = false;
          break;
        }
        mapped += static_cast<char>(it->second);
      }
      raw += all ? mapped : t;  // HF: a token with a character outside the map goes as its bytes
    }
    // from_utf8_lossy: each maximal invalid sequence becomes one U+FFFD
    std::string out;
    for (std::size_t i = 0; i < raw.size();) {
      const std::size_t bad = uni::invalid_utf8_at(std::string_view(raw).substr(i));
      if (bad == std::string_view::npos) {
        out.append(raw, i, std::string::npos);
        break;
      }
      out.append(raw, i, bad);
      i += bad;
      i += lossy_skip(std::string_view(raw).substr(i));
      out += "\xEF\xBF\xBD";
    }
    tokens.assign(1, std::move(out));
  }
  // How many bytes Rust's from_utf8_lossy replaces at an invalid sequence: the longest prefix
  // of a valid sequence (at least one byte).
  static std::size_t lossy_skip(std::string_view s) {
    const auto b0 = static_cast<unsigned char>(s[0]);
    std::size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF)
      need = 1;
    else if (b0 >= 0xE0 && b0 <= 0xEF)
      need = 2, lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
    else if (b0 >= 0xF0 && b0 <= 0xF4)
      need = 3, lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
    else
      return 1;
    std::size_t k = 1;
    for (; k <= need && k < s.size(); ++k) {
      const auto b = static_cast<unsigned char>(s[k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    return k;
  }
};

struct MetaspaceDecoder : Decoder {
  std::string replacement = "\xE2\x96\x81";
  bool strip_first = true;  // prepend_scheme != never
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (std::size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement.size(), replacement) == 0) {
          if (!(i == 0 && strip_first)) out += ' ';
          k += replacement.size();
        } else {
          out += t[k++];
        }
      }
      tokens[i] = std::move(out);
    }
  }
};

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (std::size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size()))
    s.replace(i, from.size(), to);
  return s;
}

struct WordPieceDecoder : Decoder {
  std::string prefix = "##";
  bool cleanup = true;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix.size(), prefix) == 0)
          t.erase(0, prefix.size());
        else
          t.insert(0, 1, ' ');
      }
      if (cleanup) {
        static constexpr std::pair<const char*, const char*> kRules[] = {
            {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
            {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
        for (const auto& [from, to] : kRules) t = replace_all(std::move(t), from, to);
      }
    }
  }
};

struct ByteFallbackDecoder : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    const auto flush = [&] {
      if (bytes.empty()) return;
      if (uni::invalid_utf8_at(bytes) == std::string_view::npos)
        out.push_back(bytes);
      else
        for (std::size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      bytes.clear();
    };
    for (std::string& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) && std::isxdigit(static_cast<unsigned char>(t[4]))) {
        bytes += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

struct FuseDecoder : Decoder {
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

struct StripDecoder : Decoder {
  std::string content;  // one character
  std::size_t start = 0, stop = 0;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::string> chars;
      for (std::size_t i = 0; i < t.size();) {
        int n = 0;
        uni::next(t, i, &n);
        chars.push_back(t.substr(i, static_cast<std::size_t>(n)));
        i += static_cast<std::size_t>(n);
      }
      std::size_t b = 0, e = chars.size();
      for (std::size_t i = 0; i < start && i < chars.size() && chars[i] == content; ++i) b = i + 1;
      for (std::size_t i = 0; i < stop && i < chars.size() && chars[chars.size() - i - 1] == content; ++i)
        e = chars.size() - i - 1;
      std::string out;
      for (std::size_t i = b; i < e; ++i) out += chars[i];
      t = std::move(out);
    }
  }
};

struct ReplaceDecoder : Decoder {
  std::unique_ptr<Regex> pattern;
  std::string content;
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = pattern->replace_all(t, content);
  }
};

struct BpeDecoder : Decoder {
  std::string suffix = "</w>";
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all(std::move(tokens[i]), suffix, i + 1 == tokens.size() ? "" : " ");
  }
};

// --- post-processors (encode with add_special_tokens) ---
struct Template : PostProcessor {
  std::vector<int32_t> before, after;  // the single-sequence template's ids around $A
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before.begin(), before.end());
    ids.insert(ids.end(), after.begin(), after.end());
  }
};

struct ProcessorSequence : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> parts;
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts) p->process(ids);
  }
};

struct NoOp : PostProcessor {
  void process(std::vector<int32_t>&) const override {}
};

std::unique_ptr<PostProcessor> template_processing(const json& j, const std::string& at) {
  auto t = std::make_unique<Template>();
  bool seen_a = false;
  for (const auto& item : j.at("single")) {
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "A") != "A")
        throw UsageError(at + ": the single template names sequence " + item["Sequence"].dump() + ", not A");
      seen_a = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    const auto& sp = j.at("special_tokens");
    if (!sp.contains(name)) throw UsageError(at + ": the template's special token '" + name + "' is not defined");
    for (const auto& id : sp[name].at("ids")) (seen_a ? t->after : t->before).push_back(id.get<int32_t>());
  }
  return t;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  const std::string at = where + " decoder " + type;
  if (type == "Sequence") {
    auto s = std::make_unique<DecoderSequence>();
    for (const auto& p : j.at("decoders"))
      if (auto d = make_decoder(p, where)) s->parts.push_back(std::move(d));
    return s;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    auto m = std::make_unique<MetaspaceDecoder>();
    m->replacement = j.value("replacement", m->replacement);
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string())
      m->strip_first = j["prepend_scheme"] != "never";
    else
      m->strip_first = j.value("add_prefix_space", true);
    return m;
  }
  if (type == "WordPiece") {
    auto w = std::make_unique<WordPieceDecoder>();
    w->prefix = j.value("prefix", w->prefix);
    w->cleanup = j.value("cleanup", true);
    return w;
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    auto s = std::make_unique<StripDecoder>();
    s->content = j.value("content", std::string(" "));
    s->start = j.value("start", std::size_t{0});
    s->stop = j.value("stop", std::size_t{0});
    return s;
  }
  if (type == "Replace") {
    auto r = std::make_unique<ReplaceDecoder>();
    r->pattern = pattern_of(j.at("pattern"), at);
    r->content = j.at("content").get<std::string>();
    return r;
  }
  if (type == "BPEDecoder") {
    auto b = std::make_unique<BpeDecoder>();
    b->suffix = j.value("suffix", b->suffix);
    return b;
  }
  throw UsageError(where + ": decoder type '" + type + "' is not supported",
                   "supported: Sequence, ByteLevel, Metaspace, WordPiece, ByteFallback, Fuse, Strip, Replace, "
                   "BPEDecoder (docs/tokenizers.md)");
}

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  const std::string at = where + " post_processor " + type;
  if (type == "Sequence") {
    auto s = std::make_unique<ProcessorSequence>();
    for (const auto& p : j.at("processors"))
      if (auto d = make_post_processor(p, where)) s->parts.push_back(std::move(d));
    return s;
  }
  if (type == "TemplateProcessing") return template_processing(j, at);
  if (type == "BertProcessing" || type == "RobertaProcessing") {  // cls A sep
    auto t = std::make_unique<Template>();
    t->before.push_back(j.at("cls").at(1).get<int32_t>());
    t->after.push_back(j.at("sep").at(1).get<int32_t>());
    return t;
  }
  if (type == "ByteLevel") return std::make_unique<NoOp>();  // trims offsets only
  throw UsageError(where + ": post_processor type '" + type + "' is not supported",
                   "supported: Sequence, TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel "
                   "(docs/tokenizers.md)");
}

}  // namespace trainbox::text
