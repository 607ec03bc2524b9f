// Export writers: what ONNX export refuses (naming what is missing) and the .pt writer's
// bad-argument checks. The formats themselves are checked by their real readers in
// tests/integration/export_formats.py (torch.load, onnx.checker, ONNX Runtime).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "temp_dir.h"
#include <trainbox/io/torch/pt.h>
#include <trainbox/models/models.h>
#include <trainbox/models/onnx.h>
#include <trainbox/models/weights.h>
#include <trainbox/util/errors.h>

using namespace trainbox;

namespace {
using test::TempDir;

// An mlp with one more layer than the built-in one: the writer must not drop it silently.
class MlpPlusGate : public models::Model {
 public:
  MlpPlusGate() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 3));
    fc2 = register_module("fc2", torch::nn::Linear(3, 2));
    gate = register_module("gate", torch::nn::Linear(2, 2));
  }
  torch::Tensor forward(torch::Tensor x) override { return gate(fc2(torch::relu(fc1(x.flatten(1))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, gate{nullptr};
};

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_FALSE(e.hint().empty());
    return e.what();
  }
  ADD_FAILURE() << "no UsageError";
  return {};
}

}  // namespace

TEST(OnnxExport, ALayerTheWriterDoesNotKnowIsNamed) {
  TempDir d;
  MlpPlusGate net;
  models::ModelConfig c;
  c.hidden = {3};
  const std::string out = d.path + "/net.onnx";
  auto msg = usage_error_of([&] { models::export_onnx(net, c, {1, 2, 2}, 2, out); });
  EXPECT_NE(msg.find("gate.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gate.bias"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(OnnxExport, AMissingTensorIsNamed) {
  TempDir d;
  models::ModelConfig c;
  c.name = "mlp";
  c.hidden = {3, 3};  // the writer expects fc1..fc3; the module has fc1, fc2 and gate
  MlpPlusGate net;
  auto msg = usage_error_of([&] { models::export_onnx(net, c, {1, 2, 2}, 2, d.path + "/net.onnx"); });
  EXPECT_NE(msg.find("fc3.weight"), std::string::npos) << msg;
}

TEST(OnnxExport, AModelWithoutAWriterAndAnUnknownDtype) {
  TempDir d;
  models::ModelConfig c;
  auto net = models::make_model(c, {1, 28, 28}, 10);
  c.name = "vit";
  auto msg = usage_error_of([&] { models::export_onnx(*net, c, {1, 28, 28}, 10, d.path + "/a.onnx"); });
  EXPECT_NE(msg.find("vit has no ONNX graph writer"), std::string::npos) << msg;
  c.name = "mlp";
  models::OnnxOptions o;
  o.dtype = "fp8";
  msg = usage_error_of([&] { models::export_onnx(*net, c, {1, 28, 28}, 10, d.path + "/b.onnx", o); });
  EXPECT_NE(msg.find("fp8"), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::is_empty(d.path));
}

TEST(OnnxExport, EveryBuiltInModelHasAGraph) {
  for (const auto& name : models::model_names()) {
    models::ModelConfig c;
    c.name = name;
    c.width = 4, c.blocks = {1, 1}, c.channels = {4}, c.n_layer = 1, c.n_embd = 8, c.n_head = 2, c.block_size = 4;
    c.vocab_size = 16;  // bert needs its vocabulary; the others take it over the classes
    auto net = models::make_model(c, {1, 8, 8}, 10);
    std::vector<torch::Tensor> keep;
    auto m = models::onnx_model(*net, c, {1, 8, 8}, 10, {}, keep);
    EXPECT_EQ(m.graph.outputs.at(0).name, "logits") << name;
    EXPECT_EQ(m.graph.nodes.back().outputs.at(0), "logits") << name;
    EXPECT_EQ(m.opset, 17);
  }
}

TEST(PtWriter, BadArgumentsWriteNothing) {
  TempDir d;
  float w[4] = {1, 2, 3, 4};
  const std::string out = d.path + "/x.pt";
  EXPECT_THROW(io::write_pt_state_dict(out, {{"a", io::DType::kF32, {2, 2}, w, 12}}), UsageError);  // 12 ≠ 16 bytes
  EXPECT_THROW(io::write_pt_state_dict(out, {{"a", io::DType::kF32, {4}, w, 16}, {"a", io::DType::kF32, {4}, w, 16}}),
               UsageError);
  EXPECT_THROW(io::write_pt_state_dict(out, {{"", io::DType::kF32, {4}, w, 16}}), UsageError);
  EXPECT_TRUE(std::filesystem::is_empty(d.path));
  EXPECT_THROW(io::write_pt_state_dict(d.path + "/missing/x.pt", {{"a", io::DType::kF32, {4}, w, 16}}), SystemError);
}

TEST(PtWriter, AnyModuleIsAZipWithItsNames) {
  TempDir d;
  torch::nn::Sequential user(torch::nn::Linear(3, 2), torch::nn::BatchNorm1d(2));  // a Trainer user's own module
  models::save_weights_pt(*user, d.path + "/user.pt");
  std::ifstream in(d.path + "/user.pt", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(bytes.substr(0, 2), "PK");
  for (const char* name : {"0.weight", "0.bias", "1.running_mean", "1.num_batches_tracked", "archive/data.pkl"})
    EXPECT_NE(bytes.find(name), std::string::npos) << name;
}
