// IDX validation (every corruption named with file and offset) and the batch loader's order.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "../temp_dir.h"
#include <trainbox/data/dataset.h>
#include <trainbox/data/loader.h>
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
