// Tar shards (trainbox/data/image/tar.h, webdataset.h): brace expansion and key splitting as
// braceexpand 0.1.7 and webdataset 1.0.2 do them (expected values printed by those packages),
// our writer read back by our reader, and every corruption a DataError naming the shard and
// offset. tests/integration/image_folder_vs_torchvision.py reads shards Python wrote.
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "temp_dir.h"
#include <trainbox/data/image/tar.h>
#include <trainbox/data/image/webdataset.h>
#include <trainbox/util/errors.h>

namespace trainbox::data {
namespace {

using V = std::vector<std::string>;

TEST(ExpandShards, AsBraceexpand) {
  EXPECT_EQ(expand_shards("s-{000000..000003}.tar"),
            (V{"s-000000.tar", "s-000001.tar", "s-000002.tar", "s-000003.tar"}));
  EXPECT_EQ(expand_shards("{a,b}-{1..2}"), (V{"a-1", "a-2", "b-1", "b-2"}));
  EXPECT_EQ(expand_shards("x{0..10..5}"), (V{"x0", "x5", "x10"}));
  EXPECT_EQ(expand_shards("{9..11}"), (V{"9", "10", "11"}));
  EXPECT_EQ(expand_shards("{-02..1}"), (V{"-02", "-01", "000", "001"}));
  EXPECT_EQ(expand_shards("{3..1}"), (V{"3", "2", "1"}));
  EXPECT_EQ(expand_shards("{Z..b}"), (V{"Z", "a", "b"}));
  EXPECT_EQ(expand_shards("{abc}"), (V{"{abc}"}));
  EXPECT_EQ(expand_shards("a\\{0..1\\}"), (V{"a{0..1}"}));
  EXPECT_EQ(expand_shards("{0..4..-2}"), (V{"0", "2", "4"}));
  EXPECT_EQ(expand_shards("{a,{b,c}}d"), (V{"ad", "bd", "cd"}));
  EXPECT_EQ(expand_shards("{,x}"), (V{"", "x"}));
  EXPECT_EQ(expand_shards("{01..3}"), (V{"01", "02", "03"}));
  EXPECT_EQ(expand_shards("plain.tar"), (V{"plain.tar"}));
  EXPECT_EQ(expand_shards("a.tar::b-{0..1}.tar"), (V{"a.tar", "b-0.tar", "b-1.tar"}));  // webdataset's "::"
}

TEST(ExpandShards, BadPatternsAreUsageErrors) {
  EXPECT_THROW(expand_shards("s-{0..3.tar"), UsageError);
  EXPECT_THROW(expand_shards("s-{0..1}}.tar"), UsageError);
  EXPECT_EQ(expand_shards("s-}{.tar"), V{"s-}{.tar"});                  // braceexpand keeps this one
  EXPECT_THROW(expand_shards("{0..9999999}"), UsageError);              // over kMaxShards
  EXPECT_THROW(expand_shards("{0..1234567890123456789}"), UsageError);  // over 18 digits
  EXPECT_THROW(expand_shards("{0..999}{0..999}{0..9}"), UsageError);    // the product too
  try {
    expand_shards("s-{0..3.tar");
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "shard pattern 's-{0..3.tar': unbalanced braces");
  }
}

TEST(WebDataset, SplitKeyAsBasePlusExt) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(split_key("a/b.c.d"), (P{"a/b", "c.d"}));
  EXPECT_EQ(split_key("abc.jpg"), (P{"abc", "jpg"}));
  EXPECT_EQ(split_key(".hidden"), std::nullopt);
  EXPECT_EQ(split_key("dir/.hidden"), (P{"dir/", "hidden"}));
  EXPECT_EQ(split_key("a.b/.h"), std::nullopt);
  EXPECT_EQ(split_key("x/y/.h"), (P{"x/y/", "h"}));
  EXPECT_EQ(split_key("a.b/c"), std::nullopt);
  EXPECT_EQ(split_key("noext"), std::nullopt);
  EXPECT_EQ(split_key("a/b."), (P{"a/b", ""}));
  EXPECT_EQ(split_key("/.h"), (P{"/", "h"}));
  EXPECT_FALSE(is_meta_member("__key__.cls"));  // a sample with key __key__, as in webdataset
  EXPECT_TRUE(is_meta_member("__meta__"));
  EXPECT_TRUE(is_meta_member("__meta__/x.json"));
  EXPECT_FALSE(is_meta_member("__x.jpg"));
  EXPECT_EQ(parse_label(" 12\n"), 12);
  EXPECT_EQ(parse_label("-1"), std::nullopt);
  EXPECT_EQ(parse_label("1.5"), std::nullopt);
  EXPECT_EQ(parse_label("4294967296"), std::nullopt);
}

std::string tar_of(const std::vector<std::pair<std::string, std::string>>& members, bool finish = true) {
  std::string out;
  TarWriter w([&](const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); });
  for (const auto& [name, data] : members) w.add(name, data);
  if (finish) w.finish();
  EXPECT_EQ(w.bytes_written(), out.size());
  return out;
}

std::string write(const test::TempDir& d, const std::string& name, const std::string& bytes) {
  std::ofstream(d / name, std::ios::binary) << bytes;
  return d / name;
}

TEST(Tar, RoundTripWithLongNames) {
  test::TempDir d;
  const std::string long_name = std::string(150, 'n') + "/key.jpg";
  const std::string bytes = tar_of({{"a.jpg", std::string(1000, 'x')}, {long_name, "yy"}, {"empty.cls", ""}});
  EXPECT_EQ(bytes.size(), TarWriter::member_bytes(5, 1000) + TarWriter::member_bytes(long_name.size(), 2) +
                              TarWriter::member_bytes(9, 0) + 2 * kTarBlock);
  const auto m = list_tar(write(d, "t.tar", bytes));
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].name, "a.jpg");
  EXPECT_EQ(m[0].offset, 512u);
  EXPECT_EQ(m[0].size, 1000u);
  EXPECT_EQ(m[1].name, long_name);
  EXPECT_EQ(m[2].size, 0u);
  TarReader r(d / "t.tar");
  TarMember mm;
  ASSERT_TRUE(r.next(mm));
  std::vector<std::uint8_t> data;
  r.read(mm, data);
  EXPECT_EQ(std::string(data.begin(), data.end()), std::string(1000, 'x'));
}

TEST(WebDataset, GroupsConsecutiveMembers) {
  test::TempDir d;
  const std::string p = write(d, "s.tar",
                              tar_of({{"__meta__/info.json", "{}"},
                                      {"x/0001.jpg", "JPEG"},
                                      {"x/0001.cls", "3"},
                                      {"x/0001.json", "{}"},
                                      {"0002.PNG", "PNGDATA"},
                                      {"0002.cls", "10\n"}}));
  ShardReader r(p);
  WdsSample s;
  ASSERT_TRUE(r.next(s));
  EXPECT_EQ(s.key, "x/0001");
  EXPECT_EQ(s.image_ext, "jpg");
  EXPECT_EQ(std::string(s.image.begin(), s.image.end()), "JPEG");
  EXPECT_EQ(s.label, 3);
  ASSERT_TRUE(r.next(s));
  EXPECT_EQ(s.key, "0002");
  EXPECT_EQ(s.image_ext, "png");
  EXPECT_EQ(s.label, 10);
  EXPECT_FALSE(r.next(s));
  const auto idx = index_shard(p);
  ASSERT_EQ(idx.size(), 2u);
  EXPECT_EQ(idx[1].image_size, 7u);
}

std::string sample_error(const std::string& path) {
  try {
    index_shard(path);
  } catch (const DataError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    return e.what();
  }
  return "no DataError";
}

TEST(WebDataset, BadSamplesNameShardAndKey) {
  test::TempDir d;
  EXPECT_EQ(sample_error(write(d, "a.tar", tar_of({{"k1.jpg", "x"}, {"k2.jpg", "y"}, {"k2.cls", "1"}}))),
            "tar shard " + (d / "a.tar") + ": sample 'k1' has no .cls label (its members: jpg)");
  EXPECT_NE(sample_error(write(d, "b.tar", tar_of({{"k.cls", "1"}}))).find("sample 'k' has no .jpg/.jpeg/.png image"),
            std::string::npos);
  EXPECT_NE(sample_error(write(d, "c.tar", tar_of({{"k.jpg", "x"}, {"k.cls", "cat"}}))).find("not a class index"),
            std::string::npos);
  EXPECT_NE(
      sample_error(write(d, "e.tar", tar_of({{"k.jpg", "x"}, {"k.png", "y"}, {"k.cls", "1"}}))).find("has two images"),
      std::string::npos);
  EXPECT_NE(sample_error(write(d, "f.tar", tar_of({{"k.jpg", "x"}, {"k.JPG", "y"}, {"k.cls", "1"}})))
                .find("has two 'jpg' members"),
            std::string::npos);
}

// Every corruption of a valid shard is a DataError naming the shard and an offset.
std::string tar_error(const test::TempDir& d, const std::string& bytes) {
  const std::string p = write(d, "bad.tar", bytes);
  try {
    index_shard(p);
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no DataError";
}

TEST(Tar, CorruptionsAreDataErrors) {
  test::TempDir d;
  const std::string good = tar_of({{"k.jpg", std::string(700, 'x')}, {"k.cls", "1"}});
  std::string s = good;
  s[0] ^= 1;  // name byte: checksum no longer matches
  EXPECT_NE(tar_error(d, s).find("not a tar file: bad header checksum (header at byte offset 0)"), std::string::npos);
  s = good;
  s[1536 + 1] ^= 1;  // second header
  EXPECT_NE(tar_error(d, s).find("bad header checksum (header at byte offset 1536)"), std::string::npos);
  s = good;
  std::memcpy(&s[124], "0000000009x", 11);  // size not octal; fix the checksum so the size is what fails
  {
    unsigned sum = 0;
    for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(s[i]);
    char ck[8];
    std::snprintf(ck, sizeof ck, "%06o", sum);
    std::memcpy(&s[148], ck, 7);
  }
  EXPECT_NE(tar_error(d, s).find("is not an octal number"), std::string::npos);
  EXPECT_NE(tar_error(d, good.substr(0, 1000)).find("runs past the end of the file"), std::string::npos);
  EXPECT_NE(tar_error(d, good.substr(0, 1536 + 100)).find("truncated header"), std::string::npos);
  EXPECT_NE(tar_error(d, std::string(600, 'z')).find("bad header checksum"), std::string::npos);
  // a good shard cut at a member boundary is a shorter good shard; cut inside a header is not
  EXPECT_EQ(tar_error(d, tar_of({{"k.jpg", "x"}, {"k.cls", "1"}}, false)), "no DataError");
  EXPECT_EQ(tar_error(d, ""), "no DataError");  // empty: no samples
}

TEST(Tar, PaxPathAndSize) {
  test::TempDir d;
  // A pax 'x' header naming the next member, as Python's tarfile writes for long or non-ASCII names.
  std::string out;
  const std::string rec = "29 path=dir/élan.sample.jpg\n";
  ASSERT_EQ(rec.size(), 29u);  // é is two bytes
  std::string header = tar_of({{"PaxHeader", rec}}, false);
  header[156] = 'x';
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(header[i]);
  char ck[8];
  std::snprintf(ck, sizeof ck, "%06o", sum);
  std::memcpy(&header[148], ck, 7);
  const std::string p = write(d, "pax.tar", header + tar_of({{"short.jpg", "abc"}}));
  const auto m = list_tar(p);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].name, "dir/élan.sample.jpg");
  EXPECT_EQ(m[0].size, 3u);
  header.replace(512, 29, "29 pathdir/elan.sample.jpg!\n");
  EXPECT_NE(tar_error(d, header + tar_of({{"short.jpg", "abc"}})).find("pax record"), std::string::npos);
}

}  // namespace
}  // namespace trainbox::data
