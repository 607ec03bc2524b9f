// trainbox/train/run.h — `trainbox train`, `export` and `sample` as calls (no torch headers:
// the CLI includes this). The loop itself is the public Trainer (train/trainer.h);
// run_training builds the model and the data named by the config and hands them to it.
//
// One call runs a whole job from a Config: data, model, optimizer, schedule, AMP,
// gradient accumulation and clipping, CUDA graphs, evaluation, metrics (progress,
// metrics.jsonl, TensorBoard), atomic checkpoints and resume. Files in the run dir:
//   config.toml  metrics.jsonl  events.out.tfevents.*  checkpoints/step_N/  checkpoints/latest
//   model.safetensors (with checkpoint.export_safetensors)
//
//   TrainOptions o; o.config = load_config("configs/fashion_mlp.toml"); o.run_dir = "runs/a";
//   TrainSummary s = trainbox::train::run_training(o);    // throws typed trainbox::Error
// TrainOptions, TrainSummary and DivergedError: train/types.h.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <trainbox/train/config.h>
#include <trainbox/train/types.h>
#include <trainbox/util/errors.h>

namespace trainbox::train {

TrainSummary run_training(const TrainOptions& options);

struct SampleOptions {
  std::string prompt;
  std::int64_t tokens = 200;
  double temperature = 1.0;  // >= 0; 0: greedy (the most likely token, as top_k = 1)
  std::int64_t top_k = 0;    // 0: the whole vocabulary
  std::uint64_t seed = 0;
  std::string device = "cpu";
  // Called with each token's text as it is drawn (a byte, or " ID"): the pieces add up to the
  // returned continuation. `trainbox sample` prints them as they come.
  std::function<void(const std::string&)> on_text;
  // Each note about the checkpoint, then "reading <step dir>": the step read, and a damaged newer
  // one skipped (trainbox sample prints them on stderr). Unset: nothing is said.
  std::function<void(const std::string&)> on_note;
};
// A continuation of `prompt` by the GPT of checkpoint dir `checkpoint` (bytes, for a
// byte-level model; token ids separated by spaces otherwise). Deterministic for a seed.
std::string sample_checkpoint(const std::string& checkpoint, const SampleOptions& options);

// `trainbox export CKPT OUT`: the model of checkpoint dir `checkpoint` (its config.toml and
// state.json rebuild it; its files are verified first, as for a resume) written to `out`:
//   safetensors  the weights under PyTorch's state_dict names (safetensors.torch.load_file)
//   pt           the same state_dict in torch.save's format (torch.load(weights_only=True))
//   onnx         the graph and weights (models/onnx.h): ONNX Runtime, TensorRT, …
// The format is options.format, else the extension (.pt/.pth, .onnx; any other: safetensors). Every
// bad input throws before anything is written (exit 2, nothing at `out`): an unknown format
// or dtype, an existing `out` without options.force, a folder that cannot take `out`, a
// checkpoint that fails verification, a model without an ONNX graph writer. The file is
// written atomically (temp file in out's folder, then rename).
struct ExportOptions {
  std::string format;          // "" (from the extension), safetensors, pt, onnx
  std::string dtype;           // onnx only: fp32 (default), fp16, bf16; "" for the other formats
  bool force = false;          // replace an existing `out`
  bool external_data = false;  // onnx: weights in <out>.data even below protobuf's 2 GiB
};
struct ExportResult {
  std::string format, model, data_file;  // data_file: onnx external data, or ""
  std::string checkpoint;                // the checkpoint read (<run_dir>/checkpoints/step_N)
  std::vector<std::string> notes;        // a damaged newer checkpoint skipped, an unverified old one
  std::size_t tensors = 0;               // state_dict entries (safetensors, pt) or initializers (onnx)
};
ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out,
                               const ExportOptions& options = {});
// The format export_checkpoint would write: options.format, else from out's extension.
std::string export_format(const std::string& out, const std::string& format);
// A one-line warning when `format` is empty and out's extension is not one export_format knows
// but is within one edit of one (".onxx", ".ONNX", ".safetensor"): that name gets safetensors,
// which is seldom what was meant. "" otherwise. `trainbox export` prints it on stderr.
std::string export_extension_warning(const std::string& out, const std::string& format);

}  // namespace trainbox::train
