#include <gtest/gtest.h>

#include "fixtures.h"
#include <trainbox/train/config.h>
#include <trainbox/util/errors.h>

using namespace trainbox;
using train::Config;

namespace {
// The ConfigError a call throws (fails the test if it throws nothing or something else).
template <class F>
ConfigError config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "no ConfigError";
  return ConfigError("");
}
}  // namespace

TEST(Config, BuiltInDefaultIsFashionMlpToml) {
  Config file = train::load_config(test::source_dir() + "/configs/fashion_mlp.toml");
  EXPECT_EQ(train::to_toml(file), train::to_toml(Config{}));
  EXPECT_EQ(file.model.hidden, (std::vector<std::int64_t>{128}));
  EXPECT_EQ(file.optim.name, "adam");
  EXPECT_DOUBLE_EQ(file.optim.lr, 1e-3);
  EXPECT_EQ(file.train.batch_size, 64);
}

TEST(Config, EveryShippedConfigLoads) {
  for (const char* f : {"fashion_mlp", "fashion_cnn", "cifar10_resnet", "synthetic_bench"}) {
    Config c = train::load_config(test::source_dir() + "/configs/" + f + ".toml");
    EXPECT_NO_THROW(train::validate(c)) << f;
  }
}

TEST(Config, ResolvedTomlRoundTrips) {
  Config c;
  train::apply_override(c, "model.hidden=[256, 128]");
  train::apply_override(c, "optim.lr=3e-4");
  train::apply_override(c, "data.path=/data/with spaces/and\"quote");
  Config back = train::parse_config(train::to_toml(c));
  EXPECT_EQ(train::to_toml(back), train::to_toml(c));
  EXPECT_EQ(back.model.hidden, (std::vector<std::int64_t>{256, 128}));
  EXPECT_EQ(back.data.path, "/data/with spaces/and\"quote");
}

TEST(Config, UnknownKeyNamesTheClosestValidKey) {
  auto e = config_error([] { train::parse_config("[train]\nepoch = 3\n", "my.toml"); });
  EXPECT_NE(std::string(e.what()).find("train.epoch"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("my.toml"), std::string::npos);
  EXPECT_NE(e.hint().find("train.epochs"), std::string::npos) << e.hint();
  auto o = config_error([] {
    Config c;
    train::apply_override(c, "optim.lrr=0.1");
  });
  EXPECT_NE(o.hint().find("optim.lr"), std::string::npos);
}

TEST(Config, WrongTypeNamesKeyValueAndWhatIsAllowed) {
  auto e = config_error([] { train::parse_config("[train]\nbatch_size = \"big\"\n", "c.toml"); });
  std::string w = e.what();
  EXPECT_NE(w.find("train.batch_size"), std::string::npos) << w;
  EXPECT_NE(w.find("\"big\""), std::string::npos) << w;
  EXPECT_NE(w.find("integer"), std::string::npos) << w;
  EXPECT_NE(w.find("c.toml:2:"), std::string::npos) << w;  // file:line:column
}

TEST(Config, OutOfRangeAndBadChoices) {
  Config c;
  auto lr = config_error([&] { train::apply_override(c, "optim.lr=-1"); });
  EXPECT_NE(std::string(lr.what()).find("> 0"), std::string::npos) << lr.what();
  auto amp = config_error([&] { train::apply_override(c, "train.amp=fp8"); });
  EXPECT_NE(std::string(amp.what()).find("off, bf16, fp16"), std::string::npos) << amp.what();
  auto betas = config_error([&] { train::apply_override(c, "optim.betas=[0.9]"); });
  EXPECT_NE(std::string(betas.what()).find("a list of 2 numbers"), std::string::npos) << betas.what();
  auto zero = config_error([&] { train::apply_override(c, "train.batch_size=0"); });
  EXPECT_NE(std::string(zero.what()).find(">= 1"), std::string::npos);
  config_error([&] { train::apply_override(c, "no_equals_sign"); });
}

// train.amp is an enum in memory and the same four words in TOML, with the same errors as
// any string choice.
TEST(Config, AmpIsParsedOnceIntoAnEnum) {
  const std::pair<const char*, train::Amp> spellings[] = {
      {"off", train::Amp::kOff}, {"bf16", train::Amp::kBf16}, {"fp16", train::Amp::kFp16}, {"auto", train::Amp::kAuto}};
  for (const auto& [word, value] : spellings) {
    Config c = train::parse_config(std::string("[train]\namp = \"") + word + "\"\n");
    EXPECT_EQ(c.train.amp, value) << word;
    EXPECT_STREQ(train::amp_name(value), word);
    EXPECT_NE(train::to_toml(c).find(std::string("amp = \"") + word + "\""), std::string::npos) << word;
    EXPECT_EQ(train::parse_config(train::to_toml(c)).train.amp, value) << word;  // round trip
  }
  EXPECT_EQ(Config{}.train.amp, train::Amp::kOff);
  Config c;
  auto bad = config_error([&] { train::apply_override(c, "train.amp=fp8"); });
  EXPECT_STREQ(bad.what(), "train.amp = \"fp8\" is not allowed: one of: off, bf16, fp16, auto");
  EXPECT_EQ(bad.hint(),
            "set train.amp to a value that is one of: off, bf16, fp16, auto (every key: trainbox train "
            "--config-reference, or docs/config.md)");
  auto number = config_error([&] { train::parse_config("[train]\namp = 16\n", "x.toml"); });
  EXPECT_STREQ(number.what(), "x.toml:2:7: train.amp = 16 is not allowed: one of: off, bf16, fp16, auto");
  EXPECT_EQ(c.train.amp, train::Amp::kOff);  // a rejected value changes nothing
}

TEST(Config, CrossFieldRules) {
  Config c;
  c.train.cuda_graphs = true;
  c.train.accumulate = 2;
  config_error([&] { train::validate(c); });
  c.train.accumulate = 1;
  c.train.amp = train::Amp::kFp16;
  config_error([&] { train::validate(c); });
  Config d;
  d.optim.nesterov = true;  // adam + nesterov
  config_error([&] { train::validate(d); });
}

// model.moe.*: the family that has it, a top-k the experts allow, and what does not combine yet (docs/moe.md).
TEST(Config, MixtureOfExpertsRules) {
  Config c;
  c.model.name = "llama";
  c.data.dataset = "text";
  c.model.moe_experts = 4;
  c.model.moe_top_k = 2;
  EXPECT_NO_THROW(train::validate(c));
  c.model.moe_top_k = 5;
  EXPECT_STREQ(config_error([&] { train::validate(c); }).what(),
               "model.moe.top_k = 5 is larger than model.moe.experts = 4: each token is routed to top_k different "
               "experts");
  c.model.moe_top_k = 2;
  c.dist.zero_stage = 3;
  EXPECT_NE(std::string(config_error([&] { train::validate(c); }).what()).find("dist.zero_stage = 3"),
            std::string::npos);
  c.dist.zero_stage = 2;
  EXPECT_NO_THROW(train::validate(c));
  c.model.lora_r = 8;
  EXPECT_NE(std::string(config_error([&] { train::validate(c); }).what()).find("model.lora.r = 8"), std::string::npos);
  c.model.lora_r = 0;
  c.model.activation_checkpointing = "blocks";
  EXPECT_NE(std::string(config_error([&] { train::validate(c); }).what()).find("activation_checkpointing"),
            std::string::npos);
  c.model.activation_checkpointing = "none";
  c.model.name = "gpt";
  EXPECT_NE(std::string(config_error([&] { train::validate(c); }).what()).find("not model.name = \"gpt\""),
            std::string::npos);
  auto parsed = train::parse_config("[model]\nname = \"llama\"\nmoe.experts = 8\nmoe.top_k = 1\n", "m.toml");
  EXPECT_EQ(parsed.model.moe_experts, 8);
  EXPECT_EQ(parsed.model.moe_top_k, 1);
  config_error([] { train::parse_config("[model]\nmoe.collapse_share = 0\n", "m.toml"); });  // (0, 1]
}

TEST(Config, BadTomlSyntaxSaysWhere) {
  auto e = config_error([] { train::parse_config("[train\nepochs = 1\n", "broken.toml"); });
  EXPECT_NE(std::string(e.what()).find("broken.toml:1:"), std::string::npos) << e.what();
}

TEST(Docs, ConfigReferenceHasEveryKeyAndDefault) {
  auto doc = read_file(test::source_dir() + "/docs/config.md");
  ASSERT_TRUE(doc.has_value());
  for (const auto& f : train::config_fields()) {
    auto row = doc->find("| `" + f.key + "` |");
    ASSERT_NE(row, std::string::npos) << f.key << " is not documented";
    auto line = doc->substr(row, doc->find('\n', row) - row);
    EXPECT_NE(line.find("`" + f.default_value + "`"), std::string::npos) << f.key << " default " << f.default_value;
  }
}

// toml++ 3.3.0 reaches a "can't happen" branch (undefined behaviour) for some non-ASCII
// characters where it skips whitespace or ends a value (found by tests/fuzz/fuzz_config;
// the build applies upstream's fix: cmake/tomlplusplus.cmake). Such text is invalid TOML: a
// ConfigError naming the line, and any UTF-8 inside strings and comments stays fine.
TEST(Config, NonAsciiOutsideStringsIsAConfigErrorNotUndefinedBehaviour) {
  for (const std::string bad : {"[train]\nepochs = 2\xd2\x8f\n", "[train]\nepochs = 2 \xc2\xa7\n",
                                "[train]\nepochs = 01-mode'''l\xd2\x8f\n", "\xc2\xa0[train]\n"}) {
    try {
      train::parse_config(bad, "bad.toml");
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.toml:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not valid TOML"), std::string::npos) << e.what();
    }
  }
  // Valid TOML on the same path: a line-ending backslash in a """ string trims the
  // whitespace up to the next character, here a non-ASCII one (marzer/tomlplusplus#190).
  EXPECT_EQ(train::parse_config("[data]\npath = \"\"\"\\\n  \xc2\xa7\"\"\"\n", "ok.toml").data.path, "\xc2\xa7");
  Config c = train::parse_config(
      "# Müller's run §\n[data]\npath = \"/data/Müller §\"\n"
      "[model]\nname = '''gpt'''\n",
      "ok.toml");
  EXPECT_EQ(c.data.path, "/data/Müller §");
  train::apply_override(c, "data.path=/data/Zoë");  // not TOML: taken as a bare string, as before
  EXPECT_EQ(c.data.path, "/data/Zoë");
  // A bare --set value that is not UTF-8 could not be written to config.toml and read back on
  // resume (found by tests/fuzz/fuzz_config): refused, naming the key and the byte.
  try {
    train::apply_override(c, "model.init_from=checkpoi\xe0nt.safetensors");
    ADD_FAILURE() << "accepted a value that is not UTF-8";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--set model.init_from: the value is not UTF-8 text: byte 0xe0 at offset 8"),
              std::string::npos)
        << e.what();
  }
  // Control characters in a bare --set value are written escaped, so config.toml reads back.
  train::apply_override(c, "data.path=/data/a\x0e\x7f\tb");
  EXPECT_EQ(train::parse_config(train::to_toml(c), "config.toml").data.path, "/data/a\x0e\x7f\tb");
}
