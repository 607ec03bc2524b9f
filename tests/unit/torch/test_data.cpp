// IDX validation (every corruption named with file and offset) and the batch loader's order.
#include <gtest/gtest.h>

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <torch/torch.h>

#include "temp_dir.h"
#include <trainbox/data/dataset.h>
#include <trainbox/data/loader.h>
#include <trainbox/data/sampler.h>
#include <trainbox/util/errors.h>

using namespace trainbox;
namespace fs = std::filesystem;

namespace {
using test::TempDir;

std::string be32(std::uint32_t v) { return {char(v >> 24), char(v >> 16), char(v >> 8), char(v)}; }
std::string idx_images(std::uint32_t n, std::uint32_t h, std::uint32_t w, std::uint32_t magic = 0x803) {
  std::string s = be32(magic) + be32(n) + be32(h) + be32(w);
  for (std::uint32_t i = 0; i < n * h * w; ++i) s += char(i % 251);
  return s;
}
std::string idx_labels(std::vector<int> labels) {
  std::string s = be32(0x801) + be32(std::uint32_t(labels.size()));
  for (int l : labels) s += char(l);
  return s;
}
void write(const std::string& path, const std::string& bytes, bool gz = false) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
}
std::string data_error(const std::string& img, const std::string& lab) {
  try {
    data::load_idx(img, lab);
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError";
  return {};
}
}  // namespace

TEST(Idx, LoadsRawAndGzip) {
  TempDir d;
  write(d.path + "/i", idx_images(3, 2, 2));
  write(d.path + "/l.gz", idx_labels({0, 9, 4}), true);
  auto ds = data::load_idx(d.path + "/i", d.path + "/l.gz");
  EXPECT_EQ(ds.images.sizes(), (std::vector<int64_t>{3, 1, 2, 2}));
  EXPECT_EQ(ds.labels[1].item<int64_t>(), 9);
  EXPECT_EQ(ds.images[2][0][1][1].item<std::uint8_t>(), 11);
}

TEST(Idx, BadMagic) {
  TempDir d;
  write(d.path + "/i", idx_images(3, 2, 2, 0x08030000));
  write(d.path + "/l", idx_labels({0, 1, 2}));
  auto e = data_error(d.path + "/i", d.path + "/l");
  EXPECT_NE(e.find("bad IDX magic 0x08030000 at offset 0, expected 0x00000803"), std::string::npos) << e;
}

TEST(Idx, TruncatedData) {
  TempDir d;
  std::string img = idx_images(3, 2, 2);
  write(d.path + "/i", img.substr(0, img.size() - 5));
  write(d.path + "/l", idx_labels({0, 1, 2}));
  auto e = data_error(d.path + "/i", d.path + "/l");
  EXPECT_NE(e.find("7 bytes of data at offset 16"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(Idx, ImageLabelCountMismatch) {
  TempDir d;
  write(d.path + "/i", idx_images(3, 2, 2));
  write(d.path + "/l", idx_labels({0, 1}));
  auto e = data_error(d.path + "/i", d.path + "/l");
  EXPECT_NE(e.find("has 3 images but"), std::string::npos) << e;
  EXPECT_NE(e.find("has 2 labels"), std::string::npos) << e;
}

TEST(Idx, LabelOutOfRange) {
  TempDir d;
  write(d.path + "/i", idx_images(3, 2, 2));
  write(d.path + "/l", idx_labels({0, 12, 2}));
  auto e = data_error(d.path + "/i", d.path + "/l");
  EXPECT_NE(e.find("label 12 at offset 9 is out of range 0..9"), std::string::npos) << e;
}

TEST(Idx, DimensionsWhoseProductWrapsAround64Bits) {
  // 256 x 2^28 x 2^28 = 2^64: 0 in 64-bit arithmetic, so a bare 16-byte header once "fit"
  // and torch was asked for a 2^64-byte tensor (found by tests/fuzz/fuzz_idx).
  TempDir d;
  write(d.path + "/i", be32(0x803) + be32(256) + be32(1u << 28) + be32(1u << 28));
  write(d.path + "/l", idx_labels(std::vector<int>(256, 0)));
  auto e = data_error(d.path + "/i", d.path + "/l");
  EXPECT_NE(e.find("0 bytes of data at offset 16, but the header's dimensions 256x268435456x268435456 need "
                   "at least 2^64 (file truncated)"),
            std::string::npos)
      << e;
}

TEST(Idx, CorruptGzipAndMissingFile) {
  TempDir d;
  write(d.path + "/l", idx_labels({0, 1, 2}));
  std::string gz;
  {
    write(d.path + "/full.gz", idx_images(50, 8, 8), true);
    std::ifstream in(d.path + "/full.gz", std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  write(d.path + "/cut.gz", gz.substr(0, gz.size() / 2));
  EXPECT_FALSE(data_error(d.path + "/cut.gz", d.path + "/l").empty());
  auto e = data_error(d.path + "/nope.gz", d.path + "/l");
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
}

TEST(Loader, EpochOrderDependsOnSeedAndEpochOnly) {
  auto ds = data::make_synthetic(100, {1, 2, 2}, 5, 1);
  data::Normalization norm{{0.f}, {1.f}};
  data::LoaderOptions o;
  o.batch_size = 8;
  o.seed = 7;
  auto collect = [&](std::int64_t epoch, std::int64_t first, std::int64_t prefetch) {
    o.prefetch = prefetch;
    data::BatchLoader l(ds, norm, o);
    l.start_epoch(epoch, first);
    std::vector<torch::Tensor> ys;
    while (auto b = l.next()) ys.push_back(b->y);
    return torch::cat(ys);
  };
  auto full = collect(3, 0, 2);
  EXPECT_EQ(full.size(0), 100);
  EXPECT_TRUE(full.equal(collect(3, 0, 0)));               // threaded == inline
  EXPECT_TRUE(full.slice(0, 40).equal(collect(3, 5, 2)));  // resume at batch 5 sees the same batches
  EXPECT_FALSE(full.equal(collect(4, 0, 2)));              // another epoch, another order
  EXPECT_EQ(std::get<0>(torch::sort(full)).equal(std::get<0>(torch::sort(ds.labels))), true);  // a permutation
}

TEST(Loader, NormalisesWithMeanAndStd) {
  data::Dataset ds{torch::full({4, 1, 2, 2}, 255, torch::kUInt8), torch::zeros({4}, torch::kInt64), 2};
  data::Normalization norm{{0.5f}, {0.25f}};
  data::LoaderOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  data::BatchLoader l(ds, norm, o);
  l.start_epoch(0);
  auto b = l.next();
  ASSERT_TRUE(b);
  EXPECT_NEAR(b->x.max().item<float>(), (1.0f - 0.5f) / 0.25f, 1e-5);
}

// data.shuffle_buffer: webdataset's order (streams in a seeded order, a bounded buffer).
namespace {
std::vector<std::int32_t> shard_ids(int shards, int per_shard) {
  std::vector<std::int32_t> g;
  for (int s = 0; s < shards; ++s) g.insert(g.end(), per_shard, s);
  return g;
}
}  // namespace

TEST(ShuffleBuffer, EveryEpochIsAPermutationThatStaysWithinTheBufferOfTheStream) {
  const auto groups = shard_ids(12, 40);  // 480 samples in 12 shards
  for (std::int64_t buffer : {1, 7, 64, 1000}) {
    const auto order = data::buffered_order(groups, buffer, 5);
    ASSERT_EQ(order.size(), groups.size());
    std::vector<std::int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<std::int64_t>(i));
    // The stream: shards in the order their first sample comes out, each in index order.
    std::vector<std::int32_t> shard_order;
    for (auto i : order)
      if (std::find(shard_order.begin(), shard_order.end(), groups[i]) == shard_order.end())
        shard_order.push_back(groups[i]);
    std::vector<std::int64_t> position(order.size());
    std::int64_t p = 0;
    for (auto s : shard_order)
      for (std::int64_t i = 0; i < 480; ++i)
        if (groups[i] == s) position[i] = p++;
    for (std::size_t out = 0; out < order.size(); ++out)
      ASSERT_LE(position[order[out]], static_cast<std::int64_t>(out) + buffer) << "buffer " << buffer << " at " << out;
    if (buffer == 1) {  // no mixing: the shards one after another, each in stored order
      for (std::size_t out = 0; out < order.size(); ++out)
        ASSERT_EQ(position[order[out]], static_cast<std::int64_t>(out));
    }
  }
}

TEST(ShuffleBuffer, AFunctionOfTheSeedThatMixesShards) {
  const auto groups = shard_ids(8, 50);
  EXPECT_EQ(data::buffered_order(groups, 100, 1), data::buffered_order(groups, 100, 1));
  EXPECT_NE(data::buffered_order(groups, 100, 1), data::buffered_order(groups, 100, 2));
  // With a buffer of 2 shards' worth, the first 100 samples come from at least 2 shards.
  const auto order = data::buffered_order(groups, 100, 3);
  std::set<std::int32_t> first;
  for (int i = 0; i < 100; ++i) first.insert(groups[order[i]]);
  EXPECT_GE(first.size(), 2u);
}

TEST(ShuffleBuffer, RanksTakeDisjointPositionsThatCoverTheEpoch) {
  const auto groups = shard_ids(6, 20);
  std::vector<std::int64_t> all;
  for (std::int64_t r = 0; r < 2; ++r) {
    data::DistributedSampler s(120, {.rank = r, .world = 2, .seed = 9, .shuffle_buffer = 16, .groups = groups});
    s.set_epoch(3);
    auto idx = s.indices();
    EXPECT_TRUE(torch::equal(idx, s.indices()));  // resume: the same order again
    for (std::int64_t i = 0; i < idx.size(0); ++i) all.push_back(idx[i].item<std::int64_t>());
  }
  std::sort(all.begin(), all.end());
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<std::int64_t>(i));
  EXPECT_THROW(data::DistributedSampler(100, {.shuffle_buffer = 4, .groups = groups}), UsageError);
}
