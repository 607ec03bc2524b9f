// Test helper: logits of a trainbox model on a batch, and a model's initial weights.
//   logits CHECKPOINT_DIR INPUT.safetensors OUTPUT.safetensors
//       the checkpoint's model
//   logits --weights WEIGHTS.safetensors VOCAB INPUT.safetensors OUTPUT.safetensors [KEY=VALUE ...]
//       the model of the config overrides (model.name=gpt model.n_layer=2 ...; `classes` =
//       VOCAB, the input shape data.synthetic_shape's), weights loaded with models::load_weights
//       (strict; Hugging Face GPT-2 layout)
//   logits --init SEED VOCAB OUTPUT.safetensors [KEY=VALUE ...]
//       that model freshly built after torch::manual_seed(SEED), its weights written with
//       models::save_weights (PyTorch state_dict names)
// INPUT holds "x" (F32 [N, C, H, W] images, or I64 [B, T] token ids); OUTPUT gets "logits"
// (F32); further inputs x_1, x_2, … give logits_1, logits_2, …. trainbox errors print one line and exit 2, as the CLI
// does.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <torch/torch.h>

#include <trainbox/io/safetensors.h>
#include <trainbox/models/models.h>
#include <trainbox/models/weights.h>
#include <trainbox/train/config.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

#include "train/checkpoint_state.h"

namespace {

// Every tensor of the file, by name (x, x_1, x_2, …: several batches in one call).
std::vector<std::pair<std::string, torch::Tensor>> read_inputs(const std::string& path) {
  auto entries = trainbox::io::read_safetensors_header(path);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& e : entries) {
    const auto dtype = e.dtype == trainbox::io::DType::kI64 ? torch::kLong : torch::kFloat32;
    out.emplace_back(e.name, torch::from_blob(bytes.data() + 8 + header + e.begin, e.shape, dtype).clone());
  }
  return out;
}

// x → logits, x_N → logits_N.
void write_logits(trainbox::models::Model& model, const std::string& in, const std::string& out) {
  model.eval();
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> keep;
  std::vector<trainbox::io::TensorView> views;
  for (auto& [name, x] : read_inputs(in)) {
    keep.push_back(model.forward(x).to(torch::kFloat32).contiguous());
    const auto& y = keep.back();
    views.push_back({"logits" + name.substr(1), trainbox::io::DType::kF32, y.sizes().vec(), y.data_ptr(), y.nbytes()});
  }
  trainbox::io::write_safetensors(out, views);
}

std::shared_ptr<trainbox::models::Model> from_overrides(const char* vocab, char** first, char** last) {
  trainbox::train::Config cfg;
  for (char** a = first; a != last; ++a) trainbox::train::apply_override(cfg, *a);
  const auto& shape = cfg.data.synthetic_shape;  // the input: data.synthetic_shape=[3,64,64] (default 1×28×28)
  return trainbox::models::make_model(cfg.model, {shape[0], shape[1], shape[2]}, std::stoll(vocab));
}

int run(int argc, char** argv) {
  if (argc >= 6 && std::strcmp(argv[1], "--weights") == 0) {
    auto model = from_overrides(argv[3], argv + 6, argv + argc);
    auto r = trainbox::models::load_weights(*model, argv[2]);
    std::printf("loaded %zu tensors%s\n", r.tensors, r.hugging_face_layout ? " (Hugging Face GPT-2 layout)" : "");
    write_logits(*model, argv[4], argv[5]);
    return 0;
  }
  if (argc >= 5 && std::strcmp(argv[1], "--init") == 0) {
    torch::manual_seed(std::stoull(argv[2]));
    auto model = from_overrides(argv[3], argv + 5, argv + argc);
    trainbox::models::save_weights(*model, argv[4]);
    return 0;
  }
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: logits CHECKPOINT INPUT.safetensors OUTPUT.safetensors\n"
                 "       logits --weights WEIGHTS.safetensors VOCAB INPUT OUTPUT [KEY=VALUE ...]\n"
                 "       logits --init SEED VOCAB OUTPUT [KEY=VALUE ...]\n");
    return 2;
  }
  auto m = trainbox::train::load_checkpoint_model(argv[1], torch::kCPU);  // checkpoints from a GPU run too
  write_logits(*m.model, argv[2], argv[3]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const trainbox::Error& e) {
    return trainbox::report_error(e);
  }
}
