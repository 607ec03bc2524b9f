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
#include <trainbox/dist/worker_env.h>
#include <trainbox/io/atomic_file.h>
#include <trainbox/io/onnx.h>
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

TrainSummary run_training(const TrainOptions& o) {
  // Everything that can be wrong with the input — config, data, model, initial weights — is
  // found here, before the Trainer touches the run dir: a bad input leaves nothing behind.
  validate(o.config);
  const Config& cfg = o.config;
  data::Splits splits = data::load_splits(cfg.data, static_cast<std::uint64_t>(cfg.train.seed), cfg.model.block_size);
  torch::manual_seed(static_cast<std::uint64_t>(cfg.train.seed));  // initialisation depends on the seed alone
  models::InputShape shape;
  if (splits.sample_shape.size() == 3) shape = {splits.sample_shape[0], splits.sample_shape[1], splits.sample_shape[2]};
  std::shared_ptr<models::Model> model = models::make_model(cfg.model, shape, splits.classes);
  if (!cfg.model.init_from.empty()) {
    auto r = models::load_weights(*model, cfg.model.init_from);
    if (!o.quiet)
      std::fprintf(stderr, "trainbox train: initial weights from %s (%zu tensors%s)\n", cfg.model.init_from.c_str(),
                   r.tensors, r.hugging_face_layout ? ", Hugging Face GPT-2 layout: Conv1D weights transposed" : "");
  }

  Trainer trainer(o);
  trainer.model(model).data(splits);
  if (!splits.input_mean.empty())  // what `trainbox export` writes into an ONNX model's metadata
    trainer.checkpoint_meta("input_mean", join_floats(splits.input_mean))
        .checkpoint_meta("input_std", join_floats(splits.input_std));
  TrainSummary sum = trainer.fit();
  if (auto h = data::unigram_entropy(*splits.train)) sum.unigram_loss = *h;
  if (cfg.checkpoint.export_safetensors && dist::WorkerEnv::from_environment().rank == 0)
    models::save_weights(*model, o.run_dir + "/model.safetensors", {{"trainbox_model", cfg.model.name}});
  return sum;
}

std::string export_format(const std::string& out, const std::string& format) {
  static const std::vector<std::string> kFormats = {"safetensors", "pt", "onnx"};
  if (!format.empty()) {
    if (std::find(kFormats.begin(), kFormats.end(), format) == kFormats.end())
      throw UsageError(fmt::format("--format {} is not an export format", format),
                       "use --format safetensors, pt or onnx");
    return format;
  }
  const std::string ext = std::filesystem::path(out).extension().string();
  if (ext == ".safetensors") return "safetensors";
  if (ext == ".pt" || ext == ".pth") return "pt";
  if (ext == ".onnx") return "onnx";
  return "safetensors";  // any other name: what `trainbox export` has always written
}

ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out, const ExportOptions& o) {
  // --- every bad input is found before anything is written ---
  ExportResult r;
  r.format = export_format(out, o.format);
  if (!o.dtype.empty() && r.format != "onnx")
    throw UsageError(fmt::format("--dtype {} applies to ONNX export, not {}", o.dtype, r.format),
                     "drop --dtype (weights keep their trained dtype) or export .onnx");
  if (o.external_data && r.format != "onnx")
    throw UsageError("--external-data applies to ONNX export only", "drop --external-data or export .onnx");
  models::OnnxOptions onnx;
  if (!o.dtype.empty()) onnx.dtype = o.dtype;
  if (r.format == "onnx" && onnx.dtype != "fp32" && onnx.dtype != "fp16" && onnx.dtype != "bf16")
    throw UsageError(fmt::format("--dtype {} is not an ONNX export dtype", onnx.dtype),
                     "use --dtype fp32, fp16 or bf16");
  std::vector<std::string> targets = {out};
  if (r.format == "onnx") targets.push_back(out + ".data");  // external data, when written
  for (const auto& t : targets)
    if (!o.force && std::filesystem::exists(std::filesystem::symlink_status(t)))
      throw UsageError(fmt::format("{} already exists", t), "pass --force to replace it, or choose another name");
  if (auto why = io::why_not_writable(out); !why.empty())
    throw UsageError(fmt::format("cannot write {}: {}", out, why), "choose a path in an existing, writable folder");

  // A GPU run's checkpoint exports on a machine without one: load to the CPU.
  CheckpointModel m = load_checkpoint_model(checkpoint, torch::kCPU);  // verified: DataError, exit 2
  m.model->eval();
  r.model = m.config.model.name;
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
