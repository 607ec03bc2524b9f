// trainbox data tokenize / data ls for text — a user's text, prompt/completion pairs or chat
// transcripts become token shards the trainer reads (docs/text-data.md). No torch.
//
//   trainbox data tokenize chats.jsonl docs/ out/ --tokenizer Qwen2.5-0.5B/ [--shard-tokens 100M]
//   trainbox data ls out/            documents, tokens, length statistics, loss share
//   trainbox data ls chats.jsonl --tokenizer Qwen2.5-0.5B/ --block 2048
//
// Shards: out/shard_000000.bin (llm.c's layout: uint16 ids, or uint32 in llm.c's Llama 3 layout
// when the vocabulary passes 65,536) with out/shard_000000.mask beside it (the loss mask and
// document starts), and out/manifest.json. The manifest is rewritten (atomically) after each
// shard with the input position the next shard starts at, so a run that stops — killed, a
// full disk, a bad line with --on-bad fail — is resumed by the same command, and gives the same
// bytes as a run that never stopped.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cmd_data_text.h"
#include <trainbox/data/formats.h>
#include <trainbox/data/token_file.h>
#include <trainbox/io/atomic_file.h>
#include <trainbox/io/sha256.h>
#include <trainbox/text/chat.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::cli {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr int kManifestVersion = 1;

// A file data tokenize writes in its output folder: manifest.json, shard_NNNNNN.bin / .mask, or
// one of them with io::AtomicFile's ".tmp.PID" while it is written. Only these are ever removed.
bool is_ours(const fs::directory_entry& e, bool tmp_only) {
  std::error_code ec;
  if (!e.is_regular_file(ec) || e.is_symlink(ec)) return false;
  std::string n = e.path().filename().string();
  const std::size_t tmp = n.find(".tmp.");
  const bool is_tmp = tmp != std::string::npos && tmp + 5 < n.size() &&
                      std::all_of(n.begin() + static_cast<std::ptrdiff_t>(tmp + 5), n.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
  if (is_tmp)
    n.resize(tmp);
  else if (tmp_only)
    return false;
  const bool shard = n.size() > 12 && n.rfind("shard_", 0) == 0 &&
                     std::all_of(n.begin() + 6, n.begin() + 12, [](char c) { return c >= '0' && c <= '9'; }) &&
                     (n.substr(12) == ".bin" || n.substr(12) == ".mask");
  return n == "manifest.json" || shard;
}

bool is_jsonl(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".jsonl" || e == ".ndjson";
}

// The input files, in order: each IN, a folder's regular files sorted by name (no dot files).
std::vector<fs::path> input_files(const std::vector<std::string>& ins) {
  std::vector<fs::path> out;
  for (const auto& in : ins) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> here;
      for (const auto& e : fs::directory_iterator(in, ec))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') here.push_back(e.path());
      std::sort(here.begin(), here.end());
      if (here.empty())
        throw UsageError(in + " is a folder without files", "give text or .jsonl files, or folders of them");
      out.insert(out.end(), here.begin(), here.end());
    } else if (fs::is_regular_file(in, ec)) {
      out.emplace_back(in);
    } else {
      throw UsageError(in + " does not exist (no such file or folder)",
                       "give text or .jsonl files, or folders of them");
    }
  }
  return out;
}

// What the output depends on: a manifest that differs in any of it cannot be resumed.
json settings_of(const std::vector<fs::path>& files, const text::Tokenizer& tok, const std::string& template_source,
                 std::int64_t shard_tokens) {
  json inputs = json::array();
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    const auto mtime = fs::last_write_time(f, ec).time_since_epoch().count();
    inputs.push_back({{"path", fs::absolute(f).lexically_normal().string()}, {"bytes", size}, {"mtime", mtime}});
  }
  const auto tj = read_file(tok.source());
  return {{"inputs", inputs},
          {"tokenizer", tok.source()},
          {"tokenizer_sha256", io::sha256_hex(tj.value_or(""))},
          {"template_sha256", io::sha256_hex(template_source)},
          {"shard_tokens", shard_tokens}};
}

struct Unit {  // one document to tokenize
  std::size_t file = 0;
  std::int64_t line = 0;          // 1-based for JSONL, 0 for a whole text file
  std::uint64_t next_offset = 0;  // the input position after it (bytes into the file)
  std::string text;
  text::Example ex;
  std::string error;  // a bad record: "FILE:LINE: what"
};

class Writer {
 public:
  Writer(fs::path out, int width, json manifest)
      : out_(std::move(out)), width_(width), manifest_(std::move(manifest)) {}

  void add(const text::Example& ex) {
    for (std::size_t k = 0; k < ex.ids.size(); ++k) {
      const auto id = static_cast<std::uint32_t>(ex.ids[k]);
      if (width_ == 2 && id > 0xffff)  // cannot happen: the width is chosen from the vocabulary
        throw DataError(fmt::format("token id {} does not fit the uint16 shard layout", id),
                        "report this: the width comes from the vocabulary");
      for (int b = 0; b < width_; ++b) ids_.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
      masks_.push_back(static_cast<char>((ex.mask[k] ? data::kMaskTarget : 0) | (k == 0 ? data::kMaskDocStart : 0)));
    }
    docs_ += 1;
    targets_ += std::count(ex.mask.begin(), ex.mask.end(), 1);
  }
  std::int64_t tokens() const { return static_cast<std::int64_t>(masks_.size()); }

  // Writes the shard and the manifest that records it and where the next one starts.
  void flush(std::size_t next_file, std::uint64_t next_offset, const json& counts, bool complete) {
    if (tokens() > 0) {
      const std::string name = fmt::format("shard_{:06d}", manifest_["shards"].size());
      io::AtomicFile bin((out_ / (name + ".bin")).string(), "token shard");
      const std::string h = data::token_file_header(tokens(), width_);
      bin.write(h.data(), h.size());
      bin.write(ids_.data(), ids_.size());
      io::AtomicFile mask((out_ / (name + ".mask")).string(), "mask shard");
      const std::string mh = data::mask_file_header(tokens());
      mask.write(mh.data(), mh.size());
      mask.write(masks_.data(), masks_.size());
      bin.commit();
      mask.commit();
      manifest_["shards"].push_back(
          {{"file", name + ".bin"}, {"tokens", tokens()}, {"documents", docs_}, {"targets", targets_}});
      ids_.clear();
      masks_.clear();
      docs_ = targets_ = 0;
    }
    manifest_["resume"] = {{"file", next_file}, {"offset", next_offset}};
    manifest_["counts"] = counts;
    manifest_["complete"] = complete;
    io::AtomicFile m((out_ / "manifest.json").string(), "manifest");
    const std::string text = manifest_.dump(1) + "\n";
    m.write(text.data(), text.size());
    m.commit();
  }
  const json& manifest() const { return manifest_; }

 private:
  fs::path out_;
  int width_;
  json manifest_;
  std::string ids_, masks_;
  std::int64_t docs_ = 0, targets_ = 0;
};

// Reads the next batch of documents from the inputs, from (file, offset).
class Reader {
 public:
  Reader(const std::vector<fs::path>& files, std::size_t file, std::uint64_t offset)
      : files_(files), file_(file), offset_(offset) {}

  bool next(std::vector<Unit>& batch, std::size_t max_units, std::size_t max_bytes) {
    batch.clear();
    std::size_t bytes = 0;
    while (file_ < files_.size() && batch.size() < max_units && bytes < max_bytes) {
      const fs::path& f = files_[file_];
      if (!is_jsonl(f)) {  // a whole text file is one document
        Unit u;
        u.file = file_;
        const auto t = read_file(f.string());
        if (!t) throw DataError("cannot read " + f.string() + ": " + errno_text(errno), "check the file's permissions");
        u.text = *t;
        bytes += u.text.size();
        u.next_offset = 0;
        batch.push_back(std::move(u));
        ++file_;
        offset_ = 0;
        batch.back().file = file_ - 1;
        continue;
      }
      if (!in_.is_open()) {
        in_.open(f, std::ios::binary);
        if (!in_)
          throw DataError("cannot open " + f.string() + ": " + errno_text(errno), "check the file's permissions");
        in_.seekg(static_cast<std::streamoff>(offset_));
        line_ = count_lines(f, offset_);
      }
      std::string l;
      if (!std::getline(in_, l)) {
        in_.close();
        in_.clear();
        ++file_;
        offset_ = 0;
        continue;
      }
      offset_ += l.size() + 1;
      ++line_;
      if (!l.empty() && l.back() == '\r') l.pop_back();
      if (l.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines are not records
      Unit u;
      u.file = file_;
      u.line = line_;
      u.text = std::move(l);
      bytes += u.text.size();
      batch.push_back(std::move(u));
      batch.back().next_offset = offset_;
    }
    return !batch.empty();
  }

 private:
  static std::int64_t count_lines(const fs::path& f, std::uint64_t upto) {
    if (upto == 0) return 0;
    std::ifstream in(f, std::ios::binary);
    std::int64_t n = 0;
    std::uint64_t seen = 0;
    char buf[1 << 16];
    while (seen < upto) {
      in.read(buf, static_cast<std::streamsize>(std::min<std::uint64_t>(sizeof buf, upto - seen)));
      const auto got = static_cast<std::size_t>(in.gcount());
      if (got == 0) break;
      n += std::count(buf, buf + got, '\n');
      seen += got;
    }
    return n;
  }

  const std::vector<fs::path>& files_;
  std::size_t file_;
  std::uint64_t offset_;
  std::ifstream in_;
  std::int64_t line_ = 0;
};

void tokenize_units(std::vector<Unit>& units, const text::Formatter& fmt, const std::vector<fs::path>& files,
                    int threads) {
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t k; (k = next.fetch_add(1)) < units.size();) {
      Unit& u = units[k];
      const std::string where =
          u.line > 0 ? fmt::format("{}:{}", files[u.file].string(), u.line) : files[u.file].string();
      try {
        if (u.line == 0) {
          u.ex = fmt.text(u.text);
        } else {
          ojson rec;
          try {
            rec = ojson::parse(u.text);
          } catch (const nlohmann::json::exception&) {
            throw DataError("not JSON: " + u.text.substr(0, 60) + (u.text.size() > 60 ? "…" : ""),
                            "write one JSON object per line");
          }
          u.ex = fmt.record(rec);
        }
        u.ex.text.clear();
      } catch (const Error& e) {
        u.error = where + ": " + e.what();
      }
      u.text.clear();
      u.text.shrink_to_fit();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

std::string rate(double x) {
  return x >= 1e6   ? fmt::format("{:.2f} M", x / 1e6)
         : x >= 1e3 ? fmt::format("{:.1f} k", x / 1e3)
                    : fmt::format("{:.0f} ", x);
}

void print_summary(const json& manifest, const json& counts, const fs::path& out, int width, std::int64_t vocab,
                   double s, std::int64_t run_tokens, int threads) {
  const auto tokens = counts["tokens"].get<std::int64_t>();
  std::cout << fmt::format(
      "wrote {} shard{} to {}: {} documents, {} tokens (uint{} ids, vocab {}), loss on {:.1f}% of them; "
      "{:.1f} s, {}tokens/s on {} thread{}\n",
      manifest["shards"].size(), manifest["shards"].size() == 1 ? "" : "s", out.string(),
      counts["documents"].get<std::int64_t>(), tokens, width * 8, vocab,
      tokens ? 100.0 * counts["targets"].get<double>() / double(tokens) : 0.0, s,
      rate(double(run_tokens) / std::max(s, 1e-9)), threads, threads == 1 ? "" : "s");
  if (counts["skipped"].get<std::int64_t>() > 0) {
    std::cout << fmt::format("skipped {} bad line{} (--on-bad skip); the first:\n",
                             counts["skipped"].get<std::int64_t>(),
                             counts["skipped"].get<std::int64_t>() == 1 ? "" : "s");
    for (const auto& e : counts["skipped_first"]) std::cout << "  " << e.get<std::string>() << "\n";
  }
}

// The output folder: new, or a manifest with the same settings (resume from its position), or
// --force over an earlier output. False: the folder is complete already (nothing to do).
bool prepare_output(const fs::path& out, const json& settings, bool force, json& manifest, json& counts,
                    std::size_t& start_file, std::uint64_t& start_offset) {
  std::error_code ec;
  const fs::path mpath = out / "manifest.json";
  if (fs::exists(mpath, ec) && !force) {
    json old;
    try {
      old = json::parse(read_file(mpath.string()).value_or(""));
    } catch (const json::exception&) {
      throw DataError(mpath.string() + " is not JSON", "remove the folder, or pass --force to write it anew");
    }
    if (old.value("settings", json()) != settings)
      throw UsageError(
          fmt::format("{} holds shards made from other inputs or another tokenizer (its manifest.json differs: {})",
                      out.string(), old.value("settings", json()).value("tokenizer", std::string("?"))),
          "the inputs changed since (or you named another tokenizer): pass --force to write the folder anew, or write "
          "to another folder");
    if (old.value("complete", false)) {
      std::cerr << fmt::format("trainbox: {} is complete already ({} shards); nothing to do (--force writes it anew)\n",
                               out.string(), old["shards"].size());
      return false;
    }
    manifest = old;
    start_file = old["resume"].value("file", std::size_t{0});
    start_offset = old["resume"].value("offset", std::uint64_t{0});
    counts = old.value("counts", counts);
    // temp files of a run that was killed while writing (io::AtomicFile's NAME.tmp.PID)
    for (const auto& e : fs::directory_iterator(out, ec))
      if (is_ours(e, /*tmp_only=*/true)) fs::remove(e.path(), ec);
    // shards past the manifest's (a run that stopped between writing a shard and its manifest)
    for (std::size_t k = manifest["shards"].size();; ++k) {
      const fs::path b = out / fmt::format("shard_{:06d}.bin", k), m = out / fmt::format("shard_{:06d}.mask", k);
      if (!fs::exists(fs::symlink_status(b, ec)) && !fs::exists(fs::symlink_status(m, ec))) break;
      for (const auto& f : {b, m})  // only what is_ours() would take: a regular file, never a link
        if (is_ours(fs::directory_entry(f, ec), /*tmp_only=*/false)) fs::remove(f, ec);
    }
    std::cerr << fmt::format("trainbox: resuming {} after {} shards ({} documents)\n", out.string(),
                             manifest["shards"].size(), counts["documents"].get<std::int64_t>());
  } else if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec))
      throw UsageError(out.string() + " exists and is not a folder", "name a folder for the shards");
    bool ours_only = true, empty = true;
    for (const auto& e : fs::directory_iterator(out, ec)) {
      empty = false;
      ours_only = ours_only && is_ours(e, /*tmp_only=*/false);
    }
    if (!empty && !(force && ours_only))
      throw UsageError(
          out.string() + (force ? " holds files that are not shards of trainbox data tokenize; nothing was removed"
                                : " is not empty"),
          force ? "write to an empty or new folder"
                : "write to an empty or new folder (--force replaces an earlier data tokenize output)");
    for (const auto& e : fs::directory_iterator(out, ec))
      if (is_ours(e, /*tmp_only=*/false)) fs::remove(e.path(), ec);
  } else {
    fs::create_directories(out, ec);
    if (ec) throw SystemError("cannot create " + out.string() + ": " + ec.message(), "check the path and permissions");
  }

  return true;
}

}  // namespace

int data_tokenize(const DataTokenizeOptions& o) {
  if (o.paths.size() < 2)
    throw UsageError("data tokenize needs at least one input and the output folder",
                     "trainbox data tokenize IN… OUT --tokenizer PATH");
  if (o.shard_tokens < 1024)
    throw UsageError(fmt::format("--shard-tokens {} is below 1024", o.shard_tokens), "use e.g. 100M");
  if (o.on_bad != "fail" && o.on_bad != "skip")
    throw UsageError("--on-bad " + o.on_bad + " is not fail or skip",
                     "fail: stop at the first bad line (exit 2); skip: count and go on");
  const fs::path out = o.paths.back();
  const std::vector<std::string> ins(o.paths.begin(), o.paths.end() - 1);
  const std::vector<fs::path> files = input_files(ins);
  const text::Tokenizer tok = text::Tokenizer::load(o.tokenizer);
  std::string template_source;
  if (!o.template_file.empty()) {
    const auto t = read_file(o.template_file);
    if (!t || t->empty())
      throw UsageError("cannot read the template " + o.template_file + " (or it is empty)",
                       "give a Jinja chat template file");
    template_source = *t;
  }
  const text::Formatter fmt(tok, template_source, o.template_file);
  const int width = tok.vocab_size() > 65536 ? 4 : 2;
  const json settings =
      settings_of(files, tok, template_source.empty() ? tok.chat_template() : template_source, o.shard_tokens);

  // The output folder: new, or a manifest with the same settings (resume), or --force.
  std::error_code ec;
  json manifest = {{"version", kManifestVersion}, {"settings", settings},    {"vocab_size", tok.vocab_size()},
                   {"id_bytes", width},           {"shards", json::array()}, {"complete", false}};
  std::size_t start_file = 0;
  std::uint64_t start_offset = 0;
  json counts = {{"documents", 0}, {"tokens", 0}, {"targets", 0}, {"skipped", 0}, {"skipped_first", json::array()}};
  if (!prepare_output(out, settings, o.force, manifest, counts, start_file, start_offset)) return kExitOk;

  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  Writer writer(out, width, manifest);
  writer.flush(start_file, start_offset, counts, false);  // the folder is ours from here on: resumable
  Reader reader(files, start_file, start_offset);
  std::vector<Unit> batch;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::int64_t run_tokens = 0;
  std::size_t pos_file = start_file;
  std::uint64_t pos_offset = start_offset;
  while (reader.next(batch, 4096, 16u << 20)) {
    tokenize_units(batch, fmt, files, threads);
    for (Unit& u : batch) {
      if (!u.error.empty()) {
        if (o.on_bad == "fail")  // the shards written so far stay, and the manifest says where they end
          throw DataError(
              u.error,
              "fix or remove the line and run again with --force, or pass --on-bad skip to count and skip bad lines");
        counts["skipped"] = counts["skipped"].get<std::int64_t>() + 1;
        if (counts["skipped_first"].size() < 5) counts["skipped_first"].push_back(u.error);
      } else if (!u.ex.ids.empty()) {
        writer.add(u.ex);
        counts["documents"] = counts["documents"].get<std::int64_t>() + 1;
        counts["tokens"] = counts["tokens"].get<std::int64_t>() + static_cast<std::int64_t>(u.ex.ids.size());
        counts["targets"] = counts["targets"].get<std::int64_t>() + std::count(u.ex.mask.begin(), u.ex.mask.end(), 1);
        run_tokens += static_cast<std::int64_t>(u.ex.ids.size());
      }
      pos_file = u.line == 0 ? u.file + 1 : u.file;
      pos_offset = u.next_offset;
      if (writer.tokens() >= o.shard_tokens) writer.flush(pos_file, pos_offset, counts, false);
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report > std::chrono::seconds(tty ? 1 : 10)) {
      last_report = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      std::cerr << fmt::format("{}tokenize: {}tokens, {} documents, {}tokens/s, file {}/{}{}", tty ? "\r" : "",
                               rate(counts["tokens"].get<double>()), counts["documents"].get<std::int64_t>(),
                               rate(double(run_tokens) / s), std::min(pos_file + 1, files.size()), files.size(),
                               tty ? "   " : "\n");
    }
  }
  writer.flush(files.size(), 0, counts, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::cerr << "\n";
  print_summary(writer.manifest(), counts, out, width, tok.vocab_size(), s, run_tokens, threads);
  return kExitOk;
}

namespace {

struct Lengths {
  std::vector<std::int64_t> docs;  // tokens per document
  std::int64_t tokens = 0, targets = 0;
  void add_mask(std::string_view mask) {
    for (const char c : mask) {
      const auto m = static_cast<std::uint8_t>(c);
      if ((m & data::kMaskDocStart) || docs.empty()) docs.push_back(0);
      docs.back() += 1;
      tokens += 1;
      targets += (m & data::kMaskTarget) ? 1 : 0;
    }
  }
};

json length_stats(Lengths l, std::int64_t block) {
  json j = {{"documents", l.docs.size()}, {"tokens", l.tokens}, {"targets", l.targets}};
  if (l.docs.empty()) return j;
  std::sort(l.docs.begin(), l.docs.end());
  const auto at = [&](double q) { return l.docs[static_cast<std::size_t>(q * double(l.docs.size() - 1))]; };
  j["length"] = {{"min", l.docs.front()},
                 {"median", at(0.5)},
                 {"mean", double(l.tokens) / double(l.docs.size())},
                 {"p99", at(0.99)},
                 {"max", l.docs.back()}};
  if (block > 0)
    j["longer_than_block"] = std::count_if(l.docs.begin(), l.docs.end(), [&](std::int64_t n) { return n > block; });
  return j;
}

void print_stats(const std::string& what, const json& j, std::int64_t block) {
  std::cout << what << "\n";
  std::cout << fmt::format(
      "  documents {}, tokens {}, loss on {} ({:.1f}%)\n", j["documents"].get<std::int64_t>(),
      j["tokens"].get<std::int64_t>(), j["targets"].get<std::int64_t>(),
      j["tokens"].get<std::int64_t>() ? 100.0 * j["targets"].get<double>() / j["tokens"].get<double>() : 0.0);
  if (j.contains("length"))
    std::cout << fmt::format("  tokens per document: min {}, median {}, mean {:.1f}, p99 {}, max {}\n",
                             j["length"]["min"].get<std::int64_t>(), j["length"]["median"].get<std::int64_t>(),
                             j["length"]["mean"].get<double>(), j["length"]["p99"].get<std::int64_t>(),
                             j["length"]["max"].get<std::int64_t>());
  if (j.contains("longer_than_block"))
    std::cout << fmt::format("  longer than the block ({} tokens): {} documents (training cuts them into windows)\n",
                             block, j["longer_than_block"].get<std::int64_t>());
}

std::string read_or_throw(const fs::path& p) {
  const auto t = read_file(p.string());
  if (!t) throw DataError("cannot read " + p.string() + ": " + errno_text(errno), "check the path and permissions");
  return *t;
}

// data ls on a data tokenize folder or one .bin (with its .mask when there is one).
void ls_token_files(const TextLsOptions& o, json& out, std::string& what) {
  const fs::path p(o.path);
  std::error_code ec;
  std::vector<fs::path> bins;
  json manifest;
  if (fs::is_directory(p, ec)) {
    try {
      manifest = json::parse(read_or_throw(p / "manifest.json"));
    } catch (const json::exception& e) {
      throw DataError((p / "manifest.json").string() + " is not JSON: " + e.what(), "re-run trainbox data tokenize");
    }
    for (const auto& sh : manifest.value("shards", json::array())) bins.push_back(p / sh.at("file").get<std::string>());
  } else {
    bins.push_back(p);
  }
  Lengths l;
  std::int64_t vocab = 0;
  int width = 2;
  for (const auto& b : bins) {
    const std::string bytes = read_or_throw(b);
    const auto h = data::parse_token_file(bytes, b.string());
    std::vector<std::int32_t> ids(static_cast<std::size_t>(h.count));
    vocab = std::max(vocab, data::decode_token_ids(bytes, h, ids.data()));
    width = h.width;
    const fs::path mp = fs::path(b).replace_extension(".mask");
    if (fs::exists(mp, ec)) {
      const std::string m = read_or_throw(mp);
      const std::size_t at = data::parse_mask_file(m, mp.string(), h.count);
      l.add_mask(std::string_view(m).substr(at));
    } else {
      l.add_mask(std::string(static_cast<std::size_t>(h.count), static_cast<char>(data::kMaskTarget)));
    }
  }
  out = length_stats(l, o.block);
  out["shards"] = bins.size();
  out["largest_id"] = vocab - 1;
  out["id_bytes"] = width;
  if (!manifest.is_null()) {
    out["complete"] = manifest.value("complete", false);
    out["tokenizer"] = manifest["settings"].value("tokenizer", std::string());
    out["skipped"] = manifest["counts"].value("skipped", 0);
  }
  what = fmt::format(
      "{}: {} shard{} of uint{} ids (largest id {}){}", o.path, bins.size(), bins.size() == 1 ? "" : "s", width * 8,
      vocab - 1,
      manifest.is_null()
          ? std::string()
          : fmt::format(
                ", tokenizer {}{}", out["tokenizer"].get<std::string>(),
                out["complete"].get<bool>() ? "" : " — INCOMPLETE: re-run the same data tokenize to finish it"));
}

// data ls on a .jsonl: the forms, the bad lines, and with a tokenizer the lengths.
void ls_jsonl(const TextLsOptions& o, json& out, std::string& what) {
  const fs::path p(o.path);
  // JSONL: the forms, the bad lines, and with a tokenizer the lengths
  std::unique_ptr<text::Formatter> fmtr;
  if (!o.tokenizer.empty()) {
    std::string src;
    if (!o.template_file.empty()) src = read_or_throw(o.template_file);
    fmtr = std::make_unique<text::Formatter>(text::Tokenizer::load(o.tokenizer), src, o.template_file);
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) throw DataError("cannot open " + o.path + ": " + errno_text(errno), "check the path");
  std::string line;
  std::int64_t n = 0, forms[3] = {0, 0, 0}, bad = 0;
  json bad_first = json::array();
  Lengths l;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      ojson rec;
      try {
        rec = ojson::parse(line);
      } catch (const nlohmann::json::exception&) {
        throw DataError("not JSON", "write one JSON object per line");
      }
      const auto form = text::Formatter::form_of(rec);
      if (fmtr) {
        const auto ex = fmtr->record(rec);
        std::string mask(ex.mask.size(), '\0');
        for (std::size_t k = 0; k < mask.size(); ++k)
          mask[k] = static_cast<char>((ex.mask[k] ? data::kMaskTarget : 0) | (k == 0 ? data::kMaskDocStart : 0));
        l.add_mask(mask);
      }
      forms[static_cast<int>(form)] += 1;
    } catch (const Error& e) {
      ++bad;
      if (bad_first.size() < 5) bad_first.push_back(fmt::format("{}:{}: {}", o.path, n, e.what()));
    }
  }
  out = fmtr ? length_stats(l, o.block) : json::object();
  out["records"] = {{"text", forms[0]}, {"prompt_completion", forms[1]}, {"messages", forms[2]}};
  out["bad_lines"] = bad;
  out["bad_first"] = bad_first;
  what = fmt::format("{}: {} text, {} prompt/completion, {} messages records; {} bad line{}", o.path, forms[0],
                     forms[1], forms[2], bad, bad == 1 ? "" : "s");
  if (!fmtr) what += " (--tokenizer PATH adds token counts and lengths)";
}

}  // namespace

bool is_text_data(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return fs::exists(p / "manifest.json", ec);
  return fs::is_regular_file(p, ec) && (p.extension() == ".bin" || is_jsonl(p));
}

int ls_text(const TextLsOptions& o) {
  const fs::path p(o.path);
  std::error_code ec;
  json out;
  std::string what;
  if (fs::is_directory(p, ec) || p.extension() == ".bin")
    ls_token_files(o, out, what);
  else
    ls_jsonl(o, out, what);
  if (o.json) {
    std::cout << out.dump(1) << "\n";
    return kExitOk;
  }
  if (out.contains("documents"))
    print_stats(what, out, o.block);
  else
    std::cout << what << "\n";
  if (out.contains("bad_first"))
    for (const auto& b : out["bad_first"]) std::cout << "  " << b.get<std::string>() << "\n";
  return kExitOk;
}

}  // namespace trainbox::cli
