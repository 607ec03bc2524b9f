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

// `config` with the architecture of model.init_from's config.json when model.name = "llama" and
// init_from is a Hugging Face folder (models/llama.h: read_hf_config); unchanged otherwise. The
// folder decides the architecture; model.block_size (the trained context) stays the config's.
// `notes` (if given) gets what was read. Throws DataError / ConfigError as read_hf_config.
Config with_model_folder(Config config, std::vector<std::string>* notes = nullptr);

struct SampleOptions {
  std::string prompt;
  std::int64_t tokens = 200;
  double temperature = 1.0;  // >= 0; 0: greedy (the most likely token, as top_k = 1)
  std::int64_t top_k = 0;    // 0: the whole vocabulary
  double top_p = 1.0;        // llama: nucleus sampling (1: the whole vocabulary)
  bool kv_cache = true;      // llama: decode with the KV cache (false: the whole sequence every token)
  std::uint64_t seed = 0;
  std::string device = "cpu";
  // A Hugging Face tokenizer (a folder or tokenizer.json) for a text prompt and a text
  // continuation; empty: the model.init_from folder's, when it holds a tokenizer.json.
  std::string tokenizer;
  // Chat: the prompt is a user turn (after `system`, when set), rendered with the tokenizer's chat
  // template (or `chat_template`, a Jinja file) and its generation prompt; the reply stops at the
  // model's eos ids or the tokenizer's eos token (a chat model's end of turn). Needs a tokenizer.
  bool chat = false;
  std::string system;
  std::string chat_template;
  // Called with each token's text as it is drawn (a byte, or " ID"): the pieces add up to the
  // returned continuation. `trainbox sample` prints them as they come.
  std::function<void(const std::string&)> on_text;
  // Each note about the checkpoint, then "reading <step dir>": the step read, and a damaged newer
  // one skipped (trainbox sample prints them on stderr); after the last token, the speed
  // ("64 tokens in 0.41 s: 156.1 tokens/s, KV cache"). Unset: nothing is said.
  std::function<void(const std::string&)> on_note;
};
// A continuation of `prompt` by the gpt or llama of checkpoint dir `checkpoint` (bytes, for a
// byte-level model; text through the tokenizer when there is one; token ids separated by spaces
// otherwise). Deterministic for a seed. A llama
// stops after one of model.eos_token_ids (its generation_config.json's).
std::string sample_checkpoint(const std::string& checkpoint, const SampleOptions& options);

// `trainbox export CKPT OUT`: the model of checkpoint dir `checkpoint` (its config.toml and
// state.json rebuild it; its files are verified first, as for a resume) written to `out`:
//   safetensors  the weights under PyTorch's state_dict names (safetensors.torch.load_file)
//   pt           the same state_dict in torch.save's format (torch.load(weights_only=True))
//   onnx         the graph and weights (models/onnx.h): ONNX Runtime, TensorRT, …
//   hf           a Hugging Face folder (models/hf_export.h): from_pretrained(OUT) loads it (llama, gpt)
// The format is options.format, else the extension (.pt/.pth, .onnx; any other: safetensors). Every
// bad input throws before anything is written (exit 2, nothing at `out`): an unknown format
// or dtype, an existing `out` without options.force, a folder that cannot take `out`, a
// checkpoint that fails verification, a model without an ONNX graph writer. The file is
// written atomically (temp file in out's folder, then rename).
struct ExportOptions {
  std::string format;                             // "" (from the extension), safetensors, pt, onnx
  std::string dtype;                              // onnx only: fp32 (default), fp16, bf16; "" for the other formats
  bool force = false;                             // replace an existing `out`
  bool external_data = false;                     // onnx: weights in <out>.data even below protobuf's 2 GiB
  std::uint64_t max_shard_bytes = 5'000'000'000;  // hf: the largest safetensors shard (save_pretrained's 5GB)
  bool adapter = false;  // a LoRA run: OUT is a PEFT adapter folder (adapter_config.json, adapter_model.safetensors)
  bool merge = false;    // a LoRA run: the adapters folded into the base, then written in the chosen format
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
