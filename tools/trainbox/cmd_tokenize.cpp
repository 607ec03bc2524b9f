// trainbox tokenize — a Hugging Face tokenizer (a model folder or a tokenizer.json) on standard
// input, one line at a time, for scripts and for checking against other tokenizers
// (docs/tokenizers.md). No torch.
//
//   echo "Hello world" | trainbox tokenize Qwen2.5-0.5B/             → 9707 1879
//   echo '"tab\there"' | trainbox tokenize tok.json --json            → [5192, 3762, 6739]
//   echo "9707 1879" | trainbox tokenize Qwen2.5-0.5B/ --decode       → Hello world
//   echo '{"messages": […]}' | trainbox tokenize Qwen2.5-0.5B/ --chat → {"text": …, "ids": […], "mask": […]}
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include <trainbox/text/chat.h>
#include <trainbox/text/tokenizer.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string template_file;
  bool json = false, decode = false, no_special = false, tokens = false, chat = false, generation_prompt = false;
};

std::vector<int32_t> ids_of(const std::string& line, bool json_line, const std::string& where) {
  std::vector<int32_t> ids;
  if (json_line) {
    try {
      for (const auto& v : nlohmann::json::parse(line)) ids.push_back(v.get<int32_t>());
      return ids;
    } catch (const nlohmann::json::exception&) {
      throw DataError(where + ": not a JSON array of token ids: " + line.substr(0, 80), "write one [id, …] per line");
    }
  }
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v > INT32_MAX)
      throw DataError(where + ": '" + word + "' is not a token id",
                      "write the ids as whole numbers separated by spaces");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// --chat: one JSONL record (text, prompt/completion or messages) to {"text", "ids", "mask"}.
std::string chat_line(const text::Formatter& fmt, const std::string& line, bool generation_prompt) {
  nlohmann::ordered_json rec;
  try {
    rec = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception&) {
    throw DataError("not JSON: " + line.substr(0, 80), "write one JSON object per line with --chat");
  }
  const text::Example ex =
      text::Formatter::form_of(rec) == text::Form::Messages ? fmt.chat(rec, generation_prompt) : fmt.record(rec);
  nlohmann::ordered_json out = {{"text", ex.text}, {"ids", ex.ids}, {"mask", ex.mask}};
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int run_tokenize(const TokenizeOptions& o) {
  const text::Tokenizer tok = text::Tokenizer::load(o.tokenizer);
  std::unique_ptr<text::Formatter> fmt;
  if (o.chat) {
    std::string source;
    if (!o.template_file.empty()) {
      const auto text = read_file(o.template_file);
      if (!text || text->empty())
        throw UsageError("cannot read the template " + o.template_file + " (or it is empty)",
                         "give a Jinja chat template file");
      source = *text;
    }
    fmt = std::make_unique<text::Formatter>(tok, source, o.template_file);
  }
  std::string line, out;
  long line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    const std::string where = "stdin:" + std::to_string(line_no);
    out.clear();
    try {
      if (fmt) {
        out = chat_line(*fmt, line, o.generation_prompt);
      } else if (o.decode) {
        const std::string text = tok.decode(ids_of(line, o.json, where), o.no_special);
        out = o.json ? nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) : text;
      } else {
        std::string text = line;
        if (o.json) {
          try {
            text = nlohmann::json::parse(line).get<std::string>();
          } catch (const nlohmann::json::exception&) {
            throw DataError("not a JSON string: " + line.substr(0, 80), "write one \"…\" per line with --json");
          }
        }
        const std::vector<int32_t> ids = tok.encode(text, !o.no_special);
        nlohmann::json arr = nlohmann::json::array();
        for (std::size_t k = 0; k < ids.size(); ++k) {
          if (o.tokens)
            arr.push_back(tok.id_to_token(ids[k]).value_or(""));
          else if (o.json)
            arr.push_back(ids[k]);
          else
            out += (k ? " " : "") + std::to_string(ids[k]);
        }
        if (o.json || o.tokens) out = arr.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
    } catch (const Error& e) {
      const std::string what = e.what();
      throw DataError(what.rfind(where, 0) == 0 ? what : where + ": " + what, e.hint());
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  app.add_option("tokenizer", o->tokenizer, "A Hugging Face model folder, or its tokenizer.json")->required();
  app.add_flag("--json", o->json,
               "Each input line is a JSON string (exact text: tabs, newlines, any bytes as escapes) and each "
               "output a JSON array; with --decode, JSON arrays in and JSON strings out");
  app.add_flag("--decode", o->decode, "Each input line is token ids (separated by spaces); print the text");
  app.add_flag("--no-special", o->no_special,
               "Encode without the template's special tokens (bos, [CLS] … [SEP]); decode without special tokens");
  app.add_flag("--tokens", o->tokens, "Print the tokens themselves (a JSON array of strings), not their ids")
      ->excludes("--decode");
  auto* chat =
      app.add_flag(
             "--chat", o->chat,
             "Each input line is a JSONL record ({\"messages\": […]}, {\"prompt\", \"completion\"} or {\"text\"}); "
             "print {\"text\", \"ids\", \"mask\"}: the text rendered with the chat template, its ids and "
             "the loss mask (1 on assistant / completion tokens)")
          ->excludes("--decode")
          ->excludes("--tokens");
  app.add_option("--template", o->template_file, "With --chat: a Jinja chat template file instead of the tokenizer's")
      ->check(CLI::ExistingFile)
      ->needs(chat);
  app.add_flag("--add-generation-prompt", o->generation_prompt,
               "With --chat: end each conversation with the assistant's header, as a prompt for generation")
      ->needs(chat);
  return [o] { return run_tokenize(*o); };
}

}  // namespace trainbox::cli
