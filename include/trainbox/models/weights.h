// trainbox/models/weights.h — a model's weights to and from safetensors, under PyTorch's
// state_dict names (model.init_from, `trainbox export`).
//
// The names are the module's named_parameters() and named_buffers() — equal to those of the
// PyTorch twins in bench/peers/models.py — plus, for a Model with tied weights, each alias
// (GPT: lm_head.weight, the same tensor as transformer.wte.weight), because PyTorch's
// state_dict() carries both and load_state_dict(strict=True) wants both. A file without the
// alias (safetensors' save_model and Hugging Face drop shared tensors) loads too; a file with
// both must hold the same values in both.
//
// load_weights is strict and all-or-nothing: every missing, unexpected and shape-mismatched
// name is listed in one DataError (exit 2) before any tensor is touched; values are converted
// to each parameter's dtype and copied to its device.
//
// A file that does not fit and has the layout of a family trainbox has no model for (Llama,
// GPT-NeoX, BERT: Hugging Face's module names) is refused naming the family, not its 50 names.
//
// Hugging Face GPT-2 (GPT2LMHeadModel / GPT2Model files) is read too. Its attention and MLP
// use Conv1D, whose weight is stored [in, out] — the transpose of nn.Linear's [out, in] — so
// attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj weights are transposed on the way in.
// The layout is recognised from the file alone, without guessing: a *.attn.c_attn.weight of
// shape [C, 3C] is Conv1D (nn.Linear's is [3C, C]; C ≠ 3C for every C > 0). In that layout,
// names without the `transformer.` prefix (GPT2Model's) get it, and the causal-mask buffers
// `attn.bias` ([1, 1, n_positions, n_positions]) and `attn.masked_bias` (a scalar) that older
// checkpoints carry are skipped: they are constants, not weights, and trainbox's attention
// (causal by construction, models/attention.h) needs no mask. HF's GPT-2 also computes GELU
// with the tanh approximation; the logits of its weights in trainbox's exact-GELU GPT differ
// slightly (as in nanoGPT's from_pretrained) unless the HF config says activation_function = "gelu".
//
// Thread-safety: none of its own; don't run a model's forward while loading into it.
//
//   auto net = models::make_model(cfg.model, shape, classes);
//   auto r = models::load_weights(*net, cfg.model.init_from);   // throws DataError, exit 2
//   if (r.hugging_face_layout) note("read Hugging Face GPT-2 layout (Conv1D weights transposed)");
//   models::save_weights(*net, "model.safetensors", {{"trainbox_model", cfg.model.name}});
//   models::save_weights_pt(*net, "model.pt");                  // torch.load(weights_only=True)
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <trainbox/io/safetensors.h>

namespace trainbox::models {

struct LoadReport {
  std::string file;                  // the file read: the path, or a save_pretrained folder's model.safetensors
                                     // (a sharded folder: the folder)
  std::size_t files = 1;             // safetensors files read (the shards of a sharded folder)
  std::size_t tensors = 0;           // tensors copied into the model (an alias that fills its owner counts once)
  bool hugging_face_layout = false;  // Conv1D weights were transposed, names prefixed
  std::vector<std::string> ignored;  // file names skipped on purpose (HF's attn.bias / attn.masked_bias,
                                     // another task's head: Model::load_rules)
  std::vector<std::string> fresh;    // model names the file lacks that keep their initialisation (a new head)
};

// Loads `path` strictly into `model` (see above). `path` is a safetensors file or a
// save_pretrained folder (weights_files), sharded or not; a tensor in two shards is a DataError. Throws DataError for a
// missing, corrupt or non-fitting file, naming every offending key, and changes nothing then.
LoadReport load_weights(torch::nn::Module& model, const std::string& path);

// The files load_weights reads for `path`: `path` itself, or for a folder (Hugging Face's
// save_pretrained) its model.safetensors, or the shards model.safetensors.index.json names (each
// must exist). A folder without them is a DataError saying what it holds instead (pytorch_model.bin)
// and what trainbox reads; so is an index that is not JSON or names a missing shard.
std::vector<std::string> weights_files(const std::string& path);

// The names and tensors PyTorch's state_dict() would hold: parameters, buffers, then aliases.
std::vector<std::pair<std::string, torch::Tensor>> state_dict(torch::nn::Module& model);

// The safetensors dtype of a tensor type (SystemError for one the format lacks, e.g. complex).
io::DType safetensors_dtype(torch::ScalarType t);

// Writes state_dict(model) (CPU, contiguous) to `path` as safetensors, atomically
// (io::write_safetensors). Throws SystemError for a dtype safetensors lacks or an I/O failure.
void save_weights(torch::nn::Module& model, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});

// Writes state_dict(model) to `path` in torch.save's format (io/torch/pt.h), atomically: Python's
// net.load_state_dict(torch.load(path, weights_only=True)) reads it. Tied weights share one
// storage, as in PyTorch. Any torch::nn::Module (a Trainer user's own too). Same errors.
void save_weights_pt(torch::nn::Module& model, const std::string& path);

}  // namespace trainbox::models
