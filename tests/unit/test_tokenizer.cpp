// The tokenizer's contract beyond what tests/integration/tokenizer_parity.py compares with HF:
// hand-checked ids of a small tokenizer.json, several tokenizers and threads at once (the BPE
// word cache is per thread and per tokenizer), and the errors' types.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include <trainbox/text/tokenizer.h>
#include <trainbox/util/errors.h>

#include "temp_dir.h"

namespace {

using trainbox::text::Tokenizer;

// Byte-level BPE over "a", "b", "c", " " (Ġ) with merges a b → ab, ab c → abc; <s> a special added token.
std::string tiny_json(const std::string& merges) {
  return R"({"version":"1.0","added_tokens":[{"id":7,"content":"<s>","single_word":false,"lstrip":false,
    "rstrip":false,"normalized":false,"special":true}],"normalizer":null,
    "pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},
    "post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},
      {"Sequence":{"id":"A","type_id":0}}],"pair":[],"special_tokens":{"<s>":{"id":"<s>","ids":[7],"tokens":["<s>"]}}},
    "decoder":{"type":"ByteLevel"},
    "model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,
      "fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
      "vocab":{"a":0,"b":1,"c":2,"\u0120":3,"ab":4,"abc":5,"\u0120a":6},"merges":)" +
         merges + "}}";
}

Tokenizer write_and_load(const trainbox::test::TempDir& dir, const std::string& name, const std::string& json) {
  dir.write(name, json);
  return Tokenizer::load(dir / name);
}

TEST(Tokenizer, HandCheckedIds) {
  trainbox::test::TempDir dir;
  if (!trainbox::text::tokenizer_available()) GTEST_SKIP() << "built without libonig-dev/libutf8proc-dev";
  const Tokenizer t = write_and_load(dir, "t.json", tiny_json(R"(["a b","ab c","Ġ a"])"));
  // "abc abca": pieces "abc" and "Ġabca"; in the second, a b (rank 0) merges before Ġ a (rank 2), then
  // ab c (rank 1): Ġ abc a, and Ġ a never forms
  EXPECT_EQ(t.encode("abc abca", false), (std::vector<int32_t>{5, 3, 5, 0}));
  EXPECT_EQ(t.encode(" a", false), (std::vector<int32_t>{6}));
  EXPECT_EQ(t.encode("abc", true), (std::vector<int32_t>{7, 5}));
  EXPECT_EQ(t.encode("<s>ab", false), (std::vector<int32_t>{7, 4}));  // a special token inside text
  EXPECT_EQ(t.decode({7, 5, 6}, false), "<s>abc a");
  EXPECT_EQ(t.decode({7, 5, 6}, true), "abc a");
  EXPECT_EQ(t.vocab_size(), 8);
  EXPECT_TRUE(t.is_special(7));
  EXPECT_EQ(t.token_to_id("abc"), 5);
}

TEST(Tokenizer, TwoTokenizersAndFourThreadsAgreeWithOneAtATime) {
  trainbox::test::TempDir dir;
  if (!trainbox::text::tokenizer_available()) GTEST_SKIP() << "built without libonig-dev/libutf8proc-dev";
  // The same vocab, merges in another order: "abc" is (ab)(c) in the second, as "ab c" never applies first.
  const Tokenizer a = write_and_load(dir, "a.json", tiny_json(R"(["a b","ab c","Ġ a"])"));
  const Tokenizer b = write_and_load(dir, "b.json", tiny_json(R"(["a b","Ġ a"])"));
  EXPECT_EQ(a.encode("abc", false), (std::vector<int32_t>{5}));
  EXPECT_EQ(b.encode("abc", false), (std::vector<int32_t>{4, 2}));  // not a's cached word
  EXPECT_EQ(a.encode("abc", false), (std::vector<int32_t>{5}));
  std::string text;
  for (int i = 0; i < 2000; ++i) text += (i % 3 ? "abc " : "cab ") + std::string(i % 5, 'a') + " ";
  const auto want_a = a.encode(text, true), want_b = b.encode(text, true);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 5; ++r) ok[k] += (k % 2 ? b.encode(text, true) == want_b : a.encode(text, true) == want_a);
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, (std::vector<int>{5, 5, 5, 5}));
}

TEST(Tokenizer, BadInputIsATypedError) {
  trainbox::test::TempDir dir;
  if (!trainbox::text::tokenizer_available()) GTEST_SKIP() << "built without libonig-dev/libutf8proc-dev";
  EXPECT_THROW(Tokenizer::load(dir / "missing.json"), trainbox::UsageError);
  EXPECT_THROW(write_and_load(dir, "bad.json", "{\"model\": "), trainbox::UsageError);
  EXPECT_THROW(write_and_load(dir, "merge.json", tiny_json(R"(["a z"])")), trainbox::UsageError);  // z: no token
  const Tokenizer t = write_and_load(dir, "t.json", tiny_json(R"(["a b"])"));
  EXPECT_THROW(t.encode(std::string("ab\xC3", 3)), trainbox::DataError);  // a cut UTF-8 sequence
  EXPECT_THROW(t.decode({0, 99}), trainbox::UsageError);
}

}  // namespace
