// Test helper: a Hugging Face llama- or bert-family folder through trainbox, in the llm.c "debug state" style.
//   llama_probe DIR IN.safetensors OUT.safetensors [--steps N] [--lr LR] [--logits-only] [--lora ADAPTER_DIR]
// DIR's config.json and safetensors (sharded too) are read as `trainbox train` reads model.init_from
// (models::read_hf_config, models::load_weights). IN holds "x" (I64 [B, T]) and optionally "prompt"
// (I64 [T0]) and "new_tokens" (I64 [1]). OUT gets, all F32 unless said:
//   logits             [B, T, V] in eval mode
//   loss               [1] cross-entropy of logits[:, :-1] against x[:, 1:] (mean); bert: of the class logits
//                      against "y" (classification), or of every position's logits against its own id (mlm)
//   grad.<name>        every trainable parameter's gradient after one backward of that loss (--lora: a
//                      PEFT adapter folder on DIR's base, models/lora.h; the base frozen, the adapters train)
//   aux_loss           [1] a mixture of experts' coef · load-balancing loss (part of loss)
//   grad_ac.<name>     the same with every decoder layer checkpointed (activation checkpointing; not MoE)
//   adam_losses        [N] the loss before each of N torch::optim::AdamW steps on x (lr, betas
//                      0.9/0.999, eps 1e-8, weight decay 0.01: torch.optim.AdamW's defaults but lr)
//   gen_cache, gen_nocache   I64, greedy decoding of prompt for new_tokens tokens (no EOS), with and
//                      without the KV cache
// trainbox errors print one line and exit 2, as the CLI does.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <trainbox/io/safetensors.h>
#include <trainbox/models/bert.h>
#include <trainbox/models/llama.h>
#include <trainbox/models/lora.h>
#include <trainbox/models/weights.h>
#include <trainbox/util/errors.h>

namespace {

using trainbox::io::DType;

std::map<std::string, torch::Tensor> read_inputs(const std::string& path) {
  auto entries = trainbox::io::read_safetensors_header(path);
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  std::map<std::string, torch::Tensor> out;
  for (const auto& e : entries) {
    const auto dtype = e.dtype == DType::kI64 ? torch::kLong : torch::kFloat32;
    out[e.name] = torch::from_blob(bytes.data() + 8 + header + e.begin, e.shape, dtype).clone();
  }
  return out;
}

bool is_bert_folder(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  return text.find("\"model_type\": \"bert\"") != std::string::npos;
}

std::string lora_dir;  // --lora DIR: a PEFT adapter on the base (models/lora.h), the base frozen

std::shared_ptr<trainbox::models::Model> load(const std::string& dir, const std::string& checkpointing) {
  trainbox::models::ModelConfig c;
  c.block_size = 0;
  c.task = "";  // bert: the folder's own head
  if (is_bert_folder(dir))
    trainbox::models::read_bert_config(dir, c);
  else
    trainbox::models::read_hf_config(dir, c);
  c.activation_checkpointing = checkpointing;
  auto m = trainbox::models::make_model(c, {}, 0);
  trainbox::models::load_weights(*m, dir);
  if (!lora_dir.empty()) {
    trainbox::models::read_peft_adapter_config(lora_dir, c);
    trainbox::models::apply_lora(*m, c);
    trainbox::models::load_peft_adapter(*m, lora_dir);
  }
  return m;
}

// The loss the parity compares: next-token cross-entropy for a decoder, cross-entropy against "y" for a
// classifier, and the masked-LM loss of predicting every position's own id for an encoder head.
torch::Tensor y_of_run;
torch::Tensor shifted_loss(trainbox::models::Model& m, const torch::Tensor& x) {
  auto logits = m.forward(x);
  if (logits.dim() == 2) return torch::nn::functional::cross_entropy(logits, y_of_run);
  if (!trainbox::models::is_llama(m))
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(2)}), x.reshape({-1}));
  const auto V = logits.size(2);
  auto loss = torch::nn::functional::cross_entropy(logits.narrow(1, 0, x.size(1) - 1).reshape({-1, V}),
                                                   x.narrow(1, 1, x.size(1) - 1).reshape({-1}));
  // a mixture of experts in training: + coef · load-balancing loss, as transformers' loss with
  // output_router_logits
  auto aux = m.auxiliary_loss();
  return aux.defined() ? loss + aux : loss;
}

struct Out {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  void add(const std::string& name, const torch::Tensor& t) { tensors.emplace_back(name, t.detach().contiguous()); }
  void write(const std::string& path) {
    std::vector<trainbox::io::TensorView> views;
    for (auto& [name, t] : tensors)
      views.push_back({name, t.scalar_type() == torch::kLong ? DType::kI64 : DType::kF32, t.sizes().vec(), t.data_ptr(),
                       t.nbytes()});
    trainbox::io::write_safetensors(path, views);
  }
};

void gradients(const std::string& dir, const torch::Tensor& x, const std::string& checkpointing,
               const std::string& prefix, Out& out) {
  auto m = load(dir, checkpointing);
  m->train();
  shifted_loss(*m, x).backward();
  for (const auto& p : m->named_parameters())
    if (p.value().requires_grad()) out.add(prefix + p.key(), p.value().grad());  // LoRA: the adapters alone
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_probe DIR IN.safetensors OUT.safetensors [--steps N] [--lr LR]\n");
    return 2;
  }
  std::int64_t steps = 10;
  double lr = 1e-3;
  bool logits_only = false;  // --logits-only: the logits (an encoder's hidden states) and nothing else
  for (int i = 4; i < argc; ++i)
    if (std::strcmp(argv[i], "--logits-only") == 0) logits_only = true;
  for (int i = 4; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::stoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--lr") == 0) lr = std::stod(argv[i + 1]);
    if (std::strcmp(argv[i], "--lora") == 0) lora_dir = argv[i + 1];
  }
  const std::string dir = argv[1];
  auto in = read_inputs(argv[2]);
  const auto x = in.at("x");
  if (in.count("y")) y_of_run = in.at("y");
  Out out;
  auto m = load(dir, "none");
  {
    m->eval();
    torch::NoGradGuard ng;
    out.add("logits", m->forward(x));
  }
  if (logits_only) {
    out.write(argv[3]);
    return 0;
  }
  m->train();
  auto loss = shifted_loss(*m, x);
  out.add("loss", loss.reshape({1}));
  if (auto aux = m->auxiliary_loss(); aux.defined()) out.add("aux_loss", aux.reshape({1}));
  const bool moe = m->take_routing_counts().defined();
  gradients(dir, x, "none", "grad.", out);
  if (!moe) gradients(dir, x, "blocks", "grad_ac.", out);  // a mixture of experts refuses checkpointing
  std::vector<float> losses;
  std::vector<torch::Tensor> trainable;
  for (const auto& p : m->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  torch::optim::AdamW opt(trainable, torch::optim::AdamWOptions(lr).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
  for (std::int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto l = shifted_loss(*m, x);
    losses.push_back(l.item<float>());
    l.backward();
    opt.step();
  }
  out.add("adam_losses", torch::tensor(losses));
  if (in.count("prompt")) {
    auto fresh = load(dir, "none");
    trainbox::models::GenerateOptions g;
    g.new_tokens = in.count("new_tokens") ? in.at("new_tokens").item<std::int64_t>() : 64;
    auto gen = at::detail::createCPUGenerator(0);
    out.add("gen_cache", trainbox::models::generate_llama(*fresh, in.at("prompt"), g, gen));
    g.kv_cache = false;
    out.add("gen_nocache", trainbox::models::generate_llama(*fresh, in.at("prompt"), g, gen));
  }
  out.write(argv[3]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const trainbox::Error& e) {
    std::fprintf(stderr, "llama_probe: %s\n", e.what());
    return 2;
  }
}
