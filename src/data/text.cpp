#include <trainbox/data/text.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

#include <trainbox/data/formats.h>

namespace trainbox::data {
namespace fs = std::filesystem;

namespace {

// A text dataset's tokens, before splitting.
struct Corpus {
  torch::Tensor tokens;  // 1-D on the CPU: uint8 (bytes) or int32 (.bin ids)
  torch::Tensor mask;    // undefined, or uint8 per token (the .mask sidecar: kMaskTarget, kMaskDocStart)
  std::int64_t vocab = 0;
  std::string kind;   // "byte-level, vocab 256"
  std::string where;  // the path, and for a directory what was read from it
};

// One split: the windows of `block` tokens over `tokens` (this split's part of the stream).
class TextSource final : public Source {
 public:
  TextSource(torch::Tensor tokens, torch::Tensor mask, std::int64_t block, std::int64_t windows, std::int64_t vocab,
             std::shared_ptr<const std::string> description, bool packing = false)
      : tokens_(std::move(tokens)),
        mask_(std::move(mask)),
        block_(block),
        windows_(windows),
        vocab_(vocab),
        packing_(packing),
        description_(std::move(description)) {
    // [windows, T+1] rows that overlap by one token: row i = tokens[i*T : i*T+T+1]. A view,
    // so a batch is one index_select of B rows — no per-sample loop, no index tensor.
    rows_ = tokens_.narrow(0, 0, windows_ * block_ + 1).unfold(0, block_ + 1, block_);
    if (mask_.defined()) mask_rows_ = mask_.narrow(0, 0, windows_ * block_ + 1).unfold(0, block_ + 1, block_);
  }
  std::int64_t size() const override { return windows_; }
  Example get_batch(const torch::Tensor& indices) const override {
    const auto idx = indices.to(rows_.device(), torch::kInt64);
    auto w = rows_.index_select(0, idx);  // [B, T+1], compact dtype
    auto y = w.narrow(1, 1, block_).to(torch::kInt64).contiguous();
    auto x = w.narrow(1, 0, block_).to(torch::kInt64).contiguous();
    if (!mask_rows_.defined()) return {std::move(x), std::move(y)};
    const auto m = mask_rows_.index_select(0, idx);  // [B, T+1]
    // A target the mask does not mark (a prompt, a user turn) is HF's label -100: the loss skips it.
    y.masked_fill_(m.narrow(1, 1, block_).bitwise_and(kMaskTarget).eq(0), kIgnoreIndex);
    if (!packing_) return {std::move(x), std::move(y)};
    // Packing: a target that starts a document is not predicted from the one before it, and the
    // model restarts positions and attention at each input that starts one (the window's first
    // token starts one: a document cut by the window goes on from position 0).
    // The input is models/packing.h's [B, 2, T]: the ids, then 1 where a document starts.
    const auto starts = m.bitwise_and(kMaskDocStart).ne(0);
    y.masked_fill_(starts.narrow(1, 1, block_), kIgnoreIndex);
    return {torch::stack({x, starts.narrow(1, 0, block_).to(torch::kInt64)}, 1), std::move(y)};
  }
  std::shared_ptr<const Source> to_device(const torch::Device& device) const override {
    return std::make_shared<TextSource>(tokens_.to(device), mask_.defined() ? mask_.to(device) : mask_, block_,
                                        windows_, vocab_, description_, packing_);
  }
  std::string describe() const override { return *description_; }
  const torch::Tensor& tokens() const { return tokens_; }
  std::int64_t vocab() const { return vocab_; }

 private:
  torch::Tensor tokens_, mask_, rows_, mask_rows_;
  std::int64_t block_, windows_, vocab_;
  bool packing_;
  std::shared_ptr<const std::string> description_;  // shared by the splits and their device copies
};

// --- reading ---

torch::Tensor read_bytes(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec)
    throw DataError(fmt::format("cannot read {}: {}", path.string(), ec.message()),
                    "check data.path and the file's permissions");
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw DataError(fmt::format("cannot open {}: {}", path.string(), errno_text(errno)),
                    "check data.path and the file's permissions");
  auto t = torch::empty({static_cast<std::int64_t>(size)}, torch::kUInt8);
  if (size > 0 && !f.read(reinterpret_cast<char*>(t.data_ptr<std::uint8_t>()), static_cast<std::streamsize>(size)))
    throw DataError(fmt::format("{}: read {} of {} bytes: {}", path.string(), f.gcount(), size, errno_text(errno)),
                    "the file changed or the disk failed while reading; try again, or copy the file");
  return t;
}

std::string_view view(const torch::Tensor& bytes) {
  return {reinterpret_cast<const char*>(bytes.data_ptr<std::uint8_t>()), static_cast<std::size_t>(bytes.numel())};
}

// --- the three inputs (their bytes checked in formats.cpp: torch-free, fuzzed in tests/fuzz) ---

Corpus load_token_file(const std::string& path, const torch::Tensor& bytes) {
  const TokenFileHeader h = parse_token_file(view(bytes), path);
  Corpus c;
  c.tokens = torch::empty({h.count}, torch::kInt32);
  c.vocab = decode_token_ids(view(bytes), h, c.tokens.data_ptr<std::int32_t>());
  c.kind = fmt::format("{} .bin, vocab {}", h.width == 4 ? "uint32" : "uint16", c.vocab);
  c.where = path;
  // NAME.mask beside NAME.bin: the loss mask and document starts (trainbox/data/token_file.h)
  const fs::path mask_path = fs::path(path).replace_extension(".mask");
  std::error_code ec;
  if (fs::path(path).extension() == ".bin" && fs::exists(mask_path, ec)) {
    auto m = read_bytes(mask_path);
    const std::size_t at = parse_mask_file(view(m), mask_path.string(), h.count);
    c.mask = m.narrow(0, static_cast<std::int64_t>(at), h.count).clone();
    const auto targets = c.mask.bitwise_and(kMaskTarget).ne(0).sum().item<std::int64_t>();
    c.kind += fmt::format(", loss on {:.1f}% of tokens ({})", h.count ? 100.0 * double(targets) / double(h.count) : 0.0,
                          mask_path.filename().string());
  }
  return c;
}

// A folder written by `trainbox data tokenize`: the shards its manifest.json lists, in order.
Corpus load_shard_dir(const std::string& dir) {
  const auto text = read_bytes(fs::path(dir) / "manifest.json");
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(view(text));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}/manifest.json is not JSON: {}", dir, e.what()),
                    "re-run trainbox data tokenize into the folder");
  }
  if (!m.value("complete", false))
    throw DataError(
        fmt::format("{}: trainbox data tokenize has not finished writing it (manifest.json: complete = false)", dir),
        "run the same trainbox data tokenize command again: it resumes where it stopped");
  std::vector<torch::Tensor> tokens, masks;
  std::int64_t vocab = 0;
  bool wide = false;
  for (const auto& sh : m.at("shards")) {
    Corpus c = load_token_file((fs::path(dir) / sh.at("file").get<std::string>()).string(),
                               read_bytes(fs::path(dir) / sh.at("file").get<std::string>()));
    vocab = std::max(vocab, c.vocab);
    wide = wide || c.kind.rfind("uint32", 0) == 0;
    if (!c.mask.defined()) c.mask = torch::full({c.tokens.numel()}, kMaskTarget, torch::kUInt8);
    tokens.push_back(c.tokens);
    masks.push_back(c.mask);
  }
  if (tokens.empty())
    throw DataError(fmt::format("{}: manifest.json lists no shards", dir),
                    "re-run trainbox data tokenize with input that has text");
  Corpus c;
  c.tokens = torch::cat(tokens);
  c.mask = torch::cat(masks);
  c.vocab = std::max<std::int64_t>(vocab, m.value("vocab_size", std::int64_t{0}));
  const auto targets = c.mask.bitwise_and(kMaskTarget).ne(0).sum().item<std::int64_t>();
  c.kind = fmt::format("{} shards of {} .bin, vocab {}, loss on {:.1f}% of tokens", tokens.size(),
                       wide ? "uint32" : "uint16", c.vocab,
                       100.0 * double(targets) / double(std::max<std::int64_t>(1, c.tokens.numel())));
  c.where = dir;
  return c;
}

Corpus load_text_file(const std::string& path, torch::Tensor bytes) {
  check_text(view(bytes), path);
  check_not_json(view(bytes), path);  // valid UTF-8, but not prose: refused, not trained on as bytes
  return Corpus{std::move(bytes), {}, 256, "byte-level, vocab 256", path};
}

Corpus load_text_dir(const std::string& dir) {
  std::vector<fs::path> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(it->path());
  if (ec)
    throw DataError(fmt::format("cannot list data.path = \"{}\": {}", dir, ec.message()),
                    "check data.path and the directory's permissions");
  std::sort(entries.begin(), entries.end());
  std::vector<torch::Tensor> parts;
  std::vector<std::string> skipped;
  std::set<fs::path> seen;  // canonical paths: fortunes' name.u8 links point at name
  for (const auto& e : entries) {
    const std::string name = e.filename().string();
    if (name.empty() || name[0] == '.' || !fs::is_regular_file(e, ec)) continue;
    if (!seen.insert(fs::canonical(e, ec)).second) continue;
    auto bytes = read_bytes(e);
    if (find_non_text(view(bytes)).offset >= 0) {
      skipped.push_back(name);
      continue;
    }
    check_not_json(view(bytes), e.string());  // a JSON Lines file among the texts: named, not trained on
    parts.push_back(std::move(bytes));
  }
  if (parts.empty())
    throw DataError(fmt::format("data.path = \"{}\" is a directory without a UTF-8 text file ({})", dir,
                                skipped.empty() ? std::string("no files in it")
                                                : fmt::format("files that are not text: {}, e.g. {}", skipped.size(),
                                                              skipped.front())),
                    "point data.path at a text file, a directory of text files, or one .bin token file (Debian's "
                    "fortunes package: /usr/share/games/fortunes)");
  std::string what = fmt::format("{} ({} text files", dir, parts.size());
  if (!skipped.empty()) {
    what += fmt::format("; {} not text, skipped: {}", skipped.size(), skipped[0]);
    for (std::size_t i = 1; i < std::min<std::size_t>(3, skipped.size()); ++i) what += ", " + skipped[i];
    if (skipped.size() > 3) what += ", …";
  }
  what += ")";
  return Corpus{torch::cat(parts), {}, 256, "byte-level, vocab 256", what};
}

Corpus load_corpus(const std::string& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!fs::exists(st))
    throw DataError(
        fmt::format("data.path = \"{}\" does not exist", path),
        "for configs/text_gpt.toml install Debian's fortunes package (apt-get install fortunes); otherwise set "
        "data.path to a UTF-8 text file, a directory of them, or a .bin token file");
  if (fs::is_directory(st))
    return fs::exists(fs::path(path) / "manifest.json", ec) ? load_shard_dir(path) : load_text_dir(path);
  auto bytes = read_bytes(path);
  const bool bin_name = fs::path(path).extension() == ".bin";
  return bin_name || has_token_file_magic(view(bytes)) ? load_token_file(path, bytes)
                                                       : load_text_file(path, std::move(bytes));
}

}  // namespace

Splits load_text(const DataConfig& cfg, std::int64_t block_size) {
  if (block_size < 1) throw ConfigError(fmt::format("model.block_size = {} must be >= 1", block_size));
  if (!(cfg.text_holdout > 0 && cfg.text_holdout < 1))
    throw ConfigError(fmt::format("data.text_holdout = {} must be > 0 and < 1", cfg.text_holdout),
                      "the text dataset's val split is the last data.text_holdout of the tokens (e.g. 0.1)");
  if (cfg.val_fraction > 0)
    throw ConfigError(fmt::format("data.val_fraction = {} does not apply to data.dataset = \"text\"", cfg.val_fraction),
                      "the text dataset holds out the tail of the token stream: set data.text_holdout instead");
  Corpus c = load_corpus(cfg.path);
  const std::int64_t n = c.tokens.numel(), T = block_size;
  const std::int64_t n_val = std::llround(static_cast<double>(n) * cfg.text_holdout), n_train = n - n_val;
  // Both splits need a whole window: T inputs and the one token after them.
  const std::int64_t need =
      static_cast<std::int64_t>(std::ceil((T + 1) / std::min(cfg.text_holdout, 1 - cfg.text_holdout)));
  if (n == 0)
    throw DataError(fmt::format("{} is empty: 0 tokens; block_size {} with data.text_holdout {} needs about {} tokens "
                                "(each split needs block_size + 1 = {})",
                                c.where, T, cfg.text_holdout, need, T + 1),
                    "point data.path at a longer text");
  if (n_train < T + 1)
    throw DataError(
        fmt::format("{}: {} tokens leave the train split {} (the first {:g}%), fewer than block_size + 1 = {} "
                    "for one window of block_size {}",
                    c.where, n, n_train, 100 * (1 - cfg.text_holdout), T + 1, T),
        fmt::format("use a longer text (about {} tokens), or a smaller model.block_size or data.text_holdout", need));
  if (n_val < T + 1)
    throw DataError(fmt::format("{}: {} tokens leave the val split {} (the last {:g}%), fewer than block_size + 1 = {} "
                                "for one window of block_size {}",
                                c.where, n, n_val, 100 * cfg.text_holdout, T + 1, T),
                    fmt::format("use a longer text (about {} tokens), a smaller model.block_size, or a larger "
                                "data.text_holdout (at most 0.5)",
                                need));
  std::int64_t train_windows = (n_train - 1) / T;
  const std::int64_t val_windows = (n_val - 1) / T;
  if (cfg.limit > 0) train_windows = std::min(train_windows, cfg.limit);

  std::string packed;
  if (cfg.packing) {
    const auto starts = c.mask.defined() ? c.mask.bitwise_and(kMaskDocStart).ne(0) : torch::Tensor();
    const std::int64_t docs = starts.defined() ? starts.sum().item<std::int64_t>() : 0;
    if (docs == 0)
      throw ConfigError(
          fmt::format("data.packing = true needs the documents' starts, and {} has none ({})", c.where,
                      c.mask.defined() ? "its .mask sidecar marks no document start" : "no .mask sidecar beside it"),
          "tokenize the text with `trainbox data tokenize IN… OUT --tokenizer T` (its shards record where each "
          "document starts), or set data.packing = false");
    // What the windows' targets train: the marked ones, less each document's first token.
    const auto trained =
        c.mask.narrow(0, 1, n - 1).bitwise_and(kMaskTarget).ne(0).logical_and(starts.narrow(0, 1, n - 1).logical_not());
    packed = fmt::format(
        "; packed: {} documents, {:.1f} per window of {} (no padding: {:.1f}% of the target slots "
        "train, the rest are prompts, masked turns and document starts)",
        docs, static_cast<double>(docs) * T / static_cast<double>(n), T,
        100.0 * trained.sum().item<double>() / static_cast<double>(std::max<std::int64_t>(1, n - 1)));
  }
  auto description =
      std::make_shared<const std::string>(fmt::format("text {}: {} tokens ({}): {} train / {} val windows of {}{}",
                                                      c.where, n, c.kind, train_windows, val_windows, T, packed));
  Splits s;
  const auto part = [&](std::int64_t from, std::int64_t len) {
    return c.mask.defined() ? c.mask.narrow(0, from, len) : torch::Tensor();
  };
  s.train = std::make_shared<TextSource>(c.tokens.narrow(0, 0, n_train), part(0, n_train), T, train_windows, c.vocab,
                                         description, cfg.packing);
  s.val = std::make_shared<TextSource>(c.tokens.narrow(0, n_train, n_val), part(n_train, n_val), T, val_windows,
                                       c.vocab, description, cfg.packing);
  s.test = s.val;  // the held-out tail is both (text.h)
  s.sample_shape = {T};
  s.classes = c.vocab;
  s.description = *description;
  return s;
}

double unigram_entropy(const torch::Tensor& tokens, std::int64_t vocab) {
  if (tokens.numel() == 0) return 0.0;
  auto counts = torch::bincount(tokens.flatten(), {}, vocab).to(torch::kFloat64);
  auto p = counts / static_cast<double>(tokens.numel());
  return -torch::xlogy(p, p).sum().item<double>();  // xlogy(0, 0) = 0: unseen ids add nothing
}

std::optional<double> unigram_entropy(const Source& split) {
  const auto* t = dynamic_cast<const TextSource*>(&split);
  if (!t) return std::nullopt;
  return unigram_entropy(t->tokens(), t->vocab());
}

}  // namespace trainbox::data
