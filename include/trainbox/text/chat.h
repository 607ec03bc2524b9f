// trainbox/text/chat.h — training examples from a user's text: a document, a prompt and its
// completion, or a conversation rendered with the model's chat template; each the ids the model
// reads and the loss mask (1: the loss counts this token as a target; HF's labels = -100 where 0).
//
// The three JSONL forms (docs/text-data.md), one per line:
//   {"text": "…"}                                   a document: every token is a target
//   {"prompt": "…", "completion": "…"}              the loss on the completion only
//   {"messages": [{"role": "user", "content": "…"}, {"role": "assistant", …}], "tools": […]}
//                                                   the loss on the assistant turns only
// `text` and the completion end with the tokenizer's eos (unless the text already does), so a
// model learns where an answer stops; a conversation's end-of-turn tokens are the template's.
//
// Assistant masks: a template with {% generation %} blocks masks exactly what transformers'
// apply_chat_template(..., return_assistant_tokens_mask=True) masks. Most templates have none;
// then each assistant turn's span is what its message adds to the rendered conversation
// (render(messages[:i+1]) minus render(messages[:i], add_generation_prompt=True), trailing
// whitespace left out), which needs the template to render a conversation as growing prefixes;
// a template that rewrites earlier turns (dropping past reasoning, say) is refused with the
// turn named, never masked wrong. Tokens are those of the whole text (never per-segment), and a
// span's first and last tokens are those holding its first and last bytes, as transformers'
// char_to_token does.
//
//   trainbox::text::Formatter fmt(tok);                       // the tokenizer's own template
//   trainbox::text::Example ex = fmt.record(nlohmann::ordered_json::parse(line));
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <trainbox/text/jinja.h>
#include <trainbox/text/tokenizer.h>

namespace trainbox::text {

struct Example {
  std::vector<int32_t> ids;
  std::vector<std::uint8_t> mask;  // one per id
  std::string text;                // the rendered text (conversations; the concatenation otherwise)
};

enum class Form { Text, PromptCompletion, Messages };

class Formatter {
 public:
  // `template_source` empty: the tokenizer's chat_template (needed only for conversations).
  explicit Formatter(Tokenizer tok, std::string template_source = {}, std::string template_name = {});

  Example text(std::string_view document) const;
  Example prompt_completion(std::string_view prompt, std::string_view completion) const;
  // A record with "messages" (and optionally "tools"); add_generation_prompt ends the text with
  // the assistant header, as a prompt for generation (nothing is then masked after it).
  Example chat(const nlohmann::ordered_json& record, bool add_generation_prompt = false) const;
  // Whichever form the record has. DataError: not an object, none of the fields, a field of the
  // wrong type (the message names the field); TemplateError: the template refused it.
  Example record(const nlohmann::ordered_json& record) const;
  static Form form_of(const nlohmann::ordered_json& record);

  const Tokenizer& tokenizer() const { return tok_; }

 private:
  void mark(const std::string& text, bool add_special, const std::vector<int32_t>& ids, std::size_t begin,
            std::size_t end, std::vector<std::uint8_t>& mask) const;
  void add_eos(Example& ex) const;
  Rendered render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                  bool add_generation_prompt) const;
  const Template& chat_template() const;

  Tokenizer tok_;
  std::string template_source_, template_name_;
  std::shared_ptr<const Template> template_;
  std::exception_ptr template_error_;
};

}  // namespace trainbox::text
