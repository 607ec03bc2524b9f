// A model written as a Hugging Face folder (models/hf_export.h).
#include <trainbox/models/hf_export.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/io/durable_file.h>
#include <trainbox/io/made_dirs.h>
#include <trainbox/io/safetensors.h>
#include <trainbox/models/bert.h>
#include <trainbox/models/llama.h>
#include <trainbox/models/weights.h>
#include <trainbox/util/errors.h>

namespace trainbox::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string dtype_name_of(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: return "float32";
  }
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GPT2LMHeadModel's config.json for the built-in GPT.
std::string gpt2_config_json(const ModelConfig& c, std::int64_t vocab, const std::string& dtype) {
  const json special =
      vocab > 50256 ? json(50256) : json(nullptr);  // GPT-2's <|endoftext|>, when the vocabulary has it
  json j = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", vocab},
            {"n_positions", c.block_size},
            {"n_embd", c.n_embd},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_inner", nullptr},
            {"activation_function", "gelu"},  // exact (erf) GELU, as trainbox's GPT; GPT-2's own is gelu_new
            {"layer_norm_epsilon", 1e-5},
            {"resid_pdrop", c.dropout},
            {"embd_pdrop", c.dropout},
            {"attn_pdrop", c.dropout},
            {"initializer_range", 0.02},
            {"tie_word_embeddings", true},
            {"bos_token_id", special},
            {"eos_token_id", special},
            {"dtype", dtype}};
  return j.dump(2) + "\n";
}

// The tensors under Hugging Face's names, CPU and contiguous, in the model's order.
struct Named {
  std::string name;
  torch::Tensor t;
};
std::vector<Named> hf_tensors(Model& model, const ModelConfig& c) {
  std::vector<Named> out;
  std::vector<std::string> aliases;
  for (const auto& [alias, owner] : model.tied_weights()) aliases.push_back(alias);
  for (auto& [name, t] : state_dict(model)) {
    if (std::find(aliases.begin(), aliases.end(), name) != aliases.end())
      continue;  // save_pretrained drops tied copies
    auto cpu = t.detach().to(torch::kCPU);
    if (c.name == "gpt")
      for (auto s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
        if (ends_with(name, s)) cpu = cpu.t();  // nn.Linear [out, in] → Conv1D [in, out]
    out.push_back({name, cpu.contiguous()});
  }
  return out;
}

// Files written into the temp folder, removed again (with the folder) if the export fails.
class TempFolder {
 public:
  explicit TempFolder(const std::string& out) : path_(fmt::format("{}.tmp.{}", out, ::getpid())) {
    made_.create(path_);
  }
  ~TempFolder() {
    if (!done_) made_.remove(files_);
  }
  std::string file(const std::string& name) {
    files_.push_back(name);
    return path_ + "/" + name;
  }
  void commit(const std::string& out) {
    std::error_code ec;
    // the empty folder check_out accepted (not a link); rmdir removes nothing else, and fails if it filled since
    if (fs::is_directory(fs::symlink_status(out, ec))) ::rmdir(out.c_str());
    if (::rename(path_.c_str(), out.c_str()) != 0)
      throw SystemError(fmt::format("cannot rename {} to {}: {}", path_, out, std::strerror(errno)));
    io::fsync_path(fs::path(out).parent_path().empty() ? "." : fs::path(out).parent_path().string());
    done_ = true;
  }
  const std::vector<std::string>& files() const { return files_; }

 private:
  std::string path_;
  io::MadeDirs made_;
  std::vector<std::string> files_;
  bool done_ = false;
};

// config.json, with the sizes a config leaves to the data (vocab_size 0, num_labels 0) read off the weights.
std::string config_json(Model& model, const ModelConfig& c, const std::string& dtype) {
  const auto params = model.named_parameters();
  auto rows = [&](const std::string& name) { return params.contains(name) ? params[name].size(0) : 0; };
  ModelConfig sized = c;
  if (c.name == "llama") {
    if (sized.vocab_size <= 0) sized.vocab_size = rows("model.embed_tokens.weight");
    return hf_config_json(sized, dtype);
  }
  if (c.name == "bert") {
    const std::string base = c.task == "encoder" ? "" : "bert.";
    sized.vocab_size = rows(base + "embeddings.word_embeddings.weight");
    if (c.task == "classification") sized.num_labels = rows("classifier.weight");
    return bert_config_json(sized, dtype);
  }
  return gpt2_config_json(c, rows("transformer.wte.weight"), dtype);
}

void check_out(const std::string& out) {
  std::error_code ec;
  const auto st = fs::symlink_status(out, ec);  // a link is refused, never removed: it is not a folder of ours
  if (fs::exists(st) && !(fs::is_directory(st) && fs::is_empty(out, ec)))
    throw UsageError(fmt::format("{} exists; a Hugging Face export writes a new folder", out),
                     "choose a new OUT (trainbox export never writes into or replaces a folder that holds files)");
  const fs::path parent = fs::path(out).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw UsageError(fmt::format("the folder {} (of OUT) does not exist", parent.string()), "create it first");
}

// Writes the weights as one model.safetensors or shards with their index.
std::size_t write_weights(TempFolder& tmp, const std::vector<Named>& tensors, std::uint64_t max_shard) {
  std::vector<std::vector<const Named*>> shards(1);
  std::uint64_t in_shard = 0, total = 0;
  for (const auto& n : tensors) {
    const std::uint64_t bytes = n.t.nbytes();
    if (in_shard > 0 && in_shard + bytes > max_shard) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(&n);
    in_shard += bytes;
    total += bytes;
  }
  json weight_map = json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shards.size() == 1 ? "model.safetensors"
                                                : fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, shards.size());
    std::vector<io::TensorView> views;
    for (const auto* n : shards[i]) {
      views.push_back(
          {n->name, safetensors_dtype(n->t.scalar_type()), n->t.sizes().vec(), n->t.data_ptr(), n->t.nbytes()});
      weight_map[n->name] = name;
    }
    io::write_safetensors(tmp.file(name), views, {{"format", "pt"}});
  }
  if (shards.size() > 1)
    io::DurableFile::write_text(tmp.file("model.safetensors.index.json"),
                                json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  return shards.size();
}

void copy_tokenizer(TempFolder& tmp, const std::string& from) {
  std::error_code ec;
  if (from.empty() || !fs::is_directory(from, ec)) return;
  for (const char* name : kTokenizerFiles) {
    const fs::path src = fs::path(from) / name;
    if (!fs::is_regular_file(src, ec)) continue;
    std::ifstream in(src, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw SystemError(fmt::format("cannot read {}", src.string()));
    io::DurableFile::write_text(tmp.file(name), text.str());
  }
}

}  // namespace

HfExportResult write_hf_folder(Model& model, const ModelConfig& c, const std::string& out, const HfExportOptions& o) {
  if (c.name != "llama" && c.name != "gpt" && c.name != "bert")
    throw UsageError(fmt::format("model.name = \"{}\" has no Hugging Face layout", c.name),
                     "export it as .safetensors, .pt or .onnx; --format hf writes llama, bert and gpt models");
  if (c.name == "gpt" && !c.bias)
    throw UsageError("a gpt with model.bias = false has no GPT2LMHeadModel layout (GPT-2 has biases)",
                     "export it as .safetensors (PyTorch state_dict names) instead");
  if (o.max_shard_bytes < 1) throw UsageError("--max-shard-size must be at least 1 byte", "e.g. --max-shard-size 5GB");
  check_out(out);
  const auto tensors = hf_tensors(model, c);
  const std::string dtype = dtype_name_of(tensors.front().t.scalar_type());
  const std::string config = config_json(model, c, dtype);
  TempFolder tmp(out);
  io::DurableFile::write_text(tmp.file("config.json"), config);
  if (c.name == "llama") io::DurableFile::write_text(tmp.file("generation_config.json"), hf_generation_config_json(c));
  HfExportResult r;
  r.shards = write_weights(tmp, tensors, o.max_shard_bytes);
  copy_tokenizer(tmp, o.tokenizer_from);
  io::fsync_path(fmt::format("{}.tmp.{}", out, ::getpid()));
  r.files = tmp.files();
  r.tensors = tensors.size();
  tmp.commit(out);
  return r;
}

}  // namespace trainbox::models
