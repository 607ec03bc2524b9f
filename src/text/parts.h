// The tokenizer's parts (private to src/text/): Unicode helpers, the regex engine, and one
// interface per stage of Hugging Face's pipeline, each built from its tokenizer.json object.
//
// Strings are UTF-8 throughout (validated once, at encode). No offsets are tracked: trainbox
// needs ids and text, and the one thing HF decides by offset — Metaspace's "first" prepend
// scheme — is carried as Piece::at_start.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

typedef struct re_pattern_buffer OnigRegexType;

namespace trainbox::text {

// --- Unicode (utf8proc for the tables; the semantics of Rust's char methods, as HF uses them) ---
namespace uni {
// The code point at s[i] (valid UTF-8 assumed) and its length in bytes.
char32_t next(std::string_view s, std::size_t i, int* len);
void append(std::string& out, char32_t c);
// The byte offset of the first invalid sequence, or npos.
std::size_t invalid_utf8_at(std::string_view s);
bool is_whitespace(char32_t c);             // Rust char::is_whitespace (the White_Space property)
bool is_punctuation(char32_t c);            // HF is_punc: ASCII punctuation or a P* category
bool is_numeric(char32_t c);                // Nd, Nl, No
bool is_control(char32_t c);                // HF BertNormalizer: Cc, Cf, Co, Cs except \t \n \r
bool is_nonspacing_mark(char32_t c);        // Mn (BertNormalizer's strip_accents)
bool is_combining_mark(char32_t c);         // Mn, Mc, Me (the StripAccents normalizer)
bool is_chinese(char32_t c);                // the CJK blocks BERT puts spaces around
std::string lowercase(std::string_view s);  // per char, full mappings (İ → i̇), as Rust's to_lowercase
// GPT-2's bytes_to_unicode: the printable character each byte stands for in a byte-level vocab.
const std::array<char32_t, 256>& byte_level_chars();
enum class Form { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, Form f);
}  // namespace uni

// --- Oniguruma, the engine HF tokenizers runs pre-tokenizer and Replace patterns on ---
class Regex {
 public:
  explicit Regex(const std::string& pattern);  // UsageError naming the pattern and onig's message
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Non-overlapping matches (byte ranges), leftmost first; an empty match right after the
  // previous one advances one character (the onig crate's find_iter, which HF calls).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view s) const;
  // `s` with every match replaced by `content` (HF's Replace normalizer and decoder).
  std::string replace_all(std::string_view s, const std::string& content) const;
  static std::string escape(std::string_view literal);

 private:
  OnigRegexType* re_ = nullptr;
};

// A boolean key of a tokenizer.json object, or `dflt` when absent or not a boolean.
bool json_flag(const nlohmann::json& j, const char* key, bool dflt);

// A tokenizer.json pattern: {"String": "…"} (a literal) or {"Regex": "…"}.
std::unique_ptr<Regex> pattern_of(const nlohmann::json& j, const std::string& where);

// --- the stages ---
struct Normalizer {
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

struct Piece {
  std::string text;
  bool at_start = false;  // starts at the input's first byte (Metaspace's prepend_scheme "first")
};

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

struct Model {
  virtual ~Model() = default;
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual std::int64_t size() const = 0;  // the largest id + 1
};

struct PostProcessor {
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t>& ids) const = 0;  // only with add_special_tokens
};

struct Decoder {
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Each: null JSON → nullptr; an unsupported type or option → UsageError naming it and `where`.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<Model> make_model(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const std::string& where);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

// How a split delimiter is kept (HF SplitDelimiterBehavior).
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
Behavior behavior_of(const nlohmann::json& j, const std::string& where);
// Splits `s` at the (match, is_match) ranges by `b`; empty pieces are dropped.
void split_by(const Piece& p, std::vector<std::pair<std::pair<std::size_t, std::size_t>, bool>> ranges, Behavior b,
              std::vector<Piece>& out);

}  // namespace trainbox::text
