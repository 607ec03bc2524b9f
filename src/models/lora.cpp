// LoRA adapters on the llama family's Linear layers, and PEFT's files (models/lora.h).
#include <trainbox/models/lora.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/io/safetensors.h>
#include <trainbox/models/activation_checkpoint.h>
#include <trainbox/models/weights.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::models {
namespace {

namespace fs = std::filesystem;
using torch::Tensor;

constexpr std::string_view kPeftPrefix = "base_model.model.";
constexpr const char* kAdapterConfig = "adapter_config.json";
constexpr const char* kAdapterWeights = "adapter_model.safetensors";

// One of an adapter's two matrices: a module with a "weight", as PEFT's nn.Linear(bias=False).
class LoraWeightImpl : public torch::nn::Module {
 public:
  explicit LoraWeightImpl(Tensor w) { weight = register_parameter("weight", std::move(w)); }
  Tensor weight;
};

std::string last_part(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

torch::ScalarType base_dtype_of(const std::string& s) {
  if (s == "bf16") return torch::kBFloat16;
  if (s == "fp16") return torch::kFloat16;
  return torch::kFloat32;
}

// The model's LoRA-capable layers, by name.
std::vector<std::pair<std::string, LoraHost*>> hosts_of(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, LoraHost*>> out;
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (auto* h = dynamic_cast<LoraHost*>(item.value().get())) out.emplace_back(item.key(), h);
  return out;
}

// ConfigError for targets that match no layer: the names the model's layers do have.
void check_targets(const std::vector<std::pair<std::string, LoraHost*>>& hosts, const std::vector<std::string>& targets,
                   const std::set<std::string>& matched) {
  std::set<std::string> names;
  for (const auto& [name, h] : hosts) names.insert(last_part(name));
  for (const auto& t : targets) {
    if (matched.count(t)) continue;
    const std::vector<std::string> all(names.begin(), names.end());
    const std::string near = closest_match(t, all);
    throw ConfigError(
        fmt::format("model.lora.target_modules names \"{}\", which matches no Linear layer of this "
                    "model{}; its layers are: {}",
                    t, near.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", near), fmt::join(all, ", ")),
        "list layer names from those, e.g. model.lora.target_modules = [\"q_proj\", \"v_proj\"]");
  }
}

// An adapter tensor of the file (F32, BF16 or F16: what PEFT saves), as it is stored.
Tensor read_entry(std::ifstream& in, std::uint64_t data_start, const io::SafetensorsEntry& e, const std::string& path) {
  torch::ScalarType type = torch::kFloat;
  if (e.dtype == io::DType::kBF16)
    type = torch::kBFloat16;
  else if (e.dtype == io::DType::kF16)
    type = torch::kFloat16;
  else if (e.dtype != io::DType::kF32)
    throw DataError(fmt::format("{}: {} is {}, not a floating-point adapter", path, e.name, io::dtype_name(e.dtype)),
                    "write the adapter again with PEFT's save_pretrained");
  auto t = torch::empty(e.shape, torch::dtype(type));
  in.seekg(static_cast<std::streamoff>(data_start + e.begin));
  in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
  return t;
}
}  // namespace

// --- LoraHost ---
void LoraHost::attach_adapter(torch::nn::Module& self, std::int64_t in, std::int64_t out, std::int64_t r, double scale,
                              double dropout) {
  auto a = torch::empty({r, in});
  auto b = torch::zeros({out, r});
  {
    torch::NoGradGuard ng;  // PEFT: kaiming_uniform_(A, a=√5), i.e. U(±1/√in); B zero
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    a.uniform_(-bound, bound);
  }
  auto ma = self.register_module("lora_A", std::make_shared<LoraWeightImpl>(a));
  auto mb = self.register_module("lora_B", std::make_shared<LoraWeightImpl>(b));
  lora_a_ = ma->weight;
  lora_b_ = mb->weight;
  scale_ = scale;
  dropout_ = dropout;
}

Tensor LoraHost::add_adapter(const Tensor& x, const Tensor& y, bool training) const {
  auto h = x.to(lora_a_.scalar_type());
  if (dropout_ > 0) h = trainbox::dropout(h, dropout_, training);
  // PEFT: result + lora_B(lora_A(dropout(x))) * scaling, then back to the base's dtype
  return (y + torch::linear(torch::linear(h, lora_a_), lora_b_) * scale_).to(y.scalar_type());
}

void LoraHost::merge_adapter(torch::nn::Module& self, Tensor& weight) {
  torch::NoGradGuard ng;
  auto delta = torch::matmul(lora_b_.to(torch::kFloat), lora_a_.to(torch::kFloat)) * scale_;
  weight.copy_((weight.to(torch::kFloat) + delta.to(weight.device())).to(weight.scalar_type()));
  self.unregister_module("lora_A");
  self.unregister_module("lora_B");
  lora_a_ = Tensor();
  lora_b_ = Tensor();
}

double lora_scale(const ModelConfig& cfg) {
  const double r = static_cast<double>(cfg.lora_r);
  return cfg.lora_rslora ? cfg.lora_alpha / std::sqrt(r) : cfg.lora_alpha / r;
}

LoraReport apply_lora(torch::nn::Module& model, const ModelConfig& cfg) {
  auto hosts = hosts_of(model);
  if (hosts.empty())
    throw ConfigError(fmt::format("model.lora.r = {}: this model has no layer that takes an adapter", cfg.lora_r),
                      "LoRA is built for model.name = \"llama\"; set model.lora.r = 0 for a full fine-tune");
  const std::set<std::string> targets(cfg.lora_target_modules.begin(), cfg.lora_target_modules.end());
  std::set<std::string> matched;
  std::vector<std::pair<std::string, LoraHost*>> chosen;
  for (const auto& [name, h] : hosts)
    if (targets.count(last_part(name))) {
      matched.insert(last_part(name));
      chosen.emplace_back(name, h);
    }
  check_targets(hosts, cfg.lora_target_modules, matched);

  LoraReport rep;
  const auto dtype = base_dtype_of(cfg.base_dtype);
  {
    torch::NoGradGuard ng;
    for (auto& p : model.parameters()) {  // the base, before the adapters exist
      p.set_requires_grad(false);
      if (p.scalar_type() != dtype && p.is_floating_point()) p.set_data(p.to(dtype));
      rep.frozen += p.numel();
      rep.frozen_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
    }
    for (auto& b : model.buffers())
      if (b.is_floating_point() && b.scalar_type() != dtype) b.set_data(b.to(dtype));
  }
  const double scale = lora_scale(cfg);
  for (auto& [name, h] : chosen) {
    auto* self = dynamic_cast<torch::nn::Module*>(h);
    const auto w = self->named_parameters(/*recurse=*/false)["weight"];
    h->attach_adapter(*self, w.size(1), w.size(0), cfg.lora_r, scale, cfg.lora_dropout);
    if (w.device() != h->lora_a().device()) self->to(w.device());  // the base's tensors are there already
    rep.trainable += h->lora_a().numel() + h->lora_b().numel();
    rep.modules.push_back(name);
  }
  return rep;
}

std::int64_t lora_adapter_numel(const torch::nn::Module& model, std::int64_t r,
                                const std::vector<std::string>& targets) {
  const std::set<std::string> want(targets.begin(), targets.end());
  std::int64_t n = 0;
  for (const auto& [name, h] : hosts_of(model)) {
    if (!want.count(last_part(name))) continue;
    const auto w = dynamic_cast<torch::nn::Module*>(h)->named_parameters(/*recurse=*/false)["weight"];
    n += r * (w.size(0) + w.size(1));
  }
  return n;
}

bool has_lora(const torch::nn::Module& model) {
  for (const auto& [name, h] : hosts_of(model))
    if (h->has_adapter()) return true;
  return false;
}

std::vector<std::pair<std::string, Tensor>> peft_adapter_tensors(const torch::nn::Module& model) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, h] : hosts_of(model)) {
    if (!h->has_adapter()) continue;
    out.emplace_back(fmt::format("{}{}.lora_A.weight", kPeftPrefix, name), h->lora_a());
    out.emplace_back(fmt::format("{}{}.lora_B.weight", kPeftPrefix, name), h->lora_b());
  }
  return out;
}

void save_peft_adapter(const torch::nn::Module& model, const ModelConfig& cfg, const std::string& dir,
                       const std::string& base_name) {
  auto tensors = peft_adapter_tensors(model);
  if (tensors.empty())
    throw UsageError("this model has no LoRA adapters to write", "export a checkpoint trained with model.lora.r > 0");
  std::set<std::string> targets;
  for (const auto& [name, t] : tensors) {
    const auto stem = name.substr(0, name.rfind(".lora_"));
    targets.insert(last_part(stem));
  }
  nlohmann::ordered_json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = base_name;
  j["r"] = cfg.lora_r;
  j["lora_alpha"] = cfg.lora_alpha;
  j["lora_dropout"] = cfg.lora_dropout;
  j["target_modules"] = std::vector<std::string>(targets.begin(), targets.end());
  j["use_rslora"] = cfg.lora_rslora;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["modules_to_save"] = nullptr;
  j["use_dora"] = false;
  fs::create_directories(dir);
  std::vector<Tensor> keep;
  std::vector<io::TensorView> views;
  for (auto& [name, t] : tensors) {
    keep.push_back(t.detach().to(torch::kCPU).contiguous());
    const auto& c = keep.back();
    views.push_back({name, safetensors_dtype(c.scalar_type()), c.sizes().vec(), c.data_ptr(), c.nbytes()});
  }
  io::write_safetensors((fs::path(dir) / kAdapterWeights).string(), views, {{"format", "pt"}});
  const std::string path = (fs::path(dir) / kAdapterConfig).string();
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out.flush()) throw SystemError(fmt::format("cannot write {}", path), "check the disk and the folder's rights");
}

void read_peft_adapter_config(const std::string& dir, ModelConfig& cfg) {
  const std::string path = (fs::path(dir) / kAdapterConfig).string();
  std::ifstream in(path);
  if (!in)
    throw DataError(fmt::format("model.lora.init_from = {}: no {} there", dir, kAdapterConfig),
                    "point it at a PEFT adapter folder (what PeftModel.save_pretrained or trainbox export "
                    "--adapter writes)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{} is not JSON: {}", path, e.what()), "write the adapter folder again");
  }
  auto fix = std::string("train a LoRA adapter (peft_type LORA) with plain options, or start a new one");
  if (j.value("peft_type", "") != "LORA")
    throw ConfigError(fmt::format("{}: peft_type {} is not LORA", path, j.value("peft_type", "(none)")), fix);
  if (!j.contains("target_modules") || !j["target_modules"].is_array())
    throw ConfigError(
        fmt::format("{}: target_modules is not a list of names (a regular expression is not supported)", path),
        "list the layer names, e.g. [\"q_proj\", \"v_proj\"]");
  for (const char* key : {"use_dora", "modules_to_save", "rank_pattern", "alpha_pattern", "layers_to_transform"}) {
    const bool set = j.contains(key) && !j[key].is_null() && !(j[key].is_boolean() && !j[key].get<bool>()) &&
                     !(j[key].is_structured() && j[key].empty());
    if (set) throw ConfigError(fmt::format("{}: {} is set; trainbox's LoRA does not have it", path, key), fix);
  }
  if (j.value("bias", "none") != "none")
    throw ConfigError(fmt::format("{}: bias = \"{}\" (trained biases) is not supported", path, j.value("bias", "")),
                      fix);
  cfg.lora_r = j.value("r", std::int64_t{0});
  cfg.lora_alpha = j.value("lora_alpha", 8.0);
  cfg.lora_dropout = j.value("lora_dropout", 0.0);
  cfg.lora_rslora = j.value("use_rslora", false);
  cfg.lora_target_modules = j["target_modules"].get<std::vector<std::string>>();
  if (cfg.lora_r <= 0 || cfg.lora_alpha <= 0)
    throw DataError(fmt::format("{}: r = {} and lora_alpha = {} must be positive", path, cfg.lora_r, cfg.lora_alpha),
                    "the adapter folder is damaged: write it again");
}

void load_peft_adapter(torch::nn::Module& model, const std::string& dir) {
  const std::string path = (fs::path(dir) / kAdapterWeights).string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw DataError(fmt::format("model.lora.init_from = {}: no {} there", dir, kAdapterWeights),
                    "point it at a PEFT adapter folder (adapter_model.safetensors; a .bin adapter is not read)");
  const auto entries = io::read_safetensors_header(path);  // DataError: damaged
  std::map<std::string, Tensor> want;
  for (auto& [name, t] : peft_adapter_tensors(model)) want[name] = t;
  std::ifstream in(path, std::ios::binary);
  std::uint64_t header = 0;
  in.read(reinterpret_cast<char*>(&header), 8);
  std::map<std::string, Tensor> read;
  for (const auto& e : entries) {
    std::string name = e.name;
    if (const auto at = name.find(".default.weight"); at != std::string::npos)  // a whole state_dict's name
      name = name.substr(0, at) + ".weight";
    const auto it = want.find(name);
    if (it == want.end())
      throw DataError(fmt::format("{} holds {}, which is no adapter of this model (model.lora.target_modules, "
                                  "the base's layers)",
                                  path, e.name),
                      "use the adapter trained on this base, or set the model.lora keys it was trained with");
    if (it->second.sizes().vec() != e.shape)
      throw DataError(fmt::format("{}: {} has shape [{}], but this base's layer needs [{}]", path, e.name,
                                  fmt::join(e.shape, ", "), fmt::join(it->second.sizes(), ", ")),
                      "the adapter was trained on another base (or another r): use its own base");
    read[name] = read_entry(in, 8 + header, e, path);
  }
  if (!in) throw DataError(fmt::format("{} could not be read whole", path), "write the adapter folder again");
  for (const auto& [name, t] : want)
    if (!read.count(name))
      throw DataError(fmt::format("{} lacks {}", path, name),
                      "the adapter was trained on other layers: set model.lora.target_modules to its own");
  torch::NoGradGuard ng;
  for (auto& [name, t] : want) t.copy_(read[name].to(t.device(), t.scalar_type()));
}

int merge_lora(torch::nn::Module& model) {
  int n = 0;
  for (auto& [name, h] : hosts_of(model)) {
    if (!h->has_adapter()) continue;
    auto* self = dynamic_cast<torch::nn::Module*>(h);
    auto w = self->named_parameters(/*recurse=*/false)["weight"];
    h->merge_adapter(*self, w);
    ++n;
  }
  return n;
}

}  // namespace trainbox::models
