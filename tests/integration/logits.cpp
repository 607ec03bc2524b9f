// Test helper: logits of a trainbox checkpoint's model on a batch.
//   logits CHECKPOINT_DIR INPUT.safetensors OUTPUT.safetensors
// INPUT holds "x" (F32 [N, C, H, W]); OUTPUT gets "logits" (F32 [N, classes]).
#include <cstdio>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/io/safetensors.h>
#include <trainbox/models/models.h>
#include <trainbox/train/config.h>
#include <trainbox/util/strings.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: logits CHECKPOINT INPUT.safetensors OUTPUT.safetensors\n");
    return 2;
  }
  std::string ckpt = argv[1];
  auto cfg = trainbox::train::load_config(ckpt + "/config.toml");
  auto st = nlohmann::json::parse(*trainbox::read_file(ckpt + "/state.json"));
  auto shape = st["input_shape"].get<std::vector<std::int64_t>>();
  auto model = trainbox::models::make_model(cfg.model, {shape[0], shape[1], shape[2]}, st["classes"].get<std::int64_t>());
  torch::serialize::InputArchive ar;
  ar.load_from(ckpt + "/model.pt", torch::kCPU);  // checkpoints from a GPU run too
  model->load(ar);
  model->eval();

  auto entries = trainbox::io::read_safetensors_header(argv[2]);
  std::ifstream in(argv[2], std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const auto& e = entries.at(0);
  auto x = torch::from_blob(bytes.data() + 8 + header + e.begin, e.shape, torch::kFloat32).clone();
  torch::NoGradGuard ng;
  auto logits = model->forward(x).contiguous();
  trainbox::io::write_safetensors(argv[3], {{"logits", trainbox::io::DType::kF32, logits.sizes().vec(), logits.data_ptr(),
                                             logits.nbytes()}});
  return 0;
}
