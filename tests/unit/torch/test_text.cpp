// The text dataset: windows and shifted targets, the split by position, the llm.c .bin
// layout, a directory corpus, the unigram baseline, and every bad input as a DataError
// that names the file, the offset or count, and what was expected.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "temp_dir.h"
#include <trainbox/data/text.h>
#include <trainbox/util/errors.h>

using namespace trainbox;
namespace fs = std::filesystem;

namespace {
using test::TempDir;

std::string le32(std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  return {char(u), char(u >> 8), char(u >> 16), char(u >> 24)};
}
// An llm.c token file: header (magic, version, count, zeros), then uint16 LE ids.
std::string token_file(const std::vector<std::uint16_t>& ids, std::int32_t magic = data::kTokenFileMagic,
                       std::int32_t version = 1, std::int64_t count = -1) {
  std::string s = le32(magic) + le32(version) + le32(std::int32_t(count < 0 ? std::int64_t(ids.size()) : count));
  s.resize(data::kTokenFileHeaderBytes, '\0');
  for (auto id : ids) s += {char(id & 0xff), char(id >> 8)};
  return s;
}
// Printable, non-repeating enough that a wrong offset shows: 'A' + i % 26, newline every 40.
std::string text_of(std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += i % 40 == 39 ? '\n' : char('A' + i % 26);
  return s;
}
data::DataConfig config(const std::string& path, double holdout = 0.2) {
  data::DataConfig c;
  c.dataset = "text";
  c.path = path;
  c.text_holdout = holdout;
  return c;
}
std::string data_error(const data::DataConfig& c, std::int64_t block) {
  try {
    data::load_text(c, block);
  } catch (const DataError& e) {
    return std::string(e.what()) + "\n  fix: " + e.hint();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a DataError: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no DataError";
  return {};
}
std::vector<std::int64_t> row(const torch::Tensor& t, std::int64_t i) {
  auto r = t[i].contiguous();
  return {r.data_ptr<std::int64_t>(), r.data_ptr<std::int64_t>() + r.numel()};
}
std::vector<std::int64_t> bytes_at(const std::string& s, std::size_t off, std::size_t n) {
  std::vector<std::int64_t> v;
  for (std::size_t i = off; i < off + n; ++i) v.push_back(static_cast<unsigned char>(s[i]));
  return v;
}
#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)
}  // namespace

TEST(Text, WindowsAndTargetsShiftedByOne) {
  TempDir d;
  const std::string s = text_of(100);
  d.write("t.txt", s);
  auto sp = data::load_text(config(d.path + "/t.txt", 0.2), 4);  // train = 80 bytes, val = 20
  EXPECT_EQ(sp.sample_shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(sp.classes, 256);
  ASSERT_EQ(sp.train->size(), (80 - 1) / 4);
  auto b = sp.train->get_batch(torch::tensor({0, 2, 18}, torch::kInt64));
  ASSERT_EQ(b.x.sizes(), (std::vector<std::int64_t>{3, 4}));
  ASSERT_EQ(b.y.sizes(), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(b.x.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.y.scalar_type(), torch::kInt64);
  EXPECT_EQ(row(b.x, 0), bytes_at(s, 0, 4));
  EXPECT_EQ(row(b.y, 0), bytes_at(s, 1, 4));
  EXPECT_EQ(row(b.x, 1), bytes_at(s, 8, 4));
  EXPECT_EQ(row(b.y, 1), bytes_at(s, 9, 4));
  // The last train window's target ends at token 76, inside the train split (< 80).
  EXPECT_EQ(row(b.x, 2), bytes_at(s, 72, 4));
  EXPECT_EQ(row(b.y, 2), bytes_at(s, 73, 4));
  EXPECT_THROW(sp.train->get_batch(torch::tensor({19}, torch::kInt64)), c10::Error);
  EXPECT_EQ(sp.description,
            "text " + d.path + "/t.txt: 100 tokens (byte-level, vocab 256): 19 train / 4 val windows of 4");
  EXPECT_EQ(sp.train->describe(), sp.description);
}

TEST(Text, SplitByPositionValIsTheTailAndTheTest) {
  TempDir d;
  const std::string s = text_of(1000);
  d.write("t.txt", s);
  auto sp = data::load_text(config(d.path + "/t.txt", 0.1), 16);  // train 900, val 100
  EXPECT_EQ(sp.train->size(), 899 / 16);
  EXPECT_EQ(sp.val->size(), 99 / 16);
  EXPECT_EQ(sp.test, sp.val);
  auto v = sp.val->get_batch(torch::tensor({0, 5}, torch::kInt64));
  EXPECT_EQ(row(v.x, 0), bytes_at(s, 900, 16));
  EXPECT_EQ(row(v.y, 0), bytes_at(s, 901, 16));
  EXPECT_EQ(row(v.y, 1), bytes_at(s, 900 + 5 * 16 + 1, 16));  // ends at 996 < 1000
}

TEST(Text, LimitKeepsTheFirstTrainWindows) {
  TempDir d;
  d.write("t.txt", text_of(1000));
  auto c = config(d.path + "/t.txt", 0.1);
  c.limit = 3;
  auto sp = data::load_text(c, 16);
  EXPECT_EQ(sp.train->size(), 3);
  EXPECT_EQ(sp.val->size(), 99 / 16);
}

TEST(Text, Utf8MultibyteIsBytes) {
  TempDir d;
  std::string s;
  for (int i = 0; i < 40; ++i) s += "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\n";  // é, €, an emoji
  d.write("u.txt", s);
  auto sp = data::load_text(config(d.path + "/u.txt"), 8);
  auto b = sp.train->get_batch(torch::tensor({0}, torch::kInt64));
  EXPECT_EQ(row(b.x, 0), bytes_at(s, 0, 8));
  EXPECT_EQ(b.x[0][1].item<std::int64_t>(), 0xc3);
}

TEST(Text, TokenFile) {
  TempDir d;
  std::vector<std::uint16_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(std::uint16_t(i * 7919 % 5000));
  ids[123] = 65535;  // the top id: vocab 65536, and no sign trouble in the decode
  d.write("tok.bin", token_file(ids));
  auto sp = data::load_text(config(d.path + "/tok.bin", 0.5), 10);  // train 150, val 150
  EXPECT_EQ(sp.classes, 65536);
  EXPECT_EQ(sp.train->size(), 149 / 10);
  auto b = sp.train->get_batch(torch::tensor({12}, torch::kInt64));
  for (int t = 0; t < 10; ++t) {
    EXPECT_EQ(b.x[0][t].item<std::int64_t>(), ids[120 + t]);
    EXPECT_EQ(b.y[0][t].item<std::int64_t>(), ids[121 + t]);
  }
  auto v = sp.val->get_batch(torch::tensor({0}, torch::kInt64));
  EXPECT_EQ(v.x[0][0].item<std::int64_t>(), ids[150]);
  EXPECT_HAS(sp.description, "300 tokens (uint16 .bin, vocab 65536): 14 train / 14 val windows of 10");
}

// llm.c's Llama 3 layout (uint32 ids, magic 20240801 version 7) with trainbox's .mask sidecar:
// ids above 65,535 exact, and a target the mask does not mark is -100 (the loss skips it).
TEST(Text, WideTokenFileWithLossMask) {
  TempDir d;
  std::vector<std::uint32_t> ids;
  std::string mask;
  for (std::uint32_t i = 0; i < 200; ++i) {
    ids.push_back(i % 3 == 0 ? 128255 - i : i * 611 % 70000);
    mask += char((i % 5 < 2 ? 0 : data::kMaskTarget) | (i % 50 == 0 ? data::kMaskDocStart : 0));
  }
  std::string bin = le32(data::kTokenFileMagicWide) + le32(data::kTokenFileVersionWide) + le32(200);
  bin.resize(data::kTokenFileHeaderBytes, '\0');
  for (auto id : ids) bin += le32(std::int32_t(id));
  std::string m = le32(data::kMaskFileMagic) + le32(data::kMaskFileVersion) + le32(200);
  m.resize(data::kTokenFileHeaderBytes, '\0');
  d.write("w.bin", bin);
  d.write("w.mask", m + mask);
  auto sp = data::load_text(config(d.path + "/w.bin", 0.5), 10);
  EXPECT_EQ(sp.classes, 128256);
  auto b = sp.train->get_batch(torch::tensor({3, 7}, torch::kInt64));
  for (int r = 0; r < 2; ++r) {
    const int w = r == 0 ? 3 : 7;
    for (int t = 0; t < 10; ++t) {
      const std::size_t o = std::size_t(w * 10 + t);
      EXPECT_EQ(b.x[r][t].item<std::int64_t>(), ids[o]);
      EXPECT_EQ(b.y[r][t].item<std::int64_t>(),
                (std::uint8_t(mask[o + 1]) & data::kMaskTarget) ? std::int64_t(ids[o + 1]) : -100)
          << "window " << w << " position " << t;
    }
  }
  EXPECT_HAS(sp.description, "uint32 .bin, vocab 128256, loss on 60.0% of tokens (w.mask)");
  d.write("w.mask", m.substr(0, 1024) + mask.substr(0, 150));
  EXPECT_HAS(data_error(config(d.path + "/w.bin", 0.5), 10),
             "w.mask: 150 mask bytes (header: 200) for 200 tokens in its .bin");
}

TEST(Text, TokenFileFoundByMagicWhateverItsName) {
  TempDir d;
  std::vector<std::uint16_t> ids(64, 3);
  ids[10] = 41;
  d.write("tokens.dat", token_file(ids));
  auto sp = data::load_text(config(d.path + "/tokens.dat", 0.5), 8);
  EXPECT_EQ(sp.classes, 42);
}

TEST(Text, DirectoryConcatenatesTextFilesSorted) {
  TempDir d;
  d.write("c/b", text_of(300));
  d.write("c/a", std::string(300, 'x'));
  d.write("c/a.dat", std::string("\0\0\0\2binary", 10));  // a fortune index: skipped
  d.write("c/.hidden", "never read");
  fs::create_symlink("a", d.path + "/c/a.u8");               // fortunes' links: read once
  auto sp = data::load_text(config(d.path + "/c", 0.1), 8);  // 600 tokens: train 540, val 60
  EXPECT_EQ(sp.train->size(), 539 / 8);
  auto b = sp.train->get_batch(torch::tensor({0, 37}, torch::kInt64));
  EXPECT_EQ(row(b.x, 0), std::vector<std::int64_t>(8, 'x'));
  const std::string both = std::string(300, 'x') + text_of(300);
  EXPECT_EQ(row(b.x, 1), bytes_at(both, 37 * 8, 8));  // crosses from a into b
  EXPECT_HAS(sp.description, "c (2 text files; 1 not text, skipped: a.dat): 600 tokens");
}

TEST(Text, DirectoryWithoutText) {
  TempDir d;
  d.write("c/x.gz", std::string("\x1f\x8b\0\0", 4));
  auto e = data_error(config(d.path + "/c"), 8);
  EXPECT_HAS(e, "is a directory without a UTF-8 text file (files that are not text: 1, e.g. x.gz)");
}

TEST(Text, UnigramEntropy) {
  EXPECT_NEAR(data::unigram_entropy(torch::tensor({1, 1, 2, 2}, torch::kInt32), 256), std::log(2.0), 1e-12);
  EXPECT_NEAR(data::unigram_entropy(torch::arange(256, torch::kUInt8), 256), std::log(256.0), 1e-12);
  EXPECT_EQ(data::unigram_entropy(torch::zeros({5}, torch::kUInt8), 256), 0.0);
  TempDir d;
  // train = "aaab" * 25 (p(a) = 3/4), val = all 'z': the baseline is the train split's.
  std::string s;
  for (int i = 0; i < 25; ++i) s += "aaab";
  d.write("t.txt", s + std::string(100, 'z'));
  auto sp = data::load_text(config(d.path + "/t.txt", 0.5), 4);
  const double h = -(0.75 * std::log(0.75) + 0.25 * std::log(0.25));
  ASSERT_TRUE(data::unigram_entropy(*sp.train).has_value());
  EXPECT_NEAR(*data::unigram_entropy(*sp.train), h, 1e-12);
  EXPECT_NEAR(*data::unigram_entropy(*sp.val), 0.0, 1e-12);
  struct Other : data::Source {
    std::int64_t size() const override { return 0; }
    data::Example get_batch(const torch::Tensor&) const override { return {}; }
  };
  EXPECT_FALSE(data::unigram_entropy(Other{}).has_value());
}

TEST(Text, ToDeviceGivesTheSameBatches) {
  TempDir d;
  d.write("t.txt", text_of(500));
  auto sp = data::load_text(config(d.path + "/t.txt"), 8);
  auto idx = torch::tensor({3, 1, 4, 1, 5}, torch::kInt64);
  auto a = sp.train->get_batch(idx);
  for (auto dev : {torch::Device(torch::kCPU), torch::Device(torch::kCUDA)}) {
    if (dev.is_cuda() && !torch::cuda::is_available()) continue;
    auto moved = sp.train->to_device(dev);
    ASSERT_NE(moved, nullptr);
    EXPECT_EQ(moved->size(), sp.train->size());
    auto b = moved->get_batch(idx.to(dev));
    EXPECT_EQ(b.x.device(), dev);
    EXPECT_TRUE(torch::equal(a.x, b.x.cpu()));
    EXPECT_TRUE(torch::equal(a.y, b.y.cpu()));
    EXPECT_NEAR(*data::unigram_entropy(*moved), *data::unigram_entropy(*sp.train), 1e-12);
  }
}

// --- bad input: each a DataError naming the file, the number and the fix ---

TEST(TextBadInput, Missing) {
  auto e = data_error(config("/nonexistent/corpus.txt"), 8);
  EXPECT_HAS(e, "data.path = \"/nonexistent/corpus.txt\" does not exist");
  EXPECT_HAS(e, "apt-get install fortunes");
}

TEST(TextBadInput, Empty) {
  TempDir d;
  d.write("e.txt", "");
  auto e = data_error(config(d.path + "/e.txt", 0.1), 128);
  EXPECT_HAS(e, d.path + "/e.txt is empty: 0 tokens; block_size 128");
  EXPECT_HAS(e, "each split needs block_size + 1 = 129");
}

TEST(TextBadInput, ShorterThanAWindow) {
  TempDir d;
  d.write("s.txt", text_of(100));  // 100 tokens: no split can hold 129
  auto e = data_error(config(d.path + "/s.txt", 0.1), 128);
  EXPECT_HAS(e,
             d.path + "/s.txt: 100 tokens leave the train split 90 (the first 90%), fewer than block_size + 1 = 129");
  EXPECT_HAS(e, "fix: use a longer text (about 1290 tokens), or a smaller model.block_size or data.text_holdout");
}

TEST(TextBadInput, ValSplitShorterThanAWindow) {
  TempDir d;
  d.write("s.txt", text_of(1000));  // train 900 is enough, val 100 is not
  auto e = data_error(config(d.path + "/s.txt", 0.1), 128);
  EXPECT_HAS(e, "1000 tokens leave the val split 100 (the last 10%), fewer than block_size + 1 = 129");
  EXPECT_HAS(e, "a larger data.text_holdout");
}

TEST(TextBadInput, ExactlyOneWindowPerSplitIsEnough) {
  TempDir d;
  d.write("s.txt", text_of(18));  // 9 + 9 tokens: one window of 8 each
  auto sp = data::load_text(config(d.path + "/s.txt", 0.5), 8);
  EXPECT_EQ(sp.train->size(), 1);
  EXPECT_EQ(sp.val->size(), 1);
  d.write("s.txt", text_of(17));
  EXPECT_HAS(data_error(config(d.path + "/s.txt", 0.5), 8), "fewer than block_size + 1 = 9");
}

TEST(TextBadInput, InvalidUtf8) {
  TempDir d;
  std::string s = text_of(200);
  s[85] = '\xff';  // line 3 (newlines at 39 and 79)
  d.write("latin.txt", s);
  auto e = data_error(config(d.path + "/latin.txt"), 8);
  EXPECT_HAS(e, d.path + "/latin.txt is not UTF-8 text: byte 0xff at offset 85 (line 3)");
  EXPECT_HAS(e, ".bin");
  EXPECT_HAS(e, "iconv");
}

TEST(TextBadInput, Utf8Corner) {
  TempDir d;
  auto first_bad = [&](const std::string& tail) {
    d.write("u.txt", text_of(50) + tail + text_of(50));
    return data_error(config(d.path + "/u.txt"), 8);
  };
  EXPECT_HAS(first_bad("\xc3("), "byte 0xc3 at offset 50 (line 2) starts a 2-byte UTF-8 sequence with an invalid");
  EXPECT_HAS(first_bad("\xc0\xaf"), "byte 0xc0 at offset 50");          // overlong '/'
  EXPECT_HAS(first_bad("\xed\xa0\x80"), "byte 0xed at offset 50");      // a UTF-16 surrogate
  EXPECT_HAS(first_bad("\xf4\x90\x80\x80"), "byte 0xf4 at offset 50");  // above U+10FFFF
  EXPECT_HAS(first_bad("\x80"), "is a continuation byte");
  EXPECT_HAS(first_bad(std::string(1, '\0')), "byte 0x00 at offset 50 (line 2) is a NUL byte");
  d.write("cut.txt", text_of(50) + "\xe2\x82");
  EXPECT_HAS(data_error(config(d.path + "/cut.txt"), 8), "starts a 3-byte UTF-8 sequence that the file cuts off");
}

// A JSON Lines chat file is valid UTF-8: without the check it trained as bytes, braces and all
// (issue 43). Refused naming what it is, with the jq line that extracts its text.
TEST(TextBadInput, JsonLinesIsRefusedNamingItsKeys) {
  TempDir d;
  std::string chat;
  for (int i = 0; i < 40; ++i)
    chat += R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})"
            "\n";
  d.write("chat.jsonl", chat);
  auto e = data_error(config(d.path + "/chat.jsonl"), 8);
  EXPECT_HAS(e, d.path + "/chat.jsonl is JSON Lines (its first 5 lines are JSON objects, keys \"messages\")");
  EXPECT_HAS(e, "would train on its bytes, JSON syntax included");
  EXPECT_HAS(e, "jq -r '.messages[].content' " + d.path + "/chat.jsonl > chat.txt");
  // the same file among the texts of a directory
  fs::create_directory(d.path + "/corpus");
  d.write("corpus/a.txt", text_of(400));
  d.write("corpus/b.jsonl", std::string(R"({"text": "one"})") + "\n" + R"({"text": "two"})" + "\n");
  auto dir = data_error(config(d.path + "/corpus"), 8);
  EXPECT_HAS(dir, "corpus/b.jsonl is JSON Lines (its first 2 lines are JSON objects, keys \"text\")");
  EXPECT_HAS(dir, "jq -r '.text'");
}

TEST(TextBadInput, JsonDocumentIsRefusedAndProseWithBracesIsNot) {
  TempDir d;
  std::string body = text_of(300);  // its line breaks as JSON writes them inside a string
  for (std::size_t at = body.find('\n'); at != std::string::npos; at = body.find('\n', at)) body.replace(at, 1, "\\n");
  d.write("data.json", "{\n  \"title\": \"x\",\n  \"body\": \"" + body + "\"\n}\n");
  EXPECT_HAS(data_error(config(d.path + "/data.json"), 8), "is one JSON document (keys \"title\", \"body\")");
  // text that opens with a brace but is not JSON, and code with a JSON-looking first line, still train
  d.write("code.txt", "{ this is a note in braces }\n" + text_of(400));
  EXPECT_EQ(data::load_text(config(d.path + "/code.txt"), 8).train->size() > 0, true);
  d.write("mixed.txt", "{\"a\": 1}\nthen prose follows\n" + text_of(400));
  EXPECT_EQ(data::load_text(config(d.path + "/mixed.txt"), 8).train->size() > 0, true);
}

TEST(TextBadInput, TokenFileShorterThanHeader) {
  TempDir d;
  d.write("short.bin", "hello world, I am not a token file\n");
  auto e = data_error(config(d.path + "/short.bin"), 8);
  EXPECT_HAS(e, d.path + "/short.bin: 35 bytes, shorter than the 1024-byte header of a .bin token file");
  EXPECT_HAS(e, "magic 20240520");
}

TEST(TextBadInput, TokenFileBadMagic) {
  TempDir d;
  d.write("m.bin", token_file(std::vector<std::uint16_t>(100, 1), 20240519));
  auto e = data_error(config(d.path + "/m.bin"), 8);
  EXPECT_HAS(e, d.path + "/m.bin: bad magic 20240519 (0x0134d887) at offset 0, expected 20240520 or 20240801");
}

TEST(TextBadInput, TokenFileBadVersion) {
  TempDir d;
  d.write("v.bin", token_file(std::vector<std::uint16_t>(100, 1), data::kTokenFileMagic, 3));
  EXPECT_HAS(data_error(config(d.path + "/v.bin"), 8),
             d.path + "/v.bin: unsupported version 3 at offset 4 for magic 20240520, expected 1 (uint16 token ids)");
  // llm.c's uint32 layout is magic 20240801 with version 7: its magic with version 1 is refused
  d.write("v.bin", token_file(std::vector<std::uint16_t>(100, 1), data::kTokenFileMagicWide, 1));
  EXPECT_HAS(data_error(config(d.path + "/v.bin"), 8),
             "unsupported version 1 at offset 4 for magic 20240801, expected 7 (uint32 token ids)");
}

TEST(TextBadInput, TokenFileCountMismatch) {
  TempDir d;
  d.write("c.bin", token_file(std::vector<std::uint16_t>(100, 1), data::kTokenFileMagic, 1, 120));
  EXPECT_HAS(data_error(config(d.path + "/c.bin"), 8),
             d.path +
                 "/c.bin: the header's token count 120 (offset 8) does not match the file: 200 bytes at offset 1024 "
                 "hold 100 uint16 tokens (file truncated)");
  d.write("c.bin", token_file(std::vector<std::uint16_t>(100, 1), data::kTokenFileMagic, 1, 90));
  EXPECT_HAS(data_error(config(d.path + "/c.bin"), 8), "(trailing data after the tokens)");
}

TEST(TextBadInput, TokenFileOddByteCount) {
  TempDir d;
  d.write("o.bin", token_file(std::vector<std::uint16_t>(100, 1)) + "\x01");
  EXPECT_HAS(
      data_error(config(d.path + "/o.bin"), 8),
      d.path + "/o.bin: 201 bytes of tokens at offset 1024, not a multiple of 2: uint16 token ids take 2 bytes each");
}

TEST(TextBadInput, TokenFileWithoutTokens) {
  TempDir d;
  d.write("z.bin", token_file({}));
  EXPECT_HAS(data_error(config(d.path + "/z.bin"), 8), d.path + "/z.bin is empty: 0 tokens");
}

TEST(TextBadInput, ValFractionIsNotForText) {
  TempDir d;
  d.write("t.txt", text_of(1000));
  auto c = config(d.path + "/t.txt");
  c.val_fraction = 0.1;
  EXPECT_THROW(data::load_text(c, 8), ConfigError);
}
