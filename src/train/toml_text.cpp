#include "toml_text.h"

#include <memory>
#include <string>

namespace trainbox::train {
namespace {

// Where toml++ 3.3.0 would test a non-ASCII character for whitespace, if anywhere: a small
// lexer that knows comments and the four kinds of strings, nothing else.
struct Scan {
  std::string_view t;
  std::size_t i = 0;
  toml::source_index line = 1, col = 1;

  bool at(std::string_view s) const { return t.substr(i, s.size()) == s; }
  void step() {
    if (t[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(t[i]) & 0xC0) != 0x80) {
      ++col;  // columns count code points, as toml++'s do
    }
    ++i;
  }
  // Returns a description of the first problem, or nullptr.
  const char* run() {
    while (i < t.size()) {
      const unsigned char c = static_cast<unsigned char>(t[i]);
      if (c == '#') {
        while (i < t.size() && t[i] != '\n') step();
      } else if (at("\"\"\"")) {
        for (int k = 0; k < 3; ++k) step();
        while (i < t.size() && !at("\"\"\"")) {
          if (t[i] != '\\') {
            step();
            continue;
          }
          step();  // the backslash; a line-ending one skips all whitespace that follows
          std::size_t j = i;
          while (j < t.size() && (t[j] == ' ' || t[j] == '\t' || t[j] == '\r')) ++j;
          if (j < t.size() && t[j] == '\n') {
            while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\r' || t[i] == '\n')) step();
            if (i < t.size() && static_cast<unsigned char>(t[i]) >= 0x80)
              return "a non-ASCII character first after a line-ending backslash (escape it as \\uXXXX)";
          } else if (i < t.size()) {
            step();  // the escaped character
          }
        }
        for (int k = 0; k < 3 && i < t.size(); ++k) step();
        for (int k = 0; k < 2 && i < t.size() && t[i] == '"'; ++k) step();  // """a"""" ends with a quote
      } else if (at("'''")) {
        for (int k = 0; k < 3; ++k) step();
        while (i < t.size() && !at("'''")) step();
        for (int k = 0; k < 3 && i < t.size(); ++k) step();
        for (int k = 0; k < 2 && i < t.size() && t[i] == '\''; ++k) step();
      } else if (c == '"' || c == '\'') {
        step();
        while (i < t.size() && t[i] != static_cast<char>(c) && t[i] != '\n') {
          if (c == '"' && t[i] == '\\' && i + 1 < t.size() && t[i + 1] != '\n') step();
          step();
        }
        if (i < t.size() && t[i] == static_cast<char>(c)) step();
      } else if (c >= 0x80) {
        return "a non-ASCII character outside a string or comment (quote the value)";
      } else {
        step();
      }
    }
    return nullptr;
  }
};

}  // namespace

toml::table parse_toml(std::string_view text, std::string_view origin) {
  Scan s{text};
  if (const char* problem = s.run())
    throw toml::parse_error(problem, toml::source_position{s.line, s.col},
                            origin.empty() ? nullptr : std::make_shared<const std::string>(origin));
  return toml::parse(text, origin);
}

}  // namespace trainbox::train
