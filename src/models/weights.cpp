#include <trainbox/models/weights.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/io/torch/pt.h>
#include <trainbox/io/safetensors.h>
#include <trainbox/models/models.h>
#include <trainbox/models/registry.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::models {
namespace {

torch::ScalarType to_scalar_type(io::DType d) {
  switch (d) {
    case io::DType::kF64: return torch::kFloat64;
    case io::DType::kF32: return torch::kFloat32;
    case io::DType::kF16: return torch::kFloat16;
    case io::DType::kBF16: return torch::kBFloat16;
    case io::DType::kI64: return torch::kInt64;
    case io::DType::kI32: return torch::kInt32;
    case io::DType::kI16: return torch::kInt16;
    case io::DType::kI8: return torch::kInt8;
    case io::DType::kU8: return torch::kUInt8;
    case io::DType::kBool: return torch::kBool;
  }
  throw DataError("unknown safetensors dtype");  // unreachable: the reader checks dtypes
}
static_assert(io::kDTypeCount == 10, "to_scalar_type and safetensors_dtype cover every safetensors dtype");

}  // namespace

io::DType safetensors_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return io::DType::kF32;
    case torch::kFloat64: return io::DType::kF64;
    case torch::kFloat16: return io::DType::kF16;
    case torch::kBFloat16: return io::DType::kBF16;
    case torch::kInt64: return io::DType::kI64;
    case torch::kInt32: return io::DType::kI32;
    case torch::kInt16: return io::DType::kI16;
    case torch::kInt8: return io::DType::kI8;
    case torch::kUInt8: return io::DType::kU8;
    case torch::kBool: return io::DType::kBool;
    default: throw SystemError(std::string("cannot write tensors of type ") + c10::toString(t) + " to safetensors");
  }
}

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shape_text(c10::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// --- Hugging Face GPT-2 layout ---
// Conv1D modules: their weight is [in, out], nn.Linear's [out, in].
constexpr std::string_view kConv1dWeights[] = {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight",
                                               ".mlp.c_proj.weight"};
// Constant causal-mask buffers of older GPT2Attention versions (not weights).
constexpr std::string_view kHfMaskBuffers[] = {".attn.bias", ".attn.masked_bias"};

// A *.attn.c_attn.weight of shape [C, 3C] (Conv1D) rather than [3C, C] (nn.Linear).
bool is_hugging_face_layout(const std::vector<io::SafetensorsEntry>& entries) {
  for (const auto& e : entries)
    if (ends_with(e.name, "attn.c_attn.weight") && e.shape.size() == 2)
      return e.shape[1] == 3 * e.shape[0] && e.shape[0] > 0;
  return false;
}

bool is_conv1d_weight(const std::string& name) {
  for (auto s : kConv1dWeights)
    if (ends_with(name, s)) return true;
  return false;
}

// --- layouts of families trainbox has no model for: named, instead of listing 50 missing names ---
// A family is recognised by two name endings that only its layout has together (Hugging Face's
// module names). Only a file that does not fit the model is checked: a Trainer API user's own
// Llama module loads a Llama file as any other.
struct ForeignFamily {
  std::string_view family;  // "Llama": the message says "a Llama-family checkpoint"
  std::string_view marker_a, marker_b;
  std::string_view layout;  // what in the file says so
};
constexpr ForeignFamily kForeignFamilies[] = {
    {"Llama", ".self_attn.q_proj.weight", ".mlp.gate_proj.weight",
     "self_attn.q_proj and mlp.gate_proj in model.layers.N: LlamaForCausalLM's layout, which Mistral, Qwen2 and "
     "Gemma share"},
    {"GPT-NeoX", ".attention.query_key_value.weight", ".mlp.dense_h_to_4h.weight",
     "attention.query_key_value and mlp.dense_h_to_4h: GPTNeoXForCausalLM's layout (Pythia)"},
    {"BERT", ".attention.self.query.weight", ".intermediate.dense.weight",
     "attention.self.query and intermediate.dense: BertModel's layout (an encoder)"},
};

const ForeignFamily* foreign_family(const std::vector<io::SafetensorsEntry>& entries) {
  for (const auto& f : kForeignFamilies) {
    bool a = false, b = false;
    for (const auto& e : entries) {
      a = a || ends_with(e.name, f.marker_a);
      b = b || ends_with(e.name, f.marker_b);
    }
    if (a && b) return &f;
  }
  return nullptr;
}

std::string builtin_model_names() {
  std::vector<std::string_view> names;
  for (const auto& m : kModels) names.push_back(m.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// One file of the checkpoint: a safetensors file, or one shard of a sharded folder.
struct WeightsFile {
  std::string path;
  std::uint64_t data_start = 0;  // 8 + the header's size
  std::vector<io::SafetensorsEntry> entries;
};

// One tensor of the file, under the name it has in the model.
struct Source {
  const io::SafetensorsEntry* entry;
  const WeightsFile* file = nullptr;
  bool transpose = false;
  std::vector<std::int64_t> shape() const {
    auto s = entry->shape;
    if (transpose) std::swap(s[0], s[1]);
    return s;
  }
};

// Reads tensors from the files of one checkpoint, each opened once.
class TensorReader {
 public:
  torch::Tensor read(const Source& src) {
    auto& in = streams_[src.file->path];
    if (!in.is_open()) in.open(src.file->path, std::ios::binary);
    if (!in)
      throw DataError(fmt::format("cannot open weights file {}: {}", src.file->path, errno_text(errno)),
                      "check the file's permissions, or copy the model folder again");
    return read_tensor(in, src.file->data_start, src, src.file->path);
  }

 private:
  static torch::Tensor read_tensor(std::ifstream& in, std::uint64_t data_start, const Source& src,
                                   const std::string& path);
  std::map<std::string, std::ifstream> streams_;
};

torch::Tensor TensorReader::read_tensor(std::ifstream& in, std::uint64_t data_start, const Source& src,
                                        const std::string& path) {
  const auto& e = *src.entry;
  auto t = torch::empty(e.shape, torch::TensorOptions().dtype(to_scalar_type(e.dtype)));
  const auto n = static_cast<std::streamsize>(e.end - e.begin);
  in.seekg(static_cast<std::streamoff>(data_start + e.begin));
  if (n > 0 && !in.read(static_cast<char*>(t.data_ptr()), n))
    throw DataError(
        fmt::format("{}: cannot read tensor {} ({} bytes at offset {})", path, e.name, n, data_start + e.begin),
        "the file is truncated or unreadable: write it again");
  return src.transpose ? t.t() : t;
}

std::vector<std::pair<std::string, std::string>> tied_of(torch::nn::Module& m) {
  if (auto* model = dynamic_cast<Model*>(&m)) return model->tied_weights();
  return {};
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> state_dict(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  for (const auto& [name, t] : out) by_name[name] = t;
  for (const auto& [alias, owner] : tied_of(model)) {
    auto it = by_name.find(owner);
    if (it == by_name.end())
      throw SystemError(fmt::format("tied weight {} names {}, which the model does not have", alias, owner));
    out.emplace_back(alias, it->second);
  }
  return out;
}

namespace {
// state_dict(model) as contiguous CPU views; `keep` owns the copies. A tensor that appears
// under two names (tied weights) is converted once, so both views share its data.
std::vector<io::TensorView> cpu_views(torch::nn::Module& model, std::vector<torch::Tensor>& keep) {
  std::vector<io::TensorView> views;
  std::map<const void*, torch::Tensor> converted;  // by the original's TensorImpl
  auto state = state_dict(model);
  keep.reserve(state.size());
  for (auto& [name, t] : state) {
    auto [it, fresh] = converted.try_emplace(t.unsafeGetTensorImpl());
    if (fresh) it->second = t.detach().to(torch::kCPU).contiguous();
    keep.push_back(it->second);
    const auto& c = keep.back();
    views.push_back({name, safetensors_dtype(c.scalar_type()), c.sizes().vec(), c.data_ptr(), c.nbytes()});
  }
  return views;
}
}  // namespace

void save_weights(torch::nn::Module& model, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  std::vector<torch::Tensor> keep;  // contiguous CPU copies stay alive while writing
  io::write_safetensors(path, cpu_views(model, keep), metadata);
}

void save_weights_pt(torch::nn::Module& model, const std::string& path) {
  std::vector<torch::Tensor> keep;
  io::write_pt_state_dict(path, cpu_views(model, keep));
}

namespace {

// The model's names: each registered tensor once (in registration order), and the aliases of tied ones.
struct Targets {
  std::map<std::string, torch::Tensor> tensors;
  std::vector<std::string> order;
  std::map<std::string, std::string> alias_owner;  // alias → the name that owns the tensor
  Model::LoadRules rules;                          // another task's checkpoint (Model::load_rules)
  bool add_base_prefix = false;                    // the file holds the bare base model's names
};

bool has_prefix(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (starts_with(name, p)) return true;
  return false;
}
Targets model_targets(torch::nn::Module& model) {
  Targets tg;
  auto add_target = [&](const std::string& name, const torch::Tensor& t) {
    if (tg.tensors.emplace(name, t).second) tg.order.push_back(name);
  };
  for (const auto& p : model.named_parameters()) add_target(p.key(), p.value());
  for (const auto& b : model.named_buffers()) add_target(b.key(), b.value());
  for (const auto& [alias, owner] : tied_of(model)) {
    if (!tg.tensors.count(owner))
      throw SystemError(fmt::format("tied weight {} names {}, which the model does not have", alias, owner));
    tg.alias_owner[alias] = owner;
  }
  if (auto* m = dynamic_cast<Model*>(&model)) tg.rules = m->load_rules();
  return tg;
}

// The file's names matched to the model's (a Hugging Face GPT-2 file under GPT2Model's names).
struct Matched {
  std::map<std::string, Source> found;        // model name → file tensor
  std::map<std::string, Source> alias_found;  // alias → file tensor
  std::vector<std::string> unexpected;
};
void match_one(Matched& m, const io::SafetensorsEntry& e, const WeightsFile& f, Targets& tg, LoadReport& report) {
  std::string name = e.name;
  Source src{&e, &f};
  if (report.hugging_face_layout) {
    bool mask = false;
    for (auto s : kHfMaskBuffers) mask = mask || ends_with(name, s);
    if (mask) {
      report.ignored.push_back(e.name);
      return;
    }
    if (!starts_with(name, "transformer.") && !tg.alias_owner.count(name))
      name = "transformer." + name;  // GPT2Model's names
    src.transpose = is_conv1d_weight(name) && e.shape.size() == 2;
  }
  if (tg.add_base_prefix) name = tg.rules.base_prefix + name;
  if (!tg.tensors.count(name) && !tg.alias_owner.count(name) && has_prefix(name, tg.rules.unused)) {
    report.ignored.push_back(e.name);  // another task's head, or a constant buffer
    return;
  }
  if (auto it = m.found.find(name); it != m.found.end() && it->second.entry->name == e.name)
    throw DataError(fmt::format("tensor {} is in both {} and {}", e.name, it->second.file->path, f.path),
                    "a checkpoint holds each tensor once: restore the shards from the model's source");
  if (tg.tensors.count(name))
    m.found.emplace(name, src);
  else if (tg.alias_owner.count(name))
    m.alias_found.emplace(name, src);
  else
    m.unexpected.push_back(e.name == name ? name : fmt::format("{} (as {})", e.name, name));
}

Matched match_names(const std::vector<WeightsFile>& files, Targets& tg, LoadReport& report) {
  Matched m;
  if (!tg.rules.base_prefix.empty()) {
    tg.add_base_prefix = true;
    for (const auto& f : files)
      for (const auto& e : f.entries)
        tg.add_base_prefix = tg.add_base_prefix && !starts_with(e.name, tg.rules.base_prefix);
  }
  for (const auto& f : files)
    for (const auto& e : f.entries) match_one(m, e, f, tg, report);
  // A tied tensor may come under its alias alone (HF files keep one of the two names).
  for (const auto& [alias, src] : m.alias_found)
    if (!m.found.count(tg.alias_owner[alias])) m.found.emplace(tg.alias_owner[alias], src);
  return m;
}
// Refuses a file that does not fit the model: missing, unexpected and mis-shaped names, a few of each.
void check_fit(const std::string& path, const std::vector<io::SafetensorsEntry>& entries, Targets& tg, const Matched& m,
               LoadReport& report) {
  std::vector<std::string> missing, mismatched;
  for (const auto& name : tg.order) {
    auto it = m.found.find(name);
    if (it == m.found.end()) {
      if (has_prefix(name, tg.rules.fresh))
        report.fresh.push_back(name);  // a new task head: keeps its initialisation
      else
        missing.push_back(name);
      continue;
    }
    auto want = tg.tensors[name].sizes();
    auto have = it->second.shape();
    const auto file_type = to_scalar_type(it->second.entry->dtype);
    if (tg.tensors[name].is_floating_point() != c10::isFloatingType(file_type)) {
      mismatched.push_back(fmt::format("{} (file {} {}, model {} {})", name, c10::toString(file_type), shape_text(have),
                                       c10::toString(tg.tensors[name].scalar_type()), shape_text(want)));
      continue;
    }
    if (want != c10::IntArrayRef(have))
      mismatched.push_back(fmt::format("{} (file {}{}, model {})", name, shape_text(have),
                                       it->second.transpose ? " after transposing Conv1D" : "", shape_text(want)));
  }
  std::size_t mismatched_tensors = mismatched.size();  // of the model's tensors; tied aliases come on top
  for (const auto& [alias, src] : m.alias_found) {
    auto owner = tg.tensors[tg.alias_owner[alias]].sizes();
    if (owner != c10::IntArrayRef(src.shape()))
      mismatched.push_back(fmt::format("{} (file {}, model {} as {})", alias, shape_text(src.shape()),
                                       shape_text(owner), tg.alias_owner[alias]));
  }
  if (missing.empty() && m.unexpected.empty() && mismatched.empty()) return;
  const ForeignFamily* f = foreign_family(entries);
  if (f && f->family == "Llama" && tg.tensors.count("model.embed_tokens.weight"))
    f = nullptr;  // the model is a llama: the names and shapes below say what differs
  if (f && f->family == "Llama")
    throw DataError(fmt::format("weights file {} is a Llama-family checkpoint ({}), and this model is not a llama "
                                "({} missing, {} unexpected)",
                                path, f->layout, missing.size(), m.unexpected.size()),
                    "set model.name = \"llama\" and model.init_from = the Hugging Face folder (its config.json sets "
                    "the architecture)");
  if (f)
    throw DataError(fmt::format("weights file {} is a {}-family checkpoint ({}); trainbox does not train that family "
                                "yet ({} missing, {} unexpected for this model)",
                                path, f->family, f->layout, missing.size(), m.unexpected.size()),
                    fmt::format("trainbox's models are {} (gpt reads Hugging Face GPT-2 files: GPT2LMHeadModel); "
                                "README.md, \"Not supported yet\", lists the rest",
                                builtin_model_names()));
  // A few names each, then "…": a wrong width mismatches every tensor, and 50 names fill a line nobody reads.
  constexpr std::size_t kShown = 4;
  auto few = [&](const std::vector<std::string>& names) {
    std::vector<std::string> shown(names.begin(), names.begin() + std::min(names.size(), kShown));
    return fmt::format("{}{}", fmt::join(shown, ", "),
                       names.size() > kShown ? fmt::format(", … ({} more)", names.size() - kShown) : "");
  };
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back(fmt::format("{} missing: {}", missing.size(), few(missing)));
  if (!m.unexpected.empty()) parts.push_back(fmt::format("{} unexpected: {}", m.unexpected.size(), few(m.unexpected)));
  if (!mismatched.empty())
    parts.push_back(fmt::format("{} with another shape{}: {}", mismatched_tensors,
                                mismatched.size() > mismatched_tensors
                                    ? fmt::format(" (and {} tied alias{})", mismatched.size() - mismatched_tensors,
                                                  mismatched.size() - mismatched_tensors == 1 ? "" : "es")
                                    : "",
                                few(mismatched)));
  throw DataError(
      fmt::format("weights file {} does not fit the model ({} tensors{}): {}", path, tg.tensors.size(),
                  report.hugging_face_layout ? ", file read as Hugging Face GPT-2 layout" : "", fmt::join(parts, "; ")),
      "build the architecture the file was saved from (model.name and its sizes: n_layer, n_head, n_embd, "
      "block_size, vocab_size, bias; hidden, channels, ...), or point model.init_from at weights of this model");
}

}  // namespace

namespace {

constexpr std::string_view kFolderFix =
    "point model.init_from at a .safetensors file, or at a save_pretrained folder (model.safetensors, or "
    "model-0000k-of-0000N.safetensors shards with model.safetensors.index.json)";

// The shards a model.safetensors.index.json names, in its order of first mention; each must exist.
std::vector<std::string> shards_of_index(const std::filesystem::path& dir, const std::filesystem::path& index) {
  nlohmann::json j;
  std::ifstream in(index);
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{} is not JSON: {}", index.string(), e.what()),
                    "restore the index from the model's source");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    throw DataError(fmt::format("{} has no \"weight_map\" object naming the shards", index.string()),
                    "restore the index from the model's source");
  std::vector<std::string> files;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
      throw DataError(
          fmt::format("{}: tensor {} maps to {}, not a file name in the folder", index.string(), tensor, file.dump()),
          "restore the index from the model's source");
    const auto path = (dir / file.get<std::string>()).string();
    if (std::find(files.begin(), files.end(), path) == files.end()) files.push_back(path);
  }
  std::error_code ec;
  for (const auto& f : files)
    if (!std::filesystem::is_regular_file(f, ec))
      throw DataError(fmt::format("{} names {}, which is not there", index.string(), f),
                      "download or copy the missing shard (every model-0000k-of-0000N.safetensors of the model)");
  return files;
}

}  // namespace

std::vector<std::string> weights_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  // A save_pretrained folder: model.safetensors, or the shards its index names (config.json and the
  // tokenizer's files beside them are read by the llama family, not here).
  const fs::path dir(path);
  if (fs::is_regular_file(dir / "model.safetensors", ec)) return {(dir / "model.safetensors").string()};
  if (fs::exists(dir / "model.safetensors.index.json", ec))
    return shards_of_index(dir, dir / "model.safetensors.index.json");
  if (fs::exists(dir / "pytorch_model.bin", ec) || fs::exists(dir / "pytorch_model.bin.index.json", ec))
    throw DataError(fmt::format("model.init_from = \"{}\" holds pytorch_model.bin (a pickle), which trainbox does "
                                "not read; it reads model.safetensors",
                                path),
                    "save it again with save_pretrained(dir, safe_serialization=True), the default since transformers "
                    "4.35, or convert it with safetensors.torch.save_file");
  throw DataError(fmt::format("model.init_from = \"{}\" is a folder without model.safetensors", path),
                  std::string(kFolderFix));
}

LoadReport load_weights(torch::nn::Module& model, const std::string& named) {
  // --- the files: headers (checked by the reader) and where each one's data starts ---
  std::vector<WeightsFile> files;
  std::vector<io::SafetensorsEntry> all;           // every file's entries: the layout checks read them together
  for (const auto& path : weights_files(named)) {  // a save_pretrained folder: its model.safetensors or shards
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw DataError(fmt::format("cannot open weights file {}: {}", path, errno_text(errno)),
                      "point model.init_from at a .safetensors file (trainbox export, or safetensors' save_file)");
    WeightsFile f{path, 0, io::read_safetensors_header(path)};
    char le[8];
    if (!in.read(le, 8)) throw DataError(path + ": shorter than a safetensors header", "write the file again");
    std::uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(le[i]);
    f.data_start = 8 + header_size;
    all.insert(all.end(), f.entries.begin(), f.entries.end());
    files.push_back(std::move(f));
  }
  const std::string path = files.size() == 1 ? files.front().path : named;

  LoadReport report;
  report.file = path;
  report.files = files.size();
  report.hugging_face_layout = is_hugging_face_layout(all);

  Targets tg = model_targets(model);
  const Matched m = match_names(files, tg, report);
  check_fit(path, all, tg, m, report);
  TensorReader reader;

  // --- read everything, check tied copies agree, then copy (nothing changes on an error) ---
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (model tensor, file tensor)
  for (const auto& name : tg.order)
    if (m.found.count(name)) copies.emplace_back(tg.tensors[name], reader.read(m.found.at(name)));
  for (const auto& [alias, src] : m.alias_found) {
    const auto& owner = tg.alias_owner[alias];
    if (m.found.at(owner).entry == src.entry) continue;  // the alias itself filled its owner
    auto a = reader.read(src);
    auto o = reader.read(m.found.at(owner));
    if (!torch::equal(a.to(o.scalar_type()), o))
      throw DataError(
          fmt::format("weights file {}: {} and {} differ, but the model ties them (one tensor)", path, alias, owner),
          "save the weights of a model with tied embeddings, or drop " + alias + " from the file");
  }
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src.to(dst.scalar_type()));
  report.tensors = copies.size();
  return report;
}

}  // namespace trainbox::models
