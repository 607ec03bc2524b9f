// models/registry.h is the one list of model names: the config, the docs and the field
// table's "mlp: …" doc prefixes are held to it here (the builder and ONNX writer tables by
// static_asserts in src/models/).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "fixtures.h"
#include "models/resnet_spec.h"
#include <trainbox/models/registry.h>
#include <trainbox/train/config.h>
#include <trainbox/train/config_rules.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

using namespace trainbox;

namespace {

std::string joined(const std::vector<std::string>& v, const std::string& sep, const std::string& last_sep,
                   const std::string& quote = "") {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i)
    out += (i == 0 ? "" : i + 1 == v.size() ? last_sep : sep) + quote + v[i] + quote;
  return out;
}

std::vector<std::string> names_where(bool (*pred)(const models::ModelInfo&)) {
  std::vector<std::string> out;
  for (const auto& m : models::kModels)
    if (pred(m)) out.emplace_back(m.name);
  return out;
}

std::string doc(const std::string& file) {
  auto text = read_file(test::source_dir() + "/" + file);
  if (!text) throw std::runtime_error("missing " + file);
  return *text;
}

}  // namespace

TEST(ModelRegistry, NamesAreUniqueAndFindable) {
  std::set<std::string> seen;
  for (const auto& m : models::kModels) {
    EXPECT_TRUE(seen.insert(std::string(m.name)).second) << m.name;
    EXPECT_EQ(models::find_model(m.name), &m);
    EXPECT_FALSE(m.summary.empty()) << m.name;
  }
  EXPECT_EQ(models::find_model("bogus"), nullptr);
  EXPECT_EQ(models::model_names(), (std::vector<std::string>{"mlp", "cnn", "resnet", "resnet18", "resnet34", "resnet50",
                                                             "gpt", "llama", "bert"}));
}

// models/resnet_spec.h's shapes against the registry's own summaries ("BasicBlocks [2,2,2,2]",
// torchvision's resnet.py numbers), and the small-image resnet against its config keys.
TEST(ModelRegistry, ResNetShapesAreTheRegistrysAndOnlyForResNets) {
  for (const auto& m : models::kModels) {
    if (m.name.rfind("resnet", 0) != 0 || m.name == "resnet") continue;
    models::ModelConfig c;
    c.name = std::string(m.name);
    const auto spec = models::resnet_spec(c);
    std::string blocks;
    for (auto b : spec.blocks) blocks += (blocks.empty() ? "" : ",") + std::to_string(b);
    const std::string kind = spec.bottleneck ? "Bottlenecks [" : "BasicBlocks [";
    EXPECT_NE(m.summary.find(kind + blocks + "]"), std::string_view::npos) << m.name << ": " << m.summary;
    EXPECT_TRUE(spec.imagenet_stem) << m.name;
    EXPECT_EQ(spec.width, 64) << m.name;
  }
  models::ModelConfig small;
  small.name = "resnet";
  small.width = 16;
  small.blocks = {1, 1};
  const auto s = models::resnet_spec(small);
  EXPECT_EQ(s.width, 16);
  EXPECT_EQ(s.blocks, (std::vector<std::int64_t>{1, 1}));
  EXPECT_FALSE(s.imagenet_stem || s.bottleneck);
  small.name = "mlp";
  EXPECT_THROW(models::resnet_spec(small), ConfigError);
}

TEST(ModelRegistry, ConfigValidationTakesItsNamesFromTheRegistry) {
  std::string allowed;
  for (const auto& f : train::config_fields())
    if (f.key == "model.name") allowed = f.allowed;
  EXPECT_EQ(allowed, "one of: " + joined(models::model_names(), ", ", ", "));
  try {
    train::parse_config("[model]\nname = \"bogus\"\n");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is not allowed: one of: mlp, cnn, resnet, resnet18, resnet34, resnet50, gpt"),
              std::string::npos)
        << e.what();
  }
}

// Each model's `keys` are exactly the [model] keys whose doc prefix names it ("mlp: …"), the
// ones key_applies() switches on and off with model.name.
TEST(ModelRegistry, KeysAreTheFieldTablesKeysForThatModel) {
  for (const auto& m : models::kModels) {
    train::Config c;
    c.model.name = std::string(m.name);
    std::vector<std::string> own;
    for (const auto& f : train::config_fields()) {
      if (!starts_with(f.key, "model.") || f.key == "model.name" || !train::key_applies(c, f.key)) continue;
      bool everyone = true;  // a key for every model (init_from) is nobody's own
      for (const auto& other : models::kModels) {
        train::Config o;
        o.model.name = std::string(other.name);
        everyone = everyone && train::key_applies(o, f.key);
      }
      if (!everyone) own.push_back(f.key.substr(6));
    }
    EXPECT_EQ(joined(own, ", ", ", "), m.keys) << m.name;
  }
}

// docs/models.md's table: one row per registered model, with its summary and keys.
TEST(Docs, ModelsTableIsTheRegistry) {
  const std::string text = doc("docs/models.md");
  const auto head = text.find("| name | what | keys |\n|---|---|---|\n");
  ASSERT_NE(head, std::string::npos);
  const auto body = text.find('\n', text.find('\n', head) + 1) + 1;
  const std::string table = text.substr(body, text.find("\n\n", body) - body + 1);
  std::string expect;
  for (const auto& m : models::kModels) {
    std::vector<std::string> keys;
    if (!m.keys.empty())  // torchvision's fixed shapes (resnet18 …) have no keys of their own
      for (const auto& k : split(std::string(m.keys), ',')) keys.push_back(trim(k));
    expect +=
        "| `" + std::string(m.name) + "` | " + std::string(m.summary) + " | " + joined(keys, ", ", ", ", "`") + " |\n";
  }
  EXPECT_EQ(table, expect) << "docs/models.md's table must list include/trainbox/models/registry.h's models";
}

// Where the docs name the models in prose, they name the registry's.
TEST(Docs, ModelListsInTheDocsAreTheRegistrys) {
  const auto all = models::model_names();
  const auto onnx = models::model_names(/*onnx_only=*/true);
  const auto images = names_where([](const models::ModelInfo& m) { return m.input == models::ModelInput::kImages; });
  const auto onnx_images =
      names_where([](const models::ModelInfo& m) { return m.onnx && m.input == models::ModelInput::kImages; });
  const std::vector<std::pair<std::string, std::string>> wanted = {
      {"README.md", "Models " + joined(all, ", ", " and ", "`")},
      {"docs/export.md", "built-in models (" + joined(onnx, ", ", ", ") + ")"},
      {"docs/export.md", "| " + joined(onnx_images, ", ", ", ") + " | `input` float"},
      {"docs/datasets.md", "| 1×28×28 images, 10 classes | " + joined(images, ", ", ", ", "`") + " |"},
      {"docs/datasets.md", "| 3×32×32 images, 10 classes | " + joined(images, ", ", ", ", "`") + " |"},
  };
  for (const auto& [file, phrase] : wanted)
    EXPECT_NE(doc(file).find(phrase), std::string::npos) << file << " should say: " << phrase;
}
