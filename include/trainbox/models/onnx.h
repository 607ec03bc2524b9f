// trainbox/models/onnx.h — the built-in models as ONNX graphs (`trainbox export … OUT.onnx`).
//
// LibTorch has no ONNX exporter (torch.onnx and torch.export are Python; TorchScript is
// deprecated), but trainbox knows each built-in model's architecture, so it writes their
// graphs itself, node by node, with the trained weights as initializers under their
// state_dict names (io/onnx.h writes the file). Opset 17, IR version 8: ONNX Runtime ≥ 1.14,
// TensorRT ≥ 8.6 and onnx ≥ 1.12 read it (tested with onnxruntime 1.31.1, onnx 1.23.2).
//
//   model   input                                   output
//   mlp     input  float [batch, C, H, W]           logits [batch, classes]
//   cnn     input  float [batch, C, H, W]           logits [batch, classes]
//   resnet  input  float [batch, C, H, W]           logits [batch, classes]
//   gpt     input_ids int64 [batch, sequence]        logits [batch, sequence, vocab]
// `batch` is dynamic everywhere, `sequence` too (1 … block_size; a longer one fails in the
// node named sequence_length_must_be_at_most_block_size_N). C, H, W are fixed: ONNX Runtime
// rejects another image size naming the axis (index). Images are expected normalised as in
// training, (pixel / 255 - mean) / std per channel; the metadata carries mean and std
// (input_mean, input_std), the model config (model_config, JSON), trainbox_version,
// trainbox_model and classes. Evaluation semantics: BatchNorm uses its running statistics,
// dropout is off. dtype fp16 / bf16 stores the weights, the input images and the logits in
// that type (token ids stay int64); bf16 only for mlp and gpt (opset 17's Conv and MaxPool
// have no bfloat16). ONNX Runtime's CPU provider runs fp16, not bf16 (docs/export.md).
//
// A module that is not a built-in model (a Trainer user's own) has no graph writer: export
// its weights with models::save_weights / save_weights_pt and build the graph in Python.
//
//   models::OnnxOptions o; o.dtype = "fp16";
//   models::export_onnx(*net, cfg.model, {1, 28, 28}, 10, "net.onnx", o);  // throws UsageError
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <trainbox/io/onnx.h>
#include <trainbox/models/config.h>
#include <trainbox/models/models.h>

namespace trainbox::models {

struct OnnxOptions {
  std::string dtype = "fp32";  // fp32 | fp16 | bf16
  io::onnx::ExternalData external = io::onnx::ExternalData::kAuto;
  std::vector<std::pair<std::string, std::string>> metadata;  // added to the model's own
};

// The ONNX model of `model` (built by make_model(cfg, input, classes)), ready for
// io::onnx::write_model. The returned Model borrows the tensors in `keep_alive`. Throws
// UsageError naming what is missing when there is no graph writer for the model (a name
// without one, or a tensor the writer does not know), or for an unknown dtype.
io::onnx::Model onnx_model(Model& model, const ModelConfig& cfg, const InputShape& input, std::int64_t classes,
                           const OnnxOptions& options, std::vector<torch::Tensor>& keep_alive);

// onnx_model, then io::onnx::write_model. Returns the external data file, or "".
std::string export_onnx(Model& model, const ModelConfig& cfg, const InputShape& input, std::int64_t classes,
                        const std::string& path, const OnnxOptions& options = {});

}  // namespace trainbox::models
