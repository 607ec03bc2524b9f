// trainbox/text/tokenizer.h — a Hugging Face tokenizer.json, read and run in C++ (torch-free).
//
// Reads the tokenizer every current checkpoint ships (tokenizer.json, and tokenizer_config.json
// beside it for the bos/eos tokens and the chat template) and gives the ids Hugging Face's
// `tokenizers` gives, id for id (tests/integration/tokenizer_parity.py holds it to that on the
// license texts, the fortunes and generated Unicode). The pipeline is HF's:
//   added/special tokens split off → normalizer → pre-tokenizer → model → post-processor,
// and decode runs the decoder. Supported (docs/tokenizers.md): models BPE (byte-level, byte
// fallback, ignore_merges, subword prefix/suffix), WordPiece, WordLevel, Unigram; normalizers NFC/NFD/
// NFKC/NFKD, Lowercase, StripAccents, BertNormalizer, Strip, Replace, Prepend; pre-tokenizers
// ByteLevel, Split, Metaspace, Whitespace, WhitespaceSplit, BertPreTokenizer, Punctuation, Digits,
// CharDelimiterSplit; post-processors TemplateProcessing, BertProcessing, RobertaProcessing,
// ByteLevel; decoders ByteLevel, Metaspace, WordPiece, ByteFallback, Fuse, Strip, Replace, BPEDecoder.
// Each may be in a Sequence. Anything else — a component, an option (BPE dropout) — is refused at
// load with one line naming it (UsageError, exit 2): never a tokenizer that silently differs.
//
// Thread safety: a loaded Tokenizer is immutable; encode/decode may run on many threads at once
// (each thread keeps its own word cache).
//
//   auto tok = trainbox::text::Tokenizer::load("Qwen2.5-0.5B/");    // a folder or a tokenizer.json
//   std::vector<int32_t> ids = tok.encode("Hello world");            // with the template's bos/eos
//   std::string back = tok.decode(ids, /*skip_special_tokens=*/true);
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::text {

class Tokenizer {
 public:
  // `path`: a tokenizer.json, or a folder holding one (a Hugging Face model folder). Its
  // tokenizer_config.json, when present, gives bos/eos/pad and chat_template (a chat_template.jinja
  // beside it wins, as in transformers). UsageError: missing file, bad JSON, unsupported component.
  static Tokenizer load(const std::string& path);

  // Text (UTF-8; DataError naming the byte offset when it is not) to ids. add_special_tokens: the
  // post-processor's template (bos, [CLS] … [SEP]); special tokens written in the text are always
  // matched as themselves, as HF does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids to text through the decoder; an id outside the vocabulary is a UsageError naming it.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // The number of ids: the largest id (model's or added token's) + 1.
  std::int64_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;  // an added token marked special (skipped by skip_special_tokens)

  // From tokenizer_config.json (empty when absent).
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  const std::string& pad_token() const;
  const std::string& chat_template() const;
  const std::string& source() const;  // the tokenizer.json read

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Whether this build has the tokenizer (Oniguruma and utf8proc found at configure time); without
// them Tokenizer::load throws a UsageError naming the Debian packages.
bool tokenizer_available();

}  // namespace trainbox::text
