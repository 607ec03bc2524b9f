// trainbox data — what trainbox sees in a dataset, packing images into tar shards, and
// tokenizing text into token shards (cmd_data_text.cpp).
//
//   trainbox data ls data/pets [--json] [--files]        classes, labels, counts, skipped files
//   trainbox data ls 'shards/train-{000000..000003}.tar'  samples and labels per shard
//   trainbox data pack data/pets out/train-%06d.tar --shard-size 256M --seed 0 [--force]
//   trainbox data tokenize chats.jsonl out/ --tokenizer Qwen2.5-0.5B/     token shards + loss masks
//   trainbox data ls out/ [--block 2048]                                   documents, tokens, lengths
// No torch: these run where the data lives (docs/datasets.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cmd_data_text.h"
#include "commands.h"
#include "json_result.h"
#include "validators.h"
#include <trainbox/data/image/folder.h>
#include <trainbox/data/image/tar.h>
#include <trainbox/data/image/webdataset.h>
#include <trainbox/io/atomic_file.h>
#include <trainbox/io/sha256.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>
#include <trainbox/util/table.h>
#include <trainbox/util/unique_fd.h>

namespace trainbox::cli {

namespace {

using nlohmann::json;

struct DataOptions {
  std::string ls_path;
  bool json = false, files = false;
  std::string pack_root, pack_pattern;
  std::int64_t shard_size = 256ll << 20;
  std::uint64_t seed = 0;
  bool force = false;
  CLI::App* ls = nullptr;
  CLI::App* pack = nullptr;
  CLI::App* tokenize = nullptr;
  DataTokenizeOptions tok;
  TextLsOptions text_ls;
};

bool is_folder(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string skipped_text(const data::ImageFolderListing& l) {
  if (l.skipped_hidden + l.skipped_other == 0) return "nothing skipped";
  std::string names;
  for (const auto& n : l.skipped_examples) names += (names.empty() ? "" : ", ") + n;
  if (std::size_t(l.skipped_hidden + l.skipped_other) > l.skipped_examples.size()) names += ", …";
  return fmt::format("skipped {} hidden and {} other: {}", l.skipped_hidden, l.skipped_other, names);
}

int ls_folder(const DataOptions& o) {
  const data::ImageFolderListing l = data::list_image_folder(o.ls_path, /*setting=*/"");
  // One stat per file: 0-byte files, which a training run stops at (data.on_bad_image = "error").
  const data::NotImages bad = data::find_not_images(l, /*read_magic=*/false);
  if (o.json) {
    json j{{"kind", "imagefolder"}, {"root", l.root}, {"classes", l.classes}, {"images", l.size()}};
    json idx = json::object(), counts = json::object();
    for (std::size_t c = 0; c < l.classes.size(); ++c) {
      idx[l.classes[c]] = c;
      counts[l.classes[c]] = l.class_counts[c];
    }
    j["class_to_idx"] = idx;
    j["class_counts"] = counts;
    j["skipped"] = {{"hidden", l.skipped_hidden}, {"other", l.skipped_other}, {"examples", l.skipped_examples}};
    j["not_images"] = {{"empty", bad.empty}, {"examples", bad.examples}};
    // Non-UTF-8 file names become U+FFFD (write_result), never an exception from the JSON writer;
    // with every file listed (a million lines at ImageNet size), on one line.
    if (o.files) {
      json files = json::array();
      for (std::size_t i = 0; i < l.size(); ++i) files.push_back({std::string(l.relative_path(i)), l.label(i)});
      j["files"] = std::move(files);
    }
    print_json_result(j, o.files ? -1 : 2);
    return kExitOk;
  }
  std::cout << fmt::format("image folder {}: {} classes, {} images ({})\n", l.root, l.classes.size(), l.size(),
                           skipped_text(l));
  Table t({"label", "images", "class"}, {true, true, false});
  for (std::size_t c = 0; c < l.classes.size(); ++c)
    t.add_row({std::to_string(c), std::to_string(l.class_counts[c]), l.classes[c]});
  std::cout << t.render("  ");
  if (bad.count() > 0)
    std::cout << fmt::format(
        "  not images: {}; training stops at them (or skips them with data.on_bad_image = "
        "\"skip\"), and trainbox data pack refuses them\n",
        bad.text());
  if (o.files)
    for (std::size_t i = 0; i < l.size(); ++i) std::cout << l.label(i) << "\t" << l.relative_path(i) << "\n";
  return kExitOk;
}

int ls_shards(const DataOptions& o) {
  const std::vector<std::string> shards = data::expand_shards(o.ls_path);
  json jshards = json::array(), files = json::array();
  Table t({"shard", "samples", "image bytes", "labels"}, {false, true, true, true});
  std::int64_t total = 0;
  std::map<std::int64_t, std::int64_t> per_label;
  for (const std::string& shard : shards) {
    data::ShardReader r(shard);
    std::int64_t n = 0, lo = -1, hi = -1;
    std::uint64_t bytes = 0;
    data::WdsSample s;
    data::WdsIndexEntry e;
    // --files hashes each image, so it reads them; otherwise the index is enough.
    while (o.files ? r.next(s) : r.next_entry(e)) {
      const std::int64_t label = o.files ? s.label : e.label;
      bytes += o.files ? s.image.size() : e.image_size;
      ++n;
      ++per_label[label];
      lo = lo < 0 ? label : std::min(lo, label);
      hi = std::max(hi, label);
      if (o.files && o.json)
        files.push_back({{"shard", shard},
                         {"key", s.key},
                         {"ext", s.image_ext},
                         {"label", s.label},
                         {"bytes", s.image.size()},
                         {"sha256", io::sha256_hex(std::string(s.image.begin(), s.image.end()))}});
      else if (o.files)
        std::cout << fmt::format("{}\t{}\t{}.{}\t{}\n", s.label, shard, s.key, s.image_ext, s.image.size());
    }
    total += n;
    jshards.push_back({{"path", shard}, {"samples", n}, {"image_bytes", bytes}});
    t.add_row({shard, std::to_string(n), human_bytes(bytes), n ? fmt::format("{}..{}", lo, hi) : "-"});
  }
  if (o.json) {
    json labels = json::object();
    for (const auto& [label, n] : per_label) labels[std::to_string(label)] = n;
    json j{{"kind", "webdataset"}, {"shards", jshards}, {"samples", total}, {"label_counts", labels}};
    if (o.files) j["files"] = std::move(files);
    print_json_result(j, o.files ? -1 : 2);
    return kExitOk;
  }
  std::cout << fmt::format("{} shard{}: {} samples, {} distinct labels\n", shards.size(), shards.size() == 1 ? "" : "s",
                           total, per_label.size());
  std::cout << t.render("  ");
  return kExitOk;
}

// --- pack ---

// OUT_PATTERN's one %d / %0Nd: the text around it and the width.
struct ShardNaming {
  std::string before, after;
  int width = 0;
  std::string name(std::int64_t i) const { return before + fmt::format("{:0{}d}", i, width) + after; }
};

ShardNaming parse_naming(const std::string& pattern) {
  ShardNaming n;
  int conversions = 0;
  std::string* cur = &n.before;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      *cur += pattern[i];
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      *cur += '%';
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    int width = 0;
    while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && width < 100)
      width = width * 10 + (pattern[j++] - '0');
    if (j >= pattern.size() || pattern[j] != 'd' || width > 18 || (j > i + 1 && pattern[i + 1] != '0'))
      throw UsageError(fmt::format("shard name pattern '{}': only %d or %0Nd (N up to 18) may follow a '%'", pattern),
                       "pass e.g. out/train-%06d.tar (write %% for a literal %)");
    ++conversions;
    n.width = width;
    cur = &n.after;
    i = j;
  }
  if (conversions != 1)
    throw UsageError(
        fmt::format("shard name pattern '{}' has {} shard numbers; it needs exactly one %06d", pattern, conversions),
        "pass e.g. out/train-%06d.tar: shards are numbered from 0");
  return n;
}

std::string lower_ext(std::string_view rel) {
  std::string ext(rel.substr(rel.rfind('.') + 1));
  for (char& c : ext) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return ext;
}

// Shards of `naming` from number `from` on that exist now (a pack's shards are numbered from 0 without gaps).
std::vector<std::string> existing_shards(const ShardNaming& naming, std::int64_t from) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::int64_t i = from; std::filesystem::exists(std::filesystem::symlink_status(naming.name(i), ec)); ++i)
    out.push_back(naming.name(i));
  return out;
}

// "a, b and c", or "a, b, c and 4 more".
std::string some_names(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 3;
  const std::size_t shown = std::min(names.size(), kShown);
  std::string s;
  for (std::size_t i = 0; i < shown; ++i)
    s += (i == 0 ? "" : (i + 1 == shown && names.size() <= kShown ? " and " : ", ")) + names[i];
  return names.size() > kShown ? fmt::format("{} and {} more", s, names.size() - kShown) : s;
}

int pack(const DataOptions& o) {
  // --- every bad input is found before anything is written (as trainbox export) ---
  const ShardNaming naming = parse_naming(o.pack_pattern);
  const data::ImageFolderListing l = data::list_image_folder(o.pack_root, /*setting=*/"");
  // The decoder is the trainer's (this program links none): a cut JPEG passes here, but a 0-byte
  // or non-image file would stop training later under a renamed key, so it is refused now.
  if (const data::NotImages bad = data::find_not_images(l, /*read_magic=*/true); bad.count() > 0)
    throw DataError(fmt::format("image folder {}: {}", l.root, bad.text()),
                    "remove or replace them, then pack again (nothing was written)");
  io::check_output_path(naming.name(0), o.force);  // a folder; an existing shard without --force; no folder
  // Shards are read front to back, a few at a time; written in the folder's class-sorted order
  // each shard would hold one or two classes and a streaming shuffle buffer could not mix them.
  const std::vector<std::int64_t> order = data::shuffled_indices(std::int64_t(l.size()), o.seed);
  const int key_width = std::max<int>(6, int(std::to_string(l.size()).size()));
  std::unique_ptr<io::AtomicFile> file;
  std::optional<data::TarWriter> tar;
  std::vector<std::string> written;             // removed again if the pack fails half-way
  std::vector<std::pair<dev_t, ino_t>> inodes;  // each as this process renamed it into place
  std::uint64_t total = 0;
  auto close_shard = [&] {
    tar->finish();
    total += tar->bytes_written();
    file->commit();
    written.push_back(file->path());
    struct stat st {};
    inodes.emplace_back(::lstat(file->path().c_str(), &st) == 0 ? std::pair{st.st_dev, st.st_ino}
                                                                : std::pair<dev_t, ino_t>{});
    file.reset();
    tar.reset();
  };
  try {
    std::int64_t in_shard = 0;
    for (std::size_t pos = 0; pos < order.size(); ++pos) {
      const std::size_t i = static_cast<std::size_t>(order[pos]);
      std::vector<std::uint8_t> image;
      data::read_image_file(l.path(i), image);
      const std::string key = fmt::format("{:0{}d}", pos, key_width), label = std::to_string(l.label(i));
      // <key>.json records the source, so a later "bad image shard.tar: 000022" leads back to the
      // file (tar -xOf shard.tar 000022.json); readers ignore it (webdataset decodes it as JSON).
      const std::string source =
          json{{"path", std::string(l.relative_path(i))}}.dump(-1, ' ', false, json::error_handler_t::replace);
      const std::string image_name = key + "." + lower_ext(l.relative_path(i)), label_name = key + ".cls",
                        source_name = key + ".json";
      const std::uint64_t need = data::TarWriter::member_bytes(image_name.size(), image.size()) +
                                 data::TarWriter::member_bytes(label_name.size(), label.size()) +
                                 data::TarWriter::member_bytes(source_name.size(), source.size());
      if (tar && in_shard > 0 && tar->bytes_written() + need + 2 * data::kTarBlock > std::uint64_t(o.shard_size))
        close_shard();
      if (!tar) {
        const std::string name = naming.name(std::int64_t(written.size()));
        io::check_output_path(name, o.force);  // shard 0 was checked; a later one may exist on its own
        file = std::make_unique<io::AtomicFile>(name, "tar shard");
        tar.emplace([f = file.get()](const void* p, std::size_t n) { f->write(p, n); });
        in_shard = 0;
      }
      tar->add(image_name, image.data(), image.size());
      tar->add(label_name, label);
      tar->add(source_name, source);
      ++in_shard;
    }
    close_shard();
  } catch (...) {
    file.reset();  // its temp file goes
    std::error_code ec;
    // Only the shards this pack wrote, still the same files (docs/decisions.md, what trainbox deletes).
    for (std::size_t k = 0; k < written.size(); ++k) {
      struct stat st {};
      if (::lstat(written[k].c_str(), &st) == 0 && S_ISREG(st.st_mode) && std::pair{st.st_dev, st.st_ino} == inodes[k])
        std::filesystem::remove(written[k], ec);
    }
    throw;
  }
  const auto shards = std::int64_t(written.size());
  std::cout << fmt::format(
      "packed {} images of {} classes from {} into {} shard{} {}{{{:0{}d}..{:0{}d}}}{}: {} "
      "(seed {}; {}; each sample's source file in <key>.json)\n",
      l.size(), l.classes.size(), l.root, shards, shards == 1 ? "" : "s", naming.before, 0, naming.width, shards - 1,
      naming.width, naming.after, human_bytes(total), o.seed, skipped_text(l));
  if (const std::vector<std::string> left = existing_shards(naming, shards); !left.empty())
    std::cerr << fmt::format(
        "trainbox: note: {} shard{} left from an earlier pack, not part of this one: {}; remove {} before reading "
        "{}*\n",
        left.size(), left.size() == 1 ? " is" : "s are", some_names(left), left.size() == 1 ? "it" : "them",
        naming.before);
  return kExitOk;
}

}  // namespace

Runner add_data(CLI::App& app) {
  auto o = std::make_shared<DataOptions>();
  app.require_subcommand(1);
  o->ls = app.add_subcommand("ls", "What trainbox sees in an image folder or in tar shards: classes, labels, counts");
  o->ls->add_option("PATH", o->ls_path, "An image folder (ROOT/<class>/<image>) or a shard pattern (x-{0..3}.tar)")
      ->required();
  o->ls->add_flag("--json", o->json, "One JSON object (class_to_idx, counts, skipped files)");
  o->ls->add_flag("--files", o->files, "Also every sample, in trainbox's order (with its image's sha256 for shards)");
  o->ls->add_option("--tokenizer", o->text_ls.tokenizer, "For a .jsonl: tokenize it to show token counts and lengths");
  o->ls->add_option("--template", o->text_ls.template_file, "For a .jsonl with --tokenizer: the chat template file")
      ->check(CLI::ExistingFile);
  o->ls->add_option("--block", o->text_ls.block, "For text: count the documents longer than BLOCK tokens");
  o->tokenize = app.add_subcommand(
      "tokenize", "Tokenize text, prompt/completion and chat JSONL into token shards (docs/text-data.md)");
  o->tokenize
      ->add_option("PATHS", o->tok.paths,
                   "Input files or folders (.jsonl: one record per line; other files: one document each), then the "
                   "output folder")
      ->required()
      ->expected(2, -1);
  o->tokenize->add_option("--tokenizer", o->tok.tokenizer, "A Hugging Face model folder or tokenizer.json")->required();
  o->tokenize->add_option("--template", o->tok.template_file, "A Jinja chat template file instead of the tokenizer's")
      ->check(CLI::ExistingFile);
  o->tokenize
      ->add_option("--shard-tokens", o->tok.shard_tokens, "Tokens per shard (default 100M); a document is never split")
      ->transform(CLI::AsSizeValue(false));
  o->tokenize->add_option("--threads", o->tok.threads, "Tokenizer threads (default: every core)")
      ->check(CLI::Range(1, 1024));
  o->tokenize->add_option("--on-bad", o->tok.on_bad,
                          "A bad line: fail (exit 2, the default) or skip (counted; the first five shown)");
  o->tokenize->add_flag("--force", o->tok.force, "Replace an earlier data tokenize output in the folder");
  o->pack = app.add_subcommand("pack", "Pack an image folder into tar shards in the WebDataset layout");
  o->pack->add_option("ROOT", o->pack_root, "The image folder (ROOT/<class>/<image>)")->required();
  o->pack->add_option("OUT_PATTERN", o->pack_pattern, "Shard names with one %0Nd, e.g. out/train-%06d.tar")->required();
  o->pack->add_option("--shard-size", o->shard_size, "Start a new shard before one would pass SIZE (default 256M)")
      ->transform(size_value());
  o->pack->add_option("--seed", o->seed, "Seed of the sample order (default 0)");
  o->pack->add_flag("--force", o->force, "Replace existing shards of OUT_PATTERN");
  return [o]() -> int {
    if (o->pack->parsed()) return pack(*o);
    if (o->tokenize->parsed()) return data_tokenize(o->tok);
    if (is_text_data(o->ls_path)) {
      o->text_ls.path = o->ls_path;
      o->text_ls.json = o->json;
      return ls_text(o->text_ls);
    }
    if (is_folder(o->ls_path)) return ls_folder(*o);
    // A brace or "::" pattern names shards that expand_shards finds (or names as missing); a
    // plain name that is not there is most often a mistyped folder.
    const bool pattern = o->ls_path.find('{') != std::string::npos || o->ls_path.find("::") != std::string::npos;
    std::error_code ec;
    if (!pattern && !std::filesystem::exists(o->ls_path, ec))
      throw UsageError(
          fmt::format("{} does not exist (no such folder or file)", o->ls_path),
          "pass an image folder (ROOT/<class>/<image>) or tar shards, e.g. 'shards/train-{000000..000003}.tar'");
    return ls_shards(*o);
  };
}

}  // namespace trainbox::cli
