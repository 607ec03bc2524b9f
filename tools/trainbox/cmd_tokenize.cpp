// trainbox tokenize — a Hugging Face tokenizer (a model folder or a tokenizer.json) on standard
// input, one line at a time, for scripts and for checking against other tokenizers
// (docs/tokenizers.md). No torch.
//
//   echo "Hello world" | trainbox tokenize Qwen2.5-0.5B/             → 9707 1879
//   echo '"tab\there"' | trainbox tokenize tok.json --json            → [5192, 3762, 6739]
//   echo "9707 1879" | trainbox tokenize Qwen2.5-0.5B/ --decode       → Hello world
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include <trainbox/text/tokenizer.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

namespace {

struct TokenizeOptions {
  std::string tokenizer;
  bool json = false, decode = false, no_special = false, tokens = false;
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

int run_tokenize(const TokenizeOptions& o) {
  const text::Tokenizer tok = text::Tokenizer::load(o.tokenizer);
  std::string line, out;
  long line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    const std::string where = "stdin:" + std::to_string(line_no);
    out.clear();
    try {
      if (o.decode) {
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
  return [o] { return run_tokenize(*o); };
}

}  // namespace trainbox::cli
