// trainbox/data/image/webdataset.h — image classification samples from tar shards in the
// WebDataset layout (data.dataset = "webdataset"), read as the `webdataset` 1.0 package reads
// them. Torch-free (trainbox_core); the torch-side Source decodes what ShardReader yields.
//
// Shard names: expand_shards("shards/train-{000000..000127}.tar") as braceexpand 0.1.7
// expands them (webdataset's expand_urls): numeric ranges, zero-padded to the wider bound when
// either bound has a leading zero, an optional step ({0..10..2}), letter ranges ({a..e}),
// comma lists ({train,val}), nesting, several braces, '\' escapes, and "::" between patterns.
//
// Grouping (webdataset.tariterators): a member "dir/abc.seg.jpg" has key "dir/abc" and
// extension "seg.jpg" (split_key, the regex ^((?:.*/|)[^.]+)[.]([^/]*)$; extensions compared
// lowercase); consecutive members with the same key form one sample; names that do not match
// and metadata (a first path component __like_this__) are skipped. A sample needs one image
// member (jpg, jpeg or png) and a label member `cls` (ASCII decimal, blanks allowed: what
// webdataset's `int(data)` decoder and ImageNet shards use); other members (json, txt …) are
// ignored. A missing or second image, a missing, non-numeric or negative label, or a repeated
// extension is a DataError naming the shard and the key (exit 2).
//
//   for (const std::string& shard : expand_shards(cfg.path)) {
//     ShardReader r(shard);
//     WdsSample s;
//     while (r.next(s)) decode(s.image, s.image_ext, s.label);
//   }
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <trainbox/data/image/tar.h>

namespace trainbox::data {

// Every name `pattern` expands to, in order. UsageError (one line naming the pattern) for
// unbalanced braces, a number over 18 digits, or more than kMaxShards names.
inline constexpr std::size_t kMaxShards = 1'000'000;
std::vector<std::string> expand_shards(std::string_view pattern);

// webdataset's base_plus_ext: (key, extension as written), or nullopt when the name has none.
std::optional<std::pair<std::string, std::string>> split_key(std::string_view name);
// webdataset's metadata rule: the first path component is __NAME__ (skipped when reading).
bool is_meta_member(std::string_view name);

inline constexpr std::string_view kLabelExtension = "cls";

struct WdsSample {
  std::string key;
  std::string image_ext;  // lowercase: "jpg", "jpeg" or "png"
  std::vector<std::uint8_t> image;
  std::int64_t label = -1;
  std::uint64_t image_offset = 0;  // the image's bytes in the shard
};

// One sample's place in its shard, for random access (TarReader::read of {offset, size}).
struct WdsIndexEntry {
  std::string key;
  std::string image_ext;
  std::uint64_t image_offset = 0;
  std::uint64_t image_size = 0;
  std::int64_t label = -1;
};

// Streams one shard's samples in order; reads each image once, labels are a few bytes.
class ShardReader {
 public:
  explicit ShardReader(std::string path);
  // The next sample (image bytes read into out.image); false at the end of the shard.
  bool next(WdsSample& out);
  // As next(), without reading the image (out.image is left empty).
  bool next_entry(WdsIndexEntry& out);
  const std::string& path() const { return tar_.path(); }

 private:
  bool next_member(TarMember& m, std::string& key, std::string& ext);

  TarReader tar_;
  std::optional<TarMember> lookahead_;
  std::string look_key_, look_ext_;
  std::vector<std::uint8_t> label_buf_;
};

// Every sample of one shard.
std::vector<WdsIndexEntry> index_shard(const std::string& path);

// The label in a `cls` member's bytes: nullopt unless it is a decimal integer (blanks around
// allowed) from 0 to 2^31 - 1.
std::optional<std::int64_t> parse_label(std::string_view bytes);

}  // namespace trainbox::data
