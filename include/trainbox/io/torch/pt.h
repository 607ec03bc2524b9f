// trainbox/io/torch/pt.h — writing a state_dict in PyTorch's own torch.save format, without Python.
//
// The file is what `torch.save(model.state_dict(), path)` writes (torch ≥ 1.6's zip format):
// a zip archive (stored, 64-byte aligned records, so torch.load(mmap=True) works) holding
// archive/data.pkl — a protocol-2 pickle of collections.OrderedDict{name: tensor} whose only
// globals are collections.OrderedDict, torch._utils._rebuild_tensor_v2 and torch.<T>Storage —
// plus one archive/data/<key> record per storage, archive/byteorder and archive/version.
// Those globals are the ones torch.load(weights_only=True) (the default since torch 2.6)
// allows, so the file loads without executing code. LibTorch's torch::pickle_save is not
// used: it tags every dict with torch.jit._pickle.restore_type_tag, which weights_only
// refuses (checked with torch 2.11).
//
// Tensors whose views share `data` (same pointer and size) share one storage, as tied
// weights do in PyTorch's state_dict (GPT: lm_head.weight and transformer.wte.weight).
// Contract: atomic (io/atomic_file.h); UsageError for an empty or duplicate name or a size
// mismatch before anything is written; SystemError for I/O failures, the temp file removed.
//
//   trainbox::io::write_pt_state_dict("model.pt",
//       {{"fc.weight", trainbox::io::DType::kF32, {64, 32}, w.data(), w.size() * sizeof(float)}});
//   // python: net.load_state_dict(torch.load("model.pt", weights_only=True))
#pragma once
#include <string>
#include <vector>

#include <trainbox/io/safetensors.h>

namespace trainbox::io {

void write_pt_state_dict(const std::string& path, const std::vector<TensorView>& tensors);

}  // namespace trainbox::io
