// trainbox data — what trainbox sees in an image dataset, and packing a folder into tar shards.
//
//   trainbox data ls data/pets [--json] [--files]        classes, labels, counts, skipped files
//   trainbox data ls 'shards/train-{000000..000003}.tar'  samples and labels per shard
//   trainbox data pack data/pets out/train-%06d.tar --shard-size 256M --seed 0
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
  CLI::App* ls = nullptr;
  CLI::App* pack = nullptr;
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
  const data::ImageFolderListing l = data::list_image_folder(o.ls_path);
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

std::vector<std::uint8_t> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0)
    throw DataError(fmt::format("cannot read image {}: {}", path, errno_text(errno)),
                    "check its permissions, or remove it from the folder");
  std::vector<std::uint8_t> out;
  out.reserve(static_cast<std::size_t>(st.st_size));
  std::uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw DataError(fmt::format("cannot read image {}: {}", path, errno_text(errno)));
    if (r == 0) break;
    out.insert(out.end(), buf, buf + r);
  }
  return out;
}

std::string lower_ext(std::string_view rel) {
  std::string ext(rel.substr(rel.rfind('.') + 1));
  for (char& c : ext) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return ext;
}

int pack(const DataOptions& o) {
  const ShardNaming naming = parse_naming(o.pack_pattern);
  const data::ImageFolderListing l = data::list_image_folder(o.pack_root);
  // The output folder is made once the input is known to be good (a bad ROOT leaves nothing).
  std::error_code ec;
  if (const auto dir = std::filesystem::path(naming.name(0)).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir, ec);
  if (std::string why = io::why_not_writable(naming.name(0)); !why.empty())
    throw UsageError(fmt::format("cannot write shard {}: {}", naming.name(0), why), "pick another OUT_PATTERN");
  // Shards are read front to back, a few at a time; written in the folder's class-sorted order
  // each shard would hold one or two classes and a streaming shuffle buffer could not mix them.
  const std::vector<std::int64_t> order = data::shuffled_indices(std::int64_t(l.size()), o.seed);
  const int key_width = std::max<int>(6, int(std::to_string(l.size()).size()));
  std::unique_ptr<io::AtomicFile> file;
  std::optional<data::TarWriter> tar;
  std::int64_t shards = 0, in_shard = 0;
  std::uint64_t total = 0;
  auto close_shard = [&] {
    tar->finish();
    total += tar->bytes_written();
    file->commit();
    file.reset();
    tar.reset();
  };
  for (std::size_t pos = 0; pos < order.size(); ++pos) {
    const std::size_t i = static_cast<std::size_t>(order[pos]);
    const std::vector<std::uint8_t> image = read_file(l.path(i));
    const std::string key = fmt::format("{:0{}d}", pos, key_width), label = std::to_string(l.label(i));
    const std::string image_name = key + "." + lower_ext(l.relative_path(i)), label_name = key + ".cls";
    const std::uint64_t need = data::TarWriter::member_bytes(image_name.size(), image.size()) +
                               data::TarWriter::member_bytes(label_name.size(), label.size());
    if (tar && in_shard > 0 && tar->bytes_written() + need + 2 * data::kTarBlock > std::uint64_t(o.shard_size))
      close_shard();
    if (!tar) {
      file = std::make_unique<io::AtomicFile>(naming.name(shards++), "tar shard");
      tar.emplace([f = file.get()](const void* p, std::size_t n) { f->write(p, n); });
      in_shard = 0;
    }
    tar->add(image_name, image.data(), image.size());
    tar->add(label_name, label);
    ++in_shard;
  }
  close_shard();
  std::cout << fmt::format(
      "packed {} images of {} classes from {} into {} shard{} {}{{{:0{}d}..{:0{}d}}}{}: {} "
      "(seed {}; {})\n",
      l.size(), l.classes.size(), l.root, shards, shards == 1 ? "" : "s", naming.before, 0, naming.width, shards - 1,
      naming.width, naming.after, human_bytes(total), o.seed, skipped_text(l));
  if (struct stat st; ::stat(naming.name(shards).c_str(), &st) == 0)
    std::cerr << fmt::format(
        "trainbox: note: {} is left from an earlier pack and is not part of this one; remove it "
        "before reading {}*\n",
        naming.name(shards), naming.before);
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
  o->pack = app.add_subcommand("pack", "Pack an image folder into tar shards in the WebDataset layout");
  o->pack->add_option("ROOT", o->pack_root, "The image folder (ROOT/<class>/<image>)")->required();
  o->pack->add_option("OUT_PATTERN", o->pack_pattern, "Shard names with one %0Nd, e.g. out/train-%06d.tar")->required();
  o->pack->add_option("--shard-size", o->shard_size, "Start a new shard before one would pass SIZE (default 256M)")
      ->transform(size_value());
  o->pack->add_option("--seed", o->seed, "Seed of the sample order (default 0)");
  return [o]() -> int {
    if (o->pack->parsed()) return pack(*o);
    return is_folder(o->ls_path) ? ls_folder(*o) : ls_shards(*o);
  };
}

}  // namespace trainbox::cli
