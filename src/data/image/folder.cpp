// Image folder listing (trainbox/data/image/folder.h): readdir with d_type, one stat only for
// links and file systems that leave d_type unknown, so 100k files list in tens of ms.
#include <trainbox/data/image/folder.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include <trainbox/util/errors.h>
#include <trainbox/util/unique_fd.h>

#include <trainbox/data/image/format.h>

namespace trainbox::data {

namespace {

constexpr const char* kLayoutHint =
    "an image folder is ROOT/<class>/<image>.jpg|.jpeg|.png, one subfolder per class (docs/datasets.md)";

struct DirCloser {
  void operator()(DIR* d) const noexcept { ::closedir(d); }
};
using DirPtr = std::unique_ptr<DIR, DirCloser>;

bool is_hidden(std::string_view name) { return !name.empty() && name[0] == '.'; }

char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

struct FolderId {
  dev_t dev;
  ino_t ino;
  bool operator==(const FolderId&) const = default;
};

enum class Kind { kFolder, kOther };

// Whether `name` in the open folder `d` is a folder, following links as os.walk(followlinks=True)
// and scandir's is_dir() do; a broken link is not a folder.
Kind kind_of(DIR* d, const dirent& e) {
  if (e.d_type == DT_DIR) return Kind::kFolder;
  if (e.d_type != DT_LNK && e.d_type != DT_UNKNOWN) return Kind::kOther;
  struct stat st;
  if (::fstatat(::dirfd(d), e.d_name, &st, 0) != 0) return Kind::kOther;
  return S_ISDIR(st.st_mode) ? Kind::kFolder : Kind::kOther;
}

DirPtr open_folder(const std::string& path) {
  DirPtr d(::opendir(path.c_str()));
  if (!d)
    throw DataError(fmt::format("cannot read image folder {}: {}", path, errno_text(errno)),
                    "check that it exists and that you may read it (ls -ld)");
  return d;
}

// One folder of a class as os.walk yields it: its ROOT-relative path and its image names.
struct WalkedFolder {
  std::string rel;
  std::vector<std::string> images;
};

class ClassWalker {
 public:
  ClassWalker(const std::string& root, ImageFolderListing& out) : root_(root), out_(out) {}

  // Every folder under ROOT/`cls`, in sorted(os.walk(...)) order.
  std::vector<WalkedFolder> walk(const std::string& cls) {
    folders_.clear();
    ancestors_.clear();
    visit(cls);
    std::sort(folders_.begin(), folders_.end(),
              [](const WalkedFolder& a, const WalkedFolder& b) { return a.rel < b.rel; });
    return std::move(folders_);
  }

 private:
  void skip(std::string rel, bool hidden) {
    ++(hidden ? out_.skipped_hidden : out_.skipped_other);
    if (out_.skipped_examples.size() < kMaxSkippedExamples) out_.skipped_examples.push_back(std::move(rel));
  }

  void visit(const std::string& rel) {
    DirPtr d = open_folder(root_ + "/" + rel);
    struct stat st;
    if (::fstat(::dirfd(d.get()), &st) != 0)
      throw DataError(fmt::format("cannot read image folder {}/{}: {}", root_, rel, errno_text(errno)));
    const FolderId id{st.st_dev, st.st_ino};
    // A link back to an ancestor would make os.walk recurse until the path is too long.
    if (std::find(ancestors_.begin(), ancestors_.end(), id) != ancestors_.end()) return;
    ancestors_.push_back(id);
    WalkedFolder f{rel, {}};
    std::vector<std::string> subfolders;
    errno = 0;
    while (const dirent* e = ::readdir(d.get())) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (kind_of(d.get(), *e) == Kind::kFolder) {
        if (is_hidden(name))
          skip(rel + "/" + std::string(name) + "/", true);
        else
          subfolders.push_back(rel + "/" + std::string(name));
      } else if (is_hidden(name)) {
        skip(rel + "/" + std::string(name), true);
      } else if (has_image_extension(name)) {
        f.images.emplace_back(name);
      } else {
        skip(rel + "/" + std::string(name), false);
      }
    }
    if (errno != 0) throw DataError(fmt::format("cannot read image folder {}/{}: {}", root_, rel, errno_text(errno)));
    d.reset();
    std::sort(f.images.begin(), f.images.end());
    folders_.push_back(std::move(f));
    for (const auto& s : subfolders) visit(s);
    ancestors_.pop_back();
  }

  const std::string& root_;
  ImageFolderListing& out_;
  std::vector<WalkedFolder> folders_;
  std::vector<FolderId> ancestors_;
};

// ROOT's class folders, sorted (find_classes); hidden folders and plain files are counted.
// "set data.path to X" / "pass X" (a command-line argument): how a fix names the place to change.
std::string point_at(std::string_view setting, std::string_view target) {
  return setting.empty() ? fmt::format("pass {}", target) : fmt::format("set {} to {}", setting, target);
}

std::vector<std::string> find_classes(const std::string& root, ImageFolderListing& out, std::string_view setting) {
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    std::string fix = point_at(setting, "an existing image folder");
    // The shipped configs name a val tree; a user who sets only data.path meets this one.
    if (setting == "data.val_path")
      fix += ", or set data.val_path = \"\" and data.val_fraction = 0.1 to hold out 10% of data.path";
    throw DataError(fmt::format("image folder {} does not exist: {}", root, errno_text(errno)),
                    fix + "; " + kLayoutHint);
  }
  if (!S_ISDIR(st.st_mode))
    throw DataError(fmt::format("image folder {} is not a folder", root),
                    point_at(setting, "the folder above the class folders") +
                        "; tar shards are data.dataset = \"webdataset\"; " + kLayoutHint);
  DirPtr d = open_folder(root);
  std::vector<std::string> classes;
  std::int64_t images_at_top = 0;
  errno = 0;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    const bool folder = kind_of(d.get(), *e) == Kind::kFolder;
    if (folder && !is_hidden(name)) {
      classes.emplace_back(name);
      continue;
    }
    if (!folder && !is_hidden(name) && has_image_extension(name)) ++images_at_top;
    ++(is_hidden(name) ? out.skipped_hidden : out.skipped_other);
    if (out.skipped_examples.size() < kMaxSkippedExamples)
      out.skipped_examples.push_back(std::string(name) + (folder ? "/" : ""));
  }
  if (errno != 0) throw DataError(fmt::format("cannot read image folder {}: {}", root, errno_text(errno)));
  if (classes.empty()) {
    // Images directly in it: most often one class's folder, one level too deep.
    std::string parent = std::filesystem::path(root).parent_path().string();
    if (parent.empty()) parent = ".";
    throw DataError(fmt::format("image folder {} has no class folders{}", root,
                                images_at_top ? fmt::format(" ({} images lie directly in it)", images_at_top) : ""),
                    images_at_top ? fmt::format("if {} is one class's folder, {} (the folder of the class folders); "
                                                "else move the images into one subfolder per class: {}",
                                                root, point_at(setting, "its parent " + parent), kLayoutHint)
                                  : std::string("move the images into one subfolder per class: ") + kLayoutHint);
  }
  std::sort(classes.begin(), classes.end());  // bytes: code points for UTF-8, as Python's sorted()
  return classes;
}

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias (rejection of the short last interval).
std::uint64_t below(std::uint64_t bound, std::uint64_t& state) {
  const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % bound);
  for (;;)
    if (const std::uint64_t r = splitmix64(state); r < limit) return r % bound;
}

}  // namespace

bool has_image_extension(std::string_view name) {
  for (std::string_view ext : kImageExtensions) {
    if (name.size() < ext.size()) continue;
    const std::string_view tail = name.substr(name.size() - ext.size());
    if (std::equal(tail.begin(), tail.end(), ext.begin(), [](char a, char b) { return ascii_lower(a) == b; }))
      return true;
  }
  return false;
}

std::string ImageFolderListing::path(std::size_t i) const {
  std::string p = root;
  p += '/';
  p += relative_path(i);
  return p;
}

void ImageFolderListing::add(std::string_view relative, std::int32_t label) {
  arena_.append(relative);
  offsets_.push_back(arena_.size());
  labels_.push_back(label);
}

ImageFolderListing list_image_folder(const std::string& root_in, std::string_view setting) {
  ImageFolderListing out;
  out.root = root_in;
  while (out.root.size() > 1 && out.root.back() == '/') out.root.pop_back();
  out.classes = find_classes(out.root, out, setting);
  out.class_counts.assign(out.classes.size(), 0);
  std::vector<std::string> empty;
  ClassWalker walker(out.root, out);
  for (std::size_t c = 0; c < out.classes.size(); ++c) {
    for (const WalkedFolder& f : walker.walk(out.classes[c]))
      for (const std::string& name : f.images) {
        out.add(f.rel + "/" + name, static_cast<std::int32_t>(c));
        ++out.class_counts[c];
      }
    if (out.class_counts[c] == 0) empty.push_back(out.classes[c]);
  }
  if (!empty.empty()) {
    std::string names;
    for (std::size_t i = 0; i < empty.size() && i < kMaxSkippedExamples; ++i)
      names += fmt::format("{}'{}'", i ? ", " : "", empty[i]);
    if (empty.size() > kMaxSkippedExamples) names += fmt::format(" and {} more", empty.size() - kMaxSkippedExamples);
    throw DataError(fmt::format("image folder {}: {} class folder{} without a .jpg/.jpeg/.png image: {}", out.root,
                                empty.size(), empty.size() == 1 ? "" : "s", names),
                    "put images in it or remove it (torchvision's ImageFolder refuses an empty class too); "
                    "`trainbox data ls ROOT` shows what is seen");
  }
  return out;
}

NotImages find_not_images(const ImageFolderListing& l, bool read_magic) {
  NotImages out;
  auto note = [&](std::int64_t& n, std::size_t i, std::string_view why) {
    ++n;
    if (out.examples.size() < kMaxSkippedExamples)
      out.examples.push_back(fmt::format("{} ({})", l.relative_path(i), why));
  };
  for (std::size_t i = 0; i < l.size(); ++i) {
    const std::string path = l.path(i);
    if (!read_magic) {
      struct stat st;
      if (::stat(path.c_str(), &st) == 0 && st.st_size == 0) note(out.empty, i, "0 bytes");
      continue;
    }
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      note(out.unknown, i, fmt::format("cannot read: {}", errno_text(errno)));
      continue;
    }
    std::uint8_t magic[8];
    ssize_t n;
    while ((n = ::read(fd.get(), magic, sizeof magic)) < 0 && errno == EINTR) {
    }
    if (n < 0)
      note(out.unknown, i, fmt::format("cannot read: {}", errno_text(errno)));
    else if (n == 0)
      note(out.empty, i, "0 bytes");
    else if (image::sniff(magic, static_cast<std::size_t>(n)) == image::ImageFormat::unknown)
      note(out.unknown, i, "not JPEG or PNG");
  }
  return out;
}

std::string NotImages::text() const {
  std::string s = fmt::format("{} file{} ", count(), count() == 1 ? "" : "s");
  if (empty && unknown)
    s += fmt::format("({} of 0 bytes, {} neither JPEG nor PNG)", empty, unknown);
  else
    s += empty ? "of 0 bytes" : "neither JPEG nor PNG";
  for (std::size_t i = 0; i < examples.size(); ++i) s += (i ? ", " : ": ") + examples[i];
  if (std::size_t(count()) > examples.size()) s += ", …";
  return s;
}

std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
  std::uint64_t state = seed;
  for (std::size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[below(i, state)]);
  return idx;
}

std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> split_indices(std::int64_t n, double val_fraction,
                                                                              std::uint64_t seed) {
  if (!(val_fraction > 0 && val_fraction < 1))
    throw UsageError(fmt::format("validation fraction {}: must be a number between 0 and 1 (exclusive)", val_fraction),
                     "pass e.g. 0.1 to hold out 10% of the images, or give a separate validation folder");
  if (n < 2)
    throw UsageError(
        fmt::format("cannot split {} sample{} into train and validation: need at least 2", n, n == 1 ? "" : "s"),
        "add images, or give a separate validation folder");
  const auto n_val = std::clamp<std::int64_t>(std::llround(double(n) * val_fraction), 1, n - 1);
  std::vector<std::int64_t> order = shuffled_indices(n, seed);
  std::vector<std::int64_t> val(order.begin(), order.begin() + n_val), train(order.begin() + n_val, order.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  return {std::move(train), std::move(val)};
}

void read_image_file(const std::string& path, std::vector<std::uint8_t>& out) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const char* const fix = "check its permissions, or remove it from the folder";
  if (!fd) throw DataError(fmt::format("cannot read image {}: {}", path, errno_text(errno)), fix);
  out.clear();
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd.get(), chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw DataError(fmt::format("cannot read image {}: {}", path, errno_text(errno)), fix);
    if (r == 0) return;
    out.insert(out.end(), chunk, chunk + r);
  }
}

}  // namespace trainbox::data
