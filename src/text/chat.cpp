// Formatter: documents, prompt/completion pairs and conversations to ids and loss masks
// (trainbox/text/chat.h).
#include <trainbox/text/chat.h>

#include <algorithm>

#include <trainbox/util/errors.h>

namespace trainbox::text {

using ojson = nlohmann::ordered_json;

namespace {

std::size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return k;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

Formatter::Formatter(Tokenizer tok, std::string template_source, std::string template_name)
    : tok_(std::move(tok)), template_source_(std::move(template_source)), template_name_(std::move(template_name)) {
  if (template_source_.empty()) {
    template_source_ = tok_.chat_template();
    template_name_ = "the chat template of " + tok_.source();
  }
  if (template_name_.empty()) template_name_ = "template";
  // A template this engine refuses matters only to conversations: kept, and thrown at the first.
  if (!template_source_.empty()) {
    try {
      template_ = std::make_shared<const Template>(Template::parse(template_source_, template_name_));
    } catch (const TemplateError&) {
      template_error_ = std::current_exception();
    }
  }
}

const Template& Formatter::chat_template() const {
  if (template_error_) std::rethrow_exception(template_error_);
  if (!template_)
    throw UsageError("the tokenizer " + tok_.source() +
                         " has no chat template (tokenizer_config.json's chat_template or chat_template.jinja)",
                     "give one with --template FILE (data.chat_template in a config)");
  return *template_;
}

void Formatter::mark(const std::string& text, bool add_special, const std::vector<int32_t>& ids, std::size_t begin,
                     std::size_t end, std::vector<std::uint8_t>& mask) const {
  if (begin >= end) return;
  // The token holding byte `begin`: where the encoding of the text before it stops agreeing with
  // the whole's (at a token boundary it agrees throughout, and the next token starts there).
  const std::size_t first = common_prefix(tok_.encode(std::string_view(text).substr(0, begin), add_special), ids);
  std::size_t last_end = ids.size();  // one past the token holding byte end-1
  if (end < text.size()) {
    const auto upto = tok_.encode(std::string_view(text).substr(0, end), add_special);
    const std::size_t q = common_prefix(upto, ids);
    last_end = q == upto.size() ? q : q + 1;
  }
  for (std::size_t k = first; k < std::min(last_end, ids.size()); ++k) mask[k] = 1;
}

void Formatter::add_eos(Example& ex) const {
  if (tok_.eos_token().empty()) return;
  const auto eos = tok_.token_to_id(tok_.eos_token());
  if (!eos || (!ex.ids.empty() && ex.ids.back() == *eos)) return;
  ex.ids.push_back(*eos);
  ex.mask.push_back(1);
}

Example Formatter::text(std::string_view document) const {
  Example ex;
  ex.text = std::string(document);
  ex.ids = tok_.encode(document, true);
  ex.mask.assign(ex.ids.size(), 1);
  add_eos(ex);
  return ex;
}

Example Formatter::prompt_completion(std::string_view prompt, std::string_view completion) const {
  Example ex;
  ex.text = std::string(prompt) + std::string(completion);
  ex.ids = tok_.encode(ex.text, true);
  ex.mask.assign(ex.ids.size(), 0);
  mark(ex.text, true, ex.ids, prompt.size(), ex.text.size(), ex.mask);
  add_eos(ex);
  return ex;
}

Rendered Formatter::render(const ojson& messages, const ojson& tools, bool add_generation_prompt) const {
  ojson ctx = ojson::object();
  ctx["messages"] = messages;
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  // transformers passes the tokenizer's special tokens map (bos_token, eos_token, pad_token …).
  if (!tok_.bos_token().empty()) ctx["bos_token"] = tok_.bos_token();
  if (!tok_.eos_token().empty()) ctx["eos_token"] = tok_.eos_token();
  if (!tok_.pad_token().empty()) ctx["pad_token"] = tok_.pad_token();
  return chat_template().render(ctx);
}

Example Formatter::chat(const ojson& record, bool add_generation_prompt) const {
  const auto it = record.find("messages");
  if (it == record.end() || !it->is_array())
    throw DataError("\"messages\" is not a list of {\"role\": …, \"content\": …} objects",
                    "write each conversation as OpenAI's messages");
  const ojson& messages = *it;
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw DataError("messages[" + std::to_string(k) + "] has no \"role\" string",
                      "each message is {\"role\": \"user\" | \"assistant\" | \"system\", \"content\": …}");
  }
  const auto tools_it = record.find("tools");
  const ojson tools = tools_it == record.end() ? ojson(nullptr) : *tools_it;

  Rendered full = render(messages, tools, add_generation_prompt);
  Example ex;
  ex.text = full.text;
  ex.ids = tok_.encode(ex.text, false);
  ex.mask.assign(ex.ids.size(), 0);
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  if (chat_template().has_generation()) {
    spans = full.generation;
  } else {
    for (std::size_t k = 0; k < messages.size(); ++k) {
      if (messages[k]["role"].get<std::string>() != "assistant") continue;
      ojson before = ojson::array(), through = ojson::array();
      for (std::size_t j = 0; j < k; ++j) before.push_back(messages[j]);
      through = before;
      through.push_back(messages[k]);
      const std::string a = render(before, tools, true).text;
      const std::string b = render(through, tools, false).text;
      if (b.compare(0, a.size(), a) != 0 || ex.text.compare(0, b.size(), b) != 0)
        throw DataError("the chat template does not render this conversation as growing prefixes at messages[" +
                            std::to_string(k) +
                            "] (it rewrites earlier turns), so its assistant tokens cannot be found",
                        "add {% generation %} … {% endgeneration %} around the assistant content in the template "
                        "(--template FILE), as transformers' assistant masks need");
      std::size_t end = b.size();
      while (end > a.size() && is_space(b[end - 1])) --end;
      spans.emplace_back(a.size(), end);
    }
  }
  for (const auto& [begin, end] : spans) mark(ex.text, false, ex.ids, begin, end, ex.mask);
  return ex;
}

Form Formatter::form_of(const ojson& record) {
  if (!record.is_object())
    throw DataError(
        "the line is JSON but not an object",
        "write one {\"text\": …} / {\"prompt\": …, \"completion\": …} / {\"messages\": […]} object per line");
  if (record.contains("messages")) return Form::Messages;
  if (record.contains("prompt") || record.contains("completion")) {
    for (const char* k : {"prompt", "completion"})
      if (!record.contains(k) || !record[k].is_string())
        throw DataError(std::string("the record has no \"") + k + "\" string",
                        "a prompt/completion record has both, as strings");
    return Form::PromptCompletion;
  }
  if (record.contains("text")) {
    if (!record["text"].is_string()) throw DataError("\"text\" is not a string", "write {\"text\": \"…\"}");
    return Form::Text;
  }
  throw DataError("the record has none of \"text\", \"prompt\"/\"completion\", \"messages\"",
                  "write one of the three forms per line (docs/text-data.md)");
}

Example Formatter::record(const ojson& record) const {
  switch (form_of(record)) {
    case Form::Text: return text(record["text"].get_ref<const std::string&>());
    case Form::PromptCompletion:
      return prompt_completion(record["prompt"].get_ref<const std::string&>(),
                               record["completion"].get_ref<const std::string&>());
    case Form::Messages: return chat(record);
  }
  return {};
}

}  // namespace trainbox::text
