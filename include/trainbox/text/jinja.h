// trainbox/text/jinja.h — the Jinja subset chat templates are written in, rendered as
// transformers renders them (torch-free).
//
// transformers' apply_chat_template renders a checkpoint's chat_template with Python jinja2 in an
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop controls, its own
// `tojson` (json.dumps, ensure_ascii=False), `raise_exception`, `strftime_now` and the
// `{% generation %}` tag that marks assistant text. This engine does the same, so a template gives
// the same string byte for byte (tests/integration/chat_template_parity.py holds it to jinja2 and
// transformers):
//   statements  if/elif/else, for (tuple targets, `if` filter, else, loop.*), set (name, tuple,
//               ns.attr, block form), macro (defaults, keyword arguments), break/continue,
//               generation, filter blocks are not supported;
//   expressions literals, lists, dicts, tuples, attribute/item/slice access, calls, filters, tests,
//               `x if c else y`, and/or/not, comparisons, `in`, `~`, + - * / // % **;
//   filters     trim length count upper lower capitalize title join first last default d list
//               string int float abs round replace items dictsort selectattr rejectattr select
//               reject map unique reverse sort tojson safe escape e indent min max sum wordcount;
//   tests       defined undefined none string number integer float mapping iterable sequence
//               boolean true false even odd divisibleby eq ne lt le gt ge in sameas callable
//               lower upper;
//   methods     str: startswith endswith strip lstrip rstrip split rsplit splitlines upper lower
//               title capitalize replace find rfind count join isdigit isspace isalpha;
//               dict: items keys values get;
//   globals     range namespace dict raise_exception strftime_now.
// Anything else — an unknown tag, filter, test or method, `{% include %}`, list.append (refused by
// the sandbox in transformers too) — is a TemplateError naming the template's line: never a
// silently different render.
//
//   auto t = trainbox::text::Template::parse(tok.chat_template(), "tokenizer_config.json");
//   nlohmann::ordered_json ctx = {{"messages", msgs}, {"add_generation_prompt", true}};
//   trainbox::text::Rendered r = t.render(ctx);    // r.text; r.generation: assistant byte spans
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <trainbox/util/errors.h>

namespace trainbox::text {

// A template that does not parse, or fails while rendering (undefined.attr, a type error,
// raise_exception): the message names the template and its line; `raised` holds the text of a
// raise_exception call (empty otherwise), which callers show as the template's own words.
struct TemplateError : UsageError {
  TemplateError(const std::string& what, std::string raised_text = {})
      : UsageError(what, "fix the template, or pick another with --template"), raised(std::move(raised_text)) {}
  std::string raised;
};

struct Rendered {
  std::string text;
  // Byte ranges [begin, end) of text written inside {% generation %} … {% endgeneration %}.
  std::vector<std::pair<std::size_t, std::size_t>> generation;
};

class Template {
 public:
  // `name` is used in messages ("chat_template.jinja line 3: …").
  static Template parse(const std::string& source, const std::string& name = "template");
  // `context`: the template's variables (messages, add_generation_prompt, bos_token, tools, …).
  // JSON objects keep their key order (tojson writes them as given, as Python's dicts do).
  Rendered render(const nlohmann::ordered_json& context) const;
  // Whether the template has {% generation %} blocks (transformers' assistant masks need them).
  bool has_generation() const;

  struct Impl;

 private:
  explicit Template(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace trainbox::text
