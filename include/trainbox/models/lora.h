// trainbox/models/lora.h — LoRA, as PEFT computes and saves it (model.lora.*: docs/lora.md).
//
// A Linear layer W (out × in) named in model.lora.target_modules gets two fp32 matrices,
// lora_A (r × in, kaiming-uniform with a = √5: U(±1/√in)) and lora_B (out × r, zero), and computes
//   y = W·x + b + scale · B·A·dropout(x),   scale = alpha / r   (alpha / √r with rslora)
// with the adapter's input cast to the adapters' dtype and its output to the base's (PEFT's
// LoraLayer.forward). Every other parameter is frozen (requires_grad false): the optimizer, DDP
// and ZeRO see the adapters alone. The adapters are registered as the Linear's submodules
// "lora_A" and "lora_B" (a tensor "weight" each), so their names are PEFT's without its
// "base_model.model." prefix: model.layers.0.self_attn.q_proj.lora_A.weight.
//
//   auto m = models::make_model(cfg, {}, 0);
//   models::load_weights(*m, cfg.init_from);                 // the base
//   auto report = models::apply_lora(*m, cfg);               // adapters on, the rest frozen (and cast)
//   models::load_peft_adapter(*m, "adapter_dir");           // or continue from PEFT's files
//   models::save_peft_adapter(*m, cfg, "out_dir");          // PeftModel.from_pretrained(base, "out_dir")
//   models::merge_lora(*m);                                  // W += scale·B·A; the adapters gone
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/models/config.h>

namespace trainbox::models {

// A Linear that can carry an adapter (the llama family's). The model's forward calls
// add_adapter(x, W·x + b).
class LoraHost {
 public:
  virtual ~LoraHost() = default;
  bool has_adapter() const { return lora_a_.defined(); }
  // Registers lora_A [r, in] and lora_B [out, r] (fp32) on `self` (this Linear's module).
  void attach_adapter(torch::nn::Module& self, std::int64_t in, std::int64_t out, std::int64_t r, double scale,
                      double dropout);
  // y + scale · B·A·dropout(x) when an adapter is attached; y otherwise.
  torch::Tensor add_adapter(const torch::Tensor& x, const torch::Tensor& y, bool training) const;
  // W += scale · B·A (in fp32, stored in W's dtype); the adapter is removed from `self`.
  void merge_adapter(torch::nn::Module& self, torch::Tensor& weight);
  torch::Tensor lora_a() const { return lora_a_; }
  torch::Tensor lora_b() const { return lora_b_; }
  double scale() const { return scale_; }

 private:
  torch::Tensor lora_a_, lora_b_;
  double scale_ = 0, dropout_ = 0;
};

// PEFT's scale: alpha / r, or alpha / √r (rslora).
double lora_scale(const ModelConfig& cfg);

struct LoraReport {
  std::vector<std::string> modules;  // the adapted Linear layers' names
  std::int64_t trainable = 0;        // elements of the adapters
  std::int64_t frozen = 0;           // elements of every other parameter
  std::int64_t frozen_bytes = 0;     // at model.base_dtype
};

// Attaches adapters (cfg.lora_r, lora_alpha, lora_dropout, lora_rslora) to every LoRA-capable
// Linear whose name's last part is in cfg.lora_target_modules, freezes every other parameter and
// casts the frozen ones to cfg.base_dtype. The adapters draw their initial values from torch's
// default generator. ConfigError: a target that matches no layer (the layer names it could have
// meant listed), or a model with no LoRA-capable layer.
LoraReport apply_lora(torch::nn::Module& model, const ModelConfig& cfg);

// The adapter parameters apply_lora would add with rank `r` on `targets`: r·(in + out) per matching layer.
std::int64_t lora_adapter_numel(const torch::nn::Module& model, std::int64_t r,
                                const std::vector<std::string>& targets);

// Whether any layer of `model` carries an adapter.
bool has_lora(const torch::nn::Module& model);

// The adapters' tensors under their PEFT names ("base_model.model." + the module's name).
std::vector<std::pair<std::string, torch::Tensor>> peft_adapter_tensors(const torch::nn::Module& model);

// adapter_config.json + adapter_model.safetensors in `dir` (created; an existing one is refused by
// the caller), as PEFT's save_pretrained writes them. base_name: base_model_name_or_path.
void save_peft_adapter(const torch::nn::Module& model, const ModelConfig& cfg, const std::string& dir,
                       const std::string& base_name);

// adapter_config.json's LoRA keys into cfg (lora_r, alpha, dropout, target_modules, rslora).
// DataError: a missing or unreadable file; ConfigError: a PEFT type or option trainbox does not
// have (a regex target_modules, DoRA, bias training, modules_to_save, per-layer ranks).
void read_peft_adapter_config(const std::string& dir, ModelConfig& cfg);

// Fills the adapters of `model` (apply_lora first) from dir/adapter_model.safetensors: every
// adapter must be in the file at its shape, and the file must hold nothing else. DataError naming
// the tensor otherwise.
void load_peft_adapter(torch::nn::Module& model, const std::string& dir);

// Folds every adapter into its base weight (W += scale·B·A) and removes it: the model is then
// the plain architecture, with the base's dtype. Returns how many layers were merged.
int merge_lora(torch::nn::Module& model);

}  // namespace trainbox::models
