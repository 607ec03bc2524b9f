// `trainbox train` and `trainbox export`: the built-in models and datasets, named by the
// config, handed to the Trainer.
#include <trainbox/train/run.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/data/dataset.h>
#include <trainbox/data/text.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/io/atomic_file.h>
#include <trainbox/io/onnx.h>
#include <trainbox/models/bert.h>
#include <trainbox/models/hf_export.h>
#include <trainbox/models/llama.h>
#include <trainbox/models/lora.h>
#include <trainbox/models/models.h>
#include <trainbox/models/onnx.h>
#include <trainbox/models/weights.h>
#include <trainbox/train/trainer.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

#include "checkpoint_state.h"

namespace trainbox::train {
namespace {
std::string join_floats(const std::vector<float>& v) { return fmt::format("{}", fmt::join(v, ",")); }
std::vector<float> floats_of(const nlohmann::json& extra, const char* key) {
  std::vector<float> out;
  if (!extra.contains(key) || !extra[key].is_string()) return out;
  for (const auto& part : split(extra[key].get<std::string>(), ',')) {
    if (part.empty()) continue;
    const auto v = parse_real(part);
    if (!v)
      throw DataError(fmt::format("the checkpoint's {} holds \"{}\", not a number", key, part),
                      "the checkpoint was edited or damaged: resume from another one");
    out.push_back(static_cast<float>(*v));
  }
  return out;
}
}  // namespace

Config with_model_folder(Config c, std::vector<std::string>* notes) {
  std::error_code ec;
  // a PEFT adapter's adapter_config.json sets the model.lora keys (models/lora.h)
  if (!c.model.lora_init_from.empty()) models::read_peft_adapter_config(c.model.lora_init_from, c.model);
  const bool family = c.model.name == "llama" || c.model.name == "bert";
  if (!family || c.model.init_from.empty() || !std::filesystem::is_directory(c.model.init_from, ec)) return c;
  auto read = c.model.name == "llama" ? models::read_hf_config(c.model.init_from, c.model)
                                      : models::read_bert_config(c.model.init_from, c.model);
  if (notes) *notes = std::move(read);
  return c;
}

namespace {
// model.lora.r > 0: adapters on the loaded base, the rest frozen at model.base_dtype (models/lora.h).
void attach_lora(models::Model& model, const Config& cfg, bool quiet) {
  if (cfg.model.lora_r == 0) return;
  const auto rep = models::apply_lora(model, cfg.model);  // ConfigError: a target that matches nothing
  if (!cfg.model.lora_init_from.empty()) models::load_peft_adapter(model, cfg.model.lora_init_from);
  if (quiet || dist::WorkerEnv::from_environment().rank != 0) return;
  const double total = double(rep.trainable + rep.frozen);
  std::fprintf(
      stderr,
      "trainbox train: LoRA r=%lld alpha=%g on %zu layers (%s): %lld trainable parameters (%.3f%%), "
      "%lld frozen at %s (%.1f MiB)%s\n",
      static_cast<long long>(cfg.model.lora_r), cfg.model.lora_alpha, rep.modules.size(),
      fmt::format("{}", fmt::join(cfg.model.lora_target_modules, ", ")).c_str(), static_cast<long long>(rep.trainable),
      total > 0 ? 100.0 * double(rep.trainable) / total : 0.0, static_cast<long long>(rep.frozen),
      cfg.model.base_dtype.c_str(), double(rep.frozen_bytes) / (1 << 20),
      cfg.model.lora_init_from.empty() ? "" : fmt::format(", adapters from {}", cfg.model.lora_init_from).c_str());
}
}  // namespace

TrainSummary run_training(const TrainOptions& o) {
  // Everything that can be wrong with the input — config, data, model, initial weights — is
  // found here, before the Trainer touches the run dir: a bad input leaves nothing behind.
  std::vector<std::string> folder_notes;
  const Config cfg = with_model_folder(o.config, &folder_notes);
  validate(cfg);
  if (!o.quiet && dist::WorkerEnv::from_environment().rank == 0)
    for (const auto& n : folder_notes)
      std::fprintf(stderr, "trainbox train: %s: %s\n", cfg.model.init_from.c_str(), n.c_str());
  data::Splits splits = data::load_splits(cfg.data, static_cast<std::uint64_t>(cfg.train.seed), cfg.model.block_size);
  torch::manual_seed(static_cast<std::uint64_t>(cfg.train.seed));  // initialisation depends on the seed alone
  models::InputShape shape;
  if (splits.sample_shape.size() == 3) shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
  if (splits.token_vocab > 0 && cfg.model.vocab_size > 0 && splits.token_vocab > cfg.model.vocab_size)
    throw DataError(fmt::format("{} holds token id {}, beyond the model's vocabulary of {} (model.vocab_size)",
                                cfg.data.path, splits.token_vocab - 1, cfg.model.vocab_size),
                    "tokenize the data with the model's own tokenizer, or use a model with a larger vocabulary");
  std::shared_ptr<models::Model> model;
  {
    const models::SkipInitGuard skip(!cfg.model.init_from.empty());  // the file fills it (strict)
    model = models::make_model(cfg.model, shape, splits.classes);
  }
  if (!cfg.model.init_from.empty()) {
    auto r = models::load_weights(*model, cfg.model.init_from);
    if (!o.quiet && !r.fresh.empty())
      std::fprintf(stderr, "trainbox train: %zu tensors start fresh (a new head: %s%s), %zu of the file unused\n",
                   r.fresh.size(), r.fresh.front().c_str(), r.fresh.size() > 1 ? ", …" : "", r.ignored.size());
    if (!o.quiet)
      std::fprintf(stderr, "trainbox train: initial weights from %s (%zu tensors%s)\n", r.file.c_str(), r.tensors,
                   r.hugging_face_layout ? ", Hugging Face GPT-2 layout: Conv1D weights transposed"
                   : r.files > 1         ? fmt::format(", {} shards", r.files).c_str()
                                         : "");
  }

  attach_lora(*model, cfg, o.quiet);

  TrainOptions to = o;
  to.config = cfg;  // config.toml holds the architecture read from the folder: resume and export need no folder
  // Stage 3: the module stays sharded after fit() (a model that only fits sharded never has to
  // fit whole on a rank); the safetensors export below reads the final checkpoint instead.
  to.whole_weights_after_fit = false;
  Trainer trainer(to);
  trainer.model(model).data(splits);
  if (!splits.input_mean.empty())  // what `trainbox export` writes into an ONNX model's metadata
    trainer.checkpoint_meta("input_mean", join_floats(splits.input_mean))
        .checkpoint_meta("input_std", join_floats(splits.input_std));
  TrainSummary sum = trainer.fit();
  if (auto h = data::unigram_entropy(*splits.train)) sum.unigram_loss = *h;
  if (cfg.checkpoint.export_safetensors && dist::WorkerEnv::from_environment().rank == 0) {
    const auto whole = cfg.dist.zero_stage >= 3 ? load_checkpoint_model(sum.checkpoint, torch::kCPU).model : model;
    models::save_weights(*whole, o.run_dir + "/model.safetensors", {{"trainbox_model", cfg.model.name}});
  }
  return sum;
}

namespace {
// OUT's extensions and their formats; any other name is safetensors (what `trainbox export` has always written).
struct ExportExtension {
  std::string_view ext, format;
};
constexpr ExportExtension kExportExtensions[] = {
    {".safetensors", "safetensors"}, {".pt", "pt"}, {".pth", "pt"}, {".onnx", "onnx"}};
constexpr std::string_view kExportDtypes[] = {"fp32", "fp16", "bf16"};  // ONNX only
}  // namespace

std::string export_format(const std::string& out, const std::string& format) {
  static const std::vector<std::string> kFormats = {"safetensors", "pt", "onnx", "hf"};
  if (!format.empty()) {
    if (std::find(kFormats.begin(), kFormats.end(), format) == kFormats.end())
      throw UsageError(fmt::format("--format {} is not an export format", format),
                       "use --format safetensors, pt, onnx or hf (a Hugging Face folder)");
    return format;
  }
  const std::string ext = std::filesystem::path(out).extension().string();
  for (const auto& e : kExportExtensions)
    if (ext == e.ext) return std::string(e.format);
  return "safetensors";
}

std::string export_extension_warning(const std::string& out, const std::string& format) {
  if (!format.empty()) return {};  // the format was said
  const std::string ext = std::filesystem::path(out).extension().string();
  if (ext.empty()) return {};
  std::string lower = ext;
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (const auto& e : kExportExtensions)
    if (ext == e.ext) return {};
  for (const auto& e : kExportExtensions)
    if (edit_distance(lower, e.ext) <= 1)
      return fmt::format(
          "{}: '{}' is not an export extension but is {} '{}' ({}); writing safetensors, "
          "the format of any other name (rename OUT, or pass --format {})",
          out, ext, lower == e.ext ? "in another case than" : "one edit from", e.ext, e.format, e.format);
  return {};
}

namespace {
// The checkpoint's model on the CPU, in eval mode; a LoRA run's adapters merged with --merge. A LoRA
// run without --merge or --adapter is refused: its weights are not the architecture's alone.
CheckpointModel export_model(const std::string& checkpoint, const ExportOptions& o) {
  CheckpointModel m = load_checkpoint_model(checkpoint, torch::kCPU);  // verified: DataError, exit 2
  m.model->eval();
  const bool lora = models::has_lora(*m.model);
  if ((o.merge || o.adapter) && !lora)
    throw UsageError(
        fmt::format("{} has no LoRA adapters (model.lora.r = 0): --{} applies to a LoRA run", m.dir,
                    o.merge ? "merge" : "adapter"),
        fmt::format("drop --{}: this checkpoint's weights are the whole model", o.merge ? "merge" : "adapter"));
  if (lora && !o.merge && !o.adapter)
    throw UsageError(fmt::format("{} is a LoRA run (model.lora.r = {}): its weights are a frozen base and adapters",
                                 m.dir, m.config.model.lora_r),
                     "pass --adapter (a PEFT adapter folder: PeftModel.from_pretrained(base, OUT)) or --merge (the "
                     "adapters folded into the base, in OUT's format)");
  if (o.merge) {
    const int n = models::merge_lora(*m.model);
    m.notes.push_back(fmt::format("merged {} LoRA adapters into the base (W + scale * B A)", n));
  }
  return m;
}

// --adapter: PEFT's adapter folder (models/lora.h); base_model_name_or_path is the run's model.init_from.
ExportResult export_adapter(const std::string& checkpoint, const std::string& out, const ExportOptions& o) {
  std::error_code ec;
  if (std::filesystem::exists(out, ec))
    throw UsageError(fmt::format("{} exists: an adapter export never replaces a folder", out),
                     "choose a new OUT (a folder that does not exist yet)");
  CheckpointModel m = export_model(checkpoint, o);
  models::save_peft_adapter(*m.model, m.config.model, out, m.config.model.init_from);
  ExportResult r;
  r.format = "peft";
  r.model = m.config.model.name;
  r.checkpoint = m.dir;
  r.notes = m.notes;
  r.tensors = models::peft_adapter_tensors(*m.model).size();
  r.data_file = out + "/adapter_model.safetensors";
  return r;
}

// --format hf: a Hugging Face folder (models/hf_export.h), the tokenizer files of model.init_from beside the weights.
ExportResult export_hf_folder(const std::string& checkpoint, const std::string& out, const ExportOptions& o) {
  if (o.force)
    throw UsageError("--force does not apply to --format hf: an export never replaces a folder",
                     "drop --force and choose a new OUT");
  CheckpointModel m = export_model(checkpoint, o);
  ExportResult r;
  r.format = "hf";
  r.model = m.config.model.name;
  r.checkpoint = m.dir;
  r.notes = m.notes;
  models::HfExportOptions h;
  h.max_shard_bytes = o.max_shard_bytes;
  h.tokenizer_from = m.config.model.init_from;
  const auto w = models::write_hf_folder(*m.model, m.config.model, out, h);
  r.tensors = w.tensors;
  if (w.shards > 1) r.data_file = fmt::format("{} shards", w.shards);
  return r;
}
}  // namespace

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out, const ExportOptions& o) {
  // --- every bad input is found before anything is written ---
  ExportResult r;
  r.format = export_format(out, o.format);
  // An invalid value first (naming the valid ones), then a valid one on a format it does not apply to.
  if (!o.dtype.empty() &&
      std::find(std::begin(kExportDtypes), std::end(kExportDtypes), o.dtype) == std::end(kExportDtypes))
    throw UsageError(fmt::format("--dtype {} is not an export dtype: fp32, fp16 or bf16 (ONNX export only)", o.dtype),
                     r.format == "onnx" ? "use --dtype fp32, fp16 or bf16"
                                        : fmt::format("drop --dtype: a {} export keeps the trained dtype", r.format));
  if (!o.dtype.empty() && r.format != "onnx")
    throw UsageError(fmt::format("--dtype {} applies to ONNX export only, not {}", o.dtype, r.format),
                     fmt::format("drop --dtype (a {} export keeps the trained dtype) or export .onnx", r.format));
  if (o.external_data && r.format != "onnx")
    throw UsageError("--external-data applies to ONNX export only", "drop --external-data or export .onnx");
  if (o.adapter && o.merge)
    throw UsageError("--adapter and --merge exclude each other",
                     "--adapter writes the adapters alone (PEFT's folder), --merge the merged model: choose one");
  if (o.adapter) {
    if (!o.format.empty() || o.force)
      throw UsageError("--adapter writes PEFT's folder: --format and --force do not apply", "drop them");
    return export_adapter(checkpoint, out, o);
  }
  if (r.format == "hf") return export_hf_folder(checkpoint, out, o);
  models::OnnxOptions onnx;
  if (!o.dtype.empty()) onnx.dtype = o.dtype;
  io::check_output_path(out, o.force);
  if (r.format == "onnx") io::check_output_path(out + ".data", o.force);  // external data, when written

  // A GPU run's checkpoint exports on a machine without one: load to the CPU.
  CheckpointModel m = export_model(checkpoint, o);
  r.model = m.config.model.name;
  r.checkpoint = m.dir;
  r.notes = m.notes;
  if (r.format == "safetensors") {
    models::save_weights(*m.model, out, {{"trainbox_model", r.model}});
    r.tensors = models::state_dict(*m.model).size();
  } else if (r.format == "pt") {
    models::save_weights_pt(*m.model, out);
    r.tensors = models::state_dict(*m.model).size();
  } else {
    models::InputShape shape;
    if (m.state.sample_shape.size() == 3)
      shape = {m.state.sample_shape[0], m.state.sample_shape[1], m.state.sample_shape[2]};
    const auto mean = floats_of(m.state.extra, "input_mean"), std = floats_of(m.state.extra, "input_std");
    if (!mean.empty()) onnx.metadata = {{"input_mean", join_floats(mean)}, {"input_std", join_floats(std)}};
    onnx.external = o.external_data ? io::onnx::ExternalData::kAlways : io::onnx::ExternalData::kAuto;
    std::vector<torch::Tensor> keep;
    auto graph =
        models::onnx_model(*m.model, m.config.model, shape, m.state.classes, onnx, keep);  // UsageError: unsupported
    r.tensors = graph.graph.initializers.size();
    io::onnx::WriteOptions w;
    w.external = onnx.external;
    r.data_file = io::onnx::write_model(out, graph, w);
  }
  return r;
}

}  // namespace trainbox::train
