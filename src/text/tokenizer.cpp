// Tokenizer: tokenizer.json loaded into the stages of parts.h, and HF's encode/decode around
// them (tokenizer/mod.rs and added_vocabulary.rs there).
#include <trainbox/text/tokenizer.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "parts.h"
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::text {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// Leftmost-longest matching of the added tokens' texts (HF builds an Aho-Corasick automaton with
// MatchKind::LeftmostLongest; a byte trie walked from each position gives the same matches).
class Matcher {
 public:
  void add(const std::string& text, std::size_t token) {
    if (text.empty()) return;
    int node = 0;
    for (const char c : text) {
      auto& next = nodes_[static_cast<std::size_t>(node)].next;
      const auto it = next.find(c);
      if (it != next.end()) {
        node = it->second;
        continue;
      }
      next.emplace(c, static_cast<int>(nodes_.size()));
      node = static_cast<int>(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[static_cast<std::size_t>(node)].token = static_cast<int>(token);
    first_[static_cast<unsigned char>(text[0])] = true;
  }
  bool empty() const { return nodes_.size() == 1; }
  // The longest token starting at s[i]: (token index, end) or (-1, i).
  std::pair<int, std::size_t> longest_at(std::string_view s, std::size_t i) const {
    std::pair<int, std::size_t> best{-1, i};
    if (!first_[static_cast<unsigned char>(s[i])]) return best;
    int node = 0;
    for (std::size_t k = i; k < s.size(); ++k) {
      const auto& next = nodes_[static_cast<std::size_t>(node)].next;
      const auto it = next.find(s[k]);
      if (it == next.end()) break;
      node = it->second;
      if (nodes_[static_cast<std::size_t>(node)].token >= 0)
        best = {nodes_[static_cast<std::size_t>(node)].token, k + 1};
    }
    return best;
  }

 private:
  struct Node {
    std::map<char, int> next;
    int token = -1;
  };
  std::vector<Node> nodes_{1};
  bool first_[256] = {};
};

// Rust regex \w at a character: letters, marks, decimal digits, connector punctuation.
bool is_word_char(char32_t c) {
  if (c == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
  }
}

char32_t last_char(std::string_view s) {
  std::size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  int n = 0;
  return uni::next(s, k, &n);
}

// A piece of the input on its way through the pipeline: an added token's id, or text.
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_start = false;
};

std::string token_text(const json& j) {  // "…" or an AddedToken object {"content": "…"}
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return {};
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_ids;
  std::unordered_map<int32_t, std::size_t> added_by_id;
  Matcher raw_matcher, normalized_matcher;
  std::string bos, eos, pad, chat_template;

  // HF find_matches: the input cut at the added tokens `m` finds (with their strip/word rules).
  void split_added(const Segment& in, const Matcher& m, std::vector<Segment>& out) const {
    const std::string_view s = in.text;
    if (m.empty() || s.empty()) {
      if (!s.empty()) out.push_back(in);
      return;
    }
    std::size_t from = 0;  // the end of the last match
    for (std::size_t i = 0; i < s.size();) {
      const std::pair<int, std::size_t> found = m.longest_at(s, i);
      const int tok = found.first;
      std::size_t stop = found.second;  // a plain variable: the lambda below reads it (clang 14 captures no binding)
      if (tok < 0) {
        ++i;
        continue;
      }
      const AddedToken& a = added[static_cast<std::size_t>(tok)];
      std::size_t start = i;
      if (a.single_word && ((start > 0 && is_word_char(last_char(s.substr(0, start)))) || (stop < s.size() && [&] {
                              int n = 0;
                              return is_word_char(uni::next(s, stop, &n));
                            }()))) {
        i = stop;  // the automaton moves past a discarded match
        continue;
      }
      if (a.lstrip) {
        std::size_t b = start;
        while (b > from) {
          std::size_t k = b - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          int n = 0;
          if (!uni::is_whitespace(uni::next(s, k, &n))) break;
          b = k;
        }
        start = b;
      }
      if (a.rstrip)
        while (stop < s.size()) {
          int n = 0;
          if (!uni::is_whitespace(uni::next(s, stop, &n))) break;
          stop += static_cast<std::size_t>(n);
        }
      if (from < start) out.push_back({std::string(s.substr(from, start - from)), -1, in.at_start && from == 0});
      out.push_back({std::string(s.substr(start, stop - start)), a.id, false});
      from = i = stop;
    }
    if (from < s.size()) out.push_back({std::string(s.substr(from)), -1, in.at_start && from == 0});
  }
};

bool tokenizer_available() { return true; }

Tokenizer Tokenizer::load(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const std::string file = is_dir ? (fs::path(path) / "tokenizer.json").string() : path;
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  impl->source = file;
  const std::optional<std::string> text = read_file(file);
  if (!text)
    throw UsageError("tokenizer " + file + " cannot be read" + (fs::exists(file, ec) ? "" : ": no such file"),
                     is_dir ? "a model folder needs the tokenizer.json its checkpoint ships (save_pretrained writes it)"
                            : "pass a tokenizer.json or the model folder holding one");
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::exception& e) {
    throw UsageError("tokenizer " + file + " is not JSON: " + e.what(), "the file is damaged or truncated");
  }
  const std::string where = "tokenizer " + file;
  try {
    if (!j.is_object() || !j.contains("model"))
      throw UsageError(where + " has no \"model\": it is not a Hugging Face tokenizer.json",
                       "a tokenizers (Rust) tokenizer.json has version, added_tokens, normalizer, pre_tokenizer, "
                       "post_processor, decoder and model");
    impl->normalizer = make_normalizer(j.value("normalizer", json()), where);
    impl->pre_tokenizer = make_pre_tokenizer(j.value("pre_tokenizer", json()), where);
    impl->model = make_model(j["model"], where);
    impl->post_processor = make_post_processor(j.value("post_processor", json()), where);
    impl->decoder = make_decoder(j.value("decoder", json()), where);
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = a.at("id").get<int32_t>();
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.special = a.value("special", false);
      t.normalized = a.value("normalized", !t.special);
      impl->added_ids[t.content] = t.id;
      impl->added_by_id[t.id] = impl->added.size();
      impl->added.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    throw UsageError(where + ": " + e.what(), "the tokenizer.json is damaged");
  }
  for (std::size_t k = 0; k < impl->added.size(); ++k) {
    const AddedToken& a = impl->added[k];
    if (!a.normalized) {
      impl->raw_matcher.add(a.content, k);
    } else {
      std::string n = a.content;
      if (impl->normalizer) impl->normalizer->normalize(n);
      impl->normalized_matcher.add(n, k);
    }
  }
  // --- tokenizer_config.json (and chat_template.jinja, which transformers reads first) ---
  if (const auto cfg = read_file((dir / "tokenizer_config.json").string())) {
    try {
      const json c = json::parse(*cfg);
      impl->bos = token_text(c.value("bos_token", json()));
      impl->eos = token_text(c.value("eos_token", json()));
      impl->pad = token_text(c.value("pad_token", json()));
      const json t = c.value("chat_template", json());
      if (t.is_string())
        impl->chat_template = t.get<std::string>();
      else if (t.is_array())
        for (const auto& e : t)
          if (e.value("name", "") == "default") impl->chat_template = e.value("template", "");
    } catch (const json::exception& e) {
      throw UsageError((dir / "tokenizer_config.json").string() + " is not valid JSON: " + e.what());
    }
  }
  if (const auto jinja = read_file((dir / "chat_template.jinja").string())) impl->chat_template = *jinja;
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& t = *impl_;
  if (const auto bad = uni::invalid_utf8_at(text); bad != std::string_view::npos)
    throw DataError("text is not valid UTF-8 at byte " + std::to_string(bad),
                    "re-encode the file as UTF-8 (iconv -f LATIN1 -t UTF-8, for one)");
  std::vector<Segment> raw, segs;
  t.split_added({std::string(text), -1, true}, t.raw_matcher, raw);
  for (Segment& s : raw) {
    if (s.id >= 0) {
      segs.push_back(std::move(s));
      continue;
    }
    if (t.normalizer) t.normalizer->normalize(s.text);
    t.split_added(s, t.normalized_matcher, segs);
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Piece> pieces;
  for (const Segment& s : segs) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    pieces.assign(1, Piece{s.text, s.at_start});
    if (t.pre_tokenizer) t.pre_tokenizer->pre_tokenize(pieces);
    for (const Piece& p : pieces) t.model->tokenize(p.text, ids);
  }
  if (add_special_tokens && t.post_processor) t.post_processor->process(ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const auto a = t.added_by_id.find(id); a != t.added_by_id.end()) {
      if (!(skip_special_tokens && t.added[a->second].special)) tokens.push_back(t.added[a->second].content);
      continue;
    }
    auto tok = t.model->id_to_token(id);
    if (!tok)
      throw UsageError("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary (" +
                           std::to_string(vocab_size()) + " ids)",
                       "the ids were made with another tokenizer, or are damaged");
    tokens.push_back(std::move(*tok));
  }
  if (t.decoder) t.decoder->decode_chain(tokens);
  std::string out;
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    if (!t.decoder && k > 0) out += ' ';  // HF joins with spaces when there is no decoder
    out += tokens[k];
  }
  return out;
}

std::int64_t Tokenizer::vocab_size() const {
  std::int64_t n = impl_->model->size();
  for (const auto& a : impl_->added) n = std::max<std::int64_t>(n, a.id + 1);
  return n;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(std::string(token)); it != impl_->added_ids.end()) return it->second;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const auto a = impl_->added_by_id.find(id); a != impl_->added_by_id.end()) return impl_->added[a->second].content;
  return impl_->model->id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  const auto a = impl_->added_by_id.find(id);
  return a != impl_->added_by_id.end() && impl_->added[a->second].special;
}

const std::string& Tokenizer::bos_token() const { return impl_->bos; }
const std::string& Tokenizer::eos_token() const { return impl_->eos; }
const std::string& Tokenizer::pad_token() const { return impl_->pad; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::string& Tokenizer::source() const { return impl_->source; }

}  // namespace trainbox::text
