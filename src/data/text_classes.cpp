// Labelled text for sequence classification (data/text_classes.h).
#include <trainbox/data/text_classes.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

namespace trainbox::data {
namespace {

using nlohmann::json;

struct Line {
  std::vector<std::int64_t> ids;
  json label;
  std::string where;  // file:line
};

[[noreturn]] void bad_line(const std::string& where, const std::string& what) {
  throw DataError(fmt::format("{}: {}", where, what),
                  "each line is {\"text\": \"…\", \"label\": …} or {\"ids\": [token ids], \"label\": …} "
                  "(docs/datasets.md, \"Labelled text\")");
}

std::vector<Line> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw DataError(fmt::format("data.path = \"{}\" cannot be read", path),
                    "point it at a .jsonl file of {\"text\", \"label\"} lines");
  std::vector<Line> out;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, n);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      bad_line(where, fmt::format("not JSON ({})", e.what()));
    }
    if (!j.is_object() || !j.contains("label")) bad_line(where, "no \"label\"");
    Line ex{{}, j["label"], where};
    if (j.contains("ids") && j["ids"].is_array()) {
      for (const auto& v : j["ids"]) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
          bad_line(where, fmt::format("id {} is not a token id", v.dump()));
        ex.ids.push_back(v.get<std::int64_t>());
      }
    } else if (j.contains("text") && j["text"].is_string()) {
      for (unsigned char c : j["text"].get<std::string>()) ex.ids.push_back(c);
    } else {
      bad_line(where, "neither \"text\" (a string) nor \"ids\" (a list of token ids)");
    }
    if (ex.ids.empty()) bad_line(where, "an empty example");
    out.push_back(std::move(ex));
  }
  if (out.empty()) throw DataError(fmt::format("{} holds no examples", path), "write one JSON object a line");
  return out;
}

// The class of each label: integers as they are, strings by their sorted order.
std::map<std::string, std::int64_t> class_names(const std::vector<Line>& all) {
  std::set<std::string> names;
  bool ints = false;
  for (const auto& e : all) {
    if (e.label.is_number_integer() && e.label.get<std::int64_t>() >= 0)
      ints = true;
    else if (e.label.is_string())
      names.insert(e.label.get<std::string>());
    else
      bad_line(e.where, fmt::format("label {} is neither a class number (>= 0) nor a name", e.label.dump()));
    if (ints && !names.empty()) bad_line(e.where, "labels mix numbers and names");
  }
  std::map<std::string, std::int64_t> out;
  for (const auto& n : names) out.emplace(n, static_cast<std::int64_t>(out.size()));
  return out;
}

class TextClassesSource final : public Source {
 public:
  TextClassesSource(torch::Tensor x, torch::Tensor y, std::string description)
      : x_(std::move(x)), y_(std::move(y)), description_(std::move(description)) {}
  std::int64_t size() const override { return x_.size(0); }
  data::Example get_batch(const torch::Tensor& idx) const override {
    auto i = idx.to(x_.device(), torch::kInt64);
    return {x_.index_select(0, i), y_.index_select(0, i)};
  }
  std::shared_ptr<const Source> to_device(const torch::Device& d) const override {
    return std::make_shared<TextClassesSource>(x_.to(d), y_.to(d), description_);
  }
  std::string describe() const override { return description_; }

 private:
  torch::Tensor x_, y_;
  std::string description_;
};

struct Tensors {
  torch::Tensor x, y;
  std::int64_t truncated = 0, max_id = 0;
};
Tensors to_tensors(const std::vector<Line>& ex, std::int64_t T, const std::map<std::string, std::int64_t>& names) {
  Tensors t{torch::zeros({static_cast<std::int64_t>(ex.size()), T}, torch::kInt64),
            torch::empty({static_cast<std::int64_t>(ex.size())}, torch::kInt64)};
  auto x = t.x.accessor<std::int64_t, 2>();
  auto y = t.y.accessor<std::int64_t, 1>();
  for (std::size_t i = 0; i < ex.size(); ++i) {
    const auto n = std::min<std::int64_t>(T, static_cast<std::int64_t>(ex[i].ids.size()));
    t.truncated += static_cast<std::int64_t>(ex[i].ids.size()) > T;
    for (std::int64_t k = 0; k < n; ++k) x[i][k] = ex[i].ids[k], t.max_id = std::max(t.max_id, ex[i].ids[k]);
    const auto& l = ex[i].label;
    y[i] = l.is_string() ? names.at(l.get<std::string>()) : l.get<std::int64_t>();
  }
  return t;
}

}  // namespace

Splits load_text_classes(const DataConfig& cfg, std::int64_t block_size) {
  if (block_size < 1) throw ConfigError(fmt::format("model.block_size = {} must be >= 1", block_size));
  auto train = read_jsonl(cfg.path);
  std::vector<Line> val;
  if (!cfg.val_path.empty()) {
    val = read_jsonl(cfg.val_path);
  } else {
    const auto n_val = static_cast<std::size_t>(std::llround(static_cast<double>(train.size()) * cfg.text_holdout));
    if (n_val < 1 || n_val >= train.size())
      throw DataError(fmt::format("{}: {} examples leave no val split with data.text_holdout = {}", cfg.path,
                                  train.size(), cfg.text_holdout),
                      "add examples, raise data.text_holdout, or set data.val_path");
    val.assign(train.end() - static_cast<std::ptrdiff_t>(n_val), train.end());
    train.resize(train.size() - n_val);
  }
  if (cfg.limit > 0 && static_cast<std::int64_t>(train.size()) > cfg.limit)
    train.resize(static_cast<std::size_t>(cfg.limit));
  std::vector<Line> all = train;
  all.insert(all.end(), val.begin(), val.end());
  const auto names = class_names(all);
  auto tr = to_tensors(train, block_size, names), va = to_tensors(val, block_size, names);
  const std::int64_t classes = names.empty()
                                   ? std::max(tr.y.max().item<std::int64_t>(), va.y.max().item<std::int64_t>()) + 1
                                   : static_cast<std::int64_t>(names.size());
  if (classes < 2)
    throw DataError(fmt::format("{}: every example has the same label", cfg.path),
                    "a classifier needs 2 classes or more");
  std::string labels;
  for (const auto& [name, k] : names) labels += fmt::format("{}{} = {}", labels.empty() ? "" : ", ", k, name);
  const std::string description =
      fmt::format("labelled text {}: {} train / {} val examples, {} classes{}, {} tokens each ({} truncated)", cfg.path,
                  train.size(), val.size(), classes, labels.empty() ? "" : " (" + labels + ")", block_size,
                  tr.truncated + va.truncated);
  Splits s;
  s.train = std::make_shared<TextClassesSource>(tr.x, tr.y, description);
  s.val = std::make_shared<TextClassesSource>(va.x, va.y, description);
  s.test = s.val;
  s.sample_shape = {block_size};
  s.classes = classes;
  s.token_vocab = std::max(tr.max_id, va.max_id) + 1;
  s.description = description;
  return s;
}

}  // namespace trainbox::data
