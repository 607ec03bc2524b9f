// trainbox/data/image/folder.h — an image folder listed exactly as torchvision's ImageFolder
// lists it (data.dataset = "imagefolder"), and the seeded train/val split used without
// data.val_path. Torch-free (trainbox_core): `trainbox data ls` prints what this sees.
//
// Layout: ROOT/<class>/…/<image>. The contract, torchvision 0.26's datasets/folder.py:
//   classes  the names of ROOT's subfolders (links to folders count), sorted by code point
//            (Python's sorted() on str; for UTF-8 names that is byte order: "10" < "9",
//            "B" < "a" < "é"); label = the index in that list (find_classes).
//   samples  for each class in that order, every folder under it (links followed), sorted
//            by its whole path string as sorted(os.walk(class_dir, followlinks=True)) does,
//            and in each folder its file names sorted (make_dataset). Nested folders count.
//   images   names ending in .jpg, .jpeg or .png in any case (the formats the decoder reads;
//            torchvision's other formats, .bmp .webp .tif …, are skipped and named).
// Where trainbox differs on purpose (docs/datasets.md): names starting with '.' — files
// (macOS's ._x.jpg) and folders (.ipynb_checkpoints, which torchvision makes a class) — are
// skipped and counted; files directly in ROOT are counted; a folder that cannot be read is
// a DataError (os.walk skips it silently); a link cycle is walked once.
//
// Errors (DataError, exit 2, one line naming the folder and a fix): ROOT missing or not a
// folder or unreadable, no class folder, a class folder without images, no images at all.
// Paths are stored relative to ROOT in one arena (1M files ~ 40 MB). Thread-safe after return.
//
//   ImageFolderListing l = list_image_folder("data/pets");
//   for (std::size_t i = 0; i < l.size(); ++i) load(l.path(i), l.label(i));
//   auto [train, val] = split_indices(l.size(), 0.1, 42);
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainbox::data {

// The image extensions listed (lowercase, with the dot); a name matches in any case.
inline constexpr std::string_view kImageExtensions[] = {".jpg", ".jpeg", ".png"};
// Whether `name` ends in one of kImageExtensions, in any ASCII case.
bool has_image_extension(std::string_view name);

struct ImageFolderListing {
  std::string root;                           // as given (no trailing '/')
  std::vector<std::string> classes;           // sorted; label = index
  std::vector<std::int64_t> class_counts;     // images per class
  std::int64_t skipped_hidden = 0;            // names starting with '.' (files and folders)
  std::int64_t skipped_other = 0;             // other extensions, and files directly in ROOT
  std::vector<std::string> skipped_examples;  // the first few skipped, ROOT-relative

  std::size_t size() const { return labels_.size(); }
  // Sample i's path relative to ROOT ("cat/x.jpg") and in full ("ROOT/cat/x.jpg").
  std::string_view relative_path(std::size_t i) const {
    return std::string_view(arena_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  std::string path(std::size_t i) const;
  std::int32_t label(std::size_t i) const { return labels_[i]; }
  const std::vector<std::int32_t>& labels() const { return labels_; }

  void add(std::string_view relative, std::int32_t label);  // used by the lister

 private:
  std::string arena_;                      // every relative path, back to back
  std::vector<std::uint64_t> offsets_{0};  // size() + 1
  std::vector<std::int32_t> labels_;
};

inline constexpr std::size_t kMaxSkippedExamples = 5;

// Lists `root` (see above); throws DataError. `setting` is what named root, for the fixes
// ("data.path", "data.val_path"; "" for a command-line argument: `trainbox data ls PATH`).
ImageFolderListing list_image_folder(const std::string& root, std::string_view setting = "data.path");

// Listed files that cannot be images, found without a decoder: 0 bytes (one stat each) and,
// with read_magic, files whose first bytes are neither JPEG's nor PNG's (one 8-byte read each).
// A file that passes may still fail to decode (a cut JPEG): only the trainer's decoder knows.
struct NotImages {
  std::int64_t empty = 0, unknown = 0;  // 0 bytes; other bytes than JPEG/PNG (read_magic only)
  std::vector<std::string> examples;    // the first kMaxSkippedExamples: "cat/x.jpg (0 bytes)"
  std::int64_t count() const { return empty + unknown; }
  std::string text() const;  // "2 (1 of 0 bytes, 1 not JPEG/PNG): cat/x.jpg (0 bytes), …"
};
NotImages find_not_images(const ImageFolderListing& listing, bool read_magic);

// The bytes of one image file into `out` (its capacity kept for the next): DataError naming
// the file when it cannot be opened or read.
void read_image_file(const std::string& path, std::vector<std::uint8_t>& out);

// 0..n-1 in a seeded random order: the same (n, seed) gives the same order on every machine
// and standard library (own Fisher–Yates over a splitmix64 stream, no std::shuffle).
std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed);

// A seeded split of 0..n-1 into (train, val), disjoint, each sorted ascending: val holds
// round(n * val_fraction) indices, at least 1 and at most n - 1 when n >= 2. UsageError unless
// 0 < val_fraction < 1 and n >= 2.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> split_indices(std::int64_t n, double val_fraction,
                                                                              std::uint64_t seed);

}  // namespace trainbox::data
