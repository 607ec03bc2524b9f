// The tokenizer in a build without Oniguruma or utf8proc (CMakeLists.txt): every use says which
// packages bring it, as the dashboard does without cpp-httplib.
#include <trainbox/text/tokenizer.h>

#include <trainbox/util/errors.h>

namespace trainbox::text {

struct Tokenizer::Impl {
  std::string none;
};

bool tokenizer_available() { return false; }

Tokenizer Tokenizer::load(const std::string& path) {
  throw UsageError("cannot read tokenizer " + path + ": this trainbox was built without the tokenizer",
                   "install libonig-dev and libutf8proc-dev (Debian) and rebuild (docs/tokenizers.md)");
}

// Unreachable: no Tokenizer can be made in this build.
std::vector<int32_t> Tokenizer::encode(std::string_view, bool) const { return {}; }
std::string Tokenizer::decode(const std::vector<int32_t>&, bool) const { return {}; }
std::int64_t Tokenizer::vocab_size() const { return 0; }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view) const { return std::nullopt; }
std::optional<std::string> Tokenizer::id_to_token(int32_t) const { return std::nullopt; }
bool Tokenizer::is_special(int32_t) const { return false; }
const std::string& Tokenizer::bos_token() const { return impl_->none; }
const std::string& Tokenizer::eos_token() const { return impl_->none; }
const std::string& Tokenizer::pad_token() const { return impl_->none; }
const std::string& Tokenizer::chat_template() const { return impl_->none; }
const std::string& Tokenizer::source() const { return impl_->none; }

}  // namespace trainbox::text
