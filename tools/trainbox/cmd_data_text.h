// trainbox data tokenize and data ls for text (cmd_data_text.cpp; docs/text-data.md). No torch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace trainbox::cli {

struct DataTokenizeOptions {
  std::vector<std::string> paths;  // IN… OUT
  std::string tokenizer, template_file, on_bad = "fail";
  std::int64_t shard_tokens = 100'000'000;
  int threads = 0;  // 0: every core
  bool force = false;
};
int data_tokenize(const DataTokenizeOptions& o);

struct TextLsOptions {
  std::string path, tokenizer, template_file;
  std::int64_t block = 0;
  bool json = false;
};
// Whether `path` is text data data ls shows with ls_text: a data tokenize folder, a .bin or .jsonl.
bool is_text_data(const std::string& path);
int ls_text(const TextLsOptions& o);

}  // namespace trainbox::cli
