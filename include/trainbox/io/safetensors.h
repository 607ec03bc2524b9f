// trainbox/io/safetensors.h — writing and checking safetensors files (Hugging Face's tensor format).
//
// Layout: u64 little-endian header size N · N bytes of JSON ({"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, ..., optional "__metadata__": {string: string}}, padded with
// spaces so the data starts 8-byte aligned) · the tensors' bytes, contiguous, row-major,
// little-endian. Unlike pickle checkpoints, loading one executes no code.
//
// Contract: write_safetensors() is atomic — it writes `<path>.tmp.<pid>`, fsyncs, renames over
// `path` and fsyncs the directory, so `path` holds either its old contents or the complete new
// file, never a partial one. Bad arguments throw UsageError before anything is written; I/O
// failures throw SystemError (path + errno) after removing the temp file.
// read_safetensors_header() reads only the header and checks it against the file's size;
// any inconsistency throws DataError naming the file and the problem. Both are thread-safe
// for distinct paths; the caller keeps the TensorViews' data alive during the call.
//
//   std::vector<float> w(64 * 32);
//   trainbox::io::write_safetensors("model.safetensors",
//       {{"fc.weight", trainbox::io::DType::kF32, {64, 32}, w.data(), w.size() * sizeof(float)}},
//       {{"format", "pt"}});                                            // throws UsageError/SystemError
//   auto entries = trainbox::io::read_safetensors_header("model.safetensors");  // throws DataError
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace trainbox::io {

// The dtypes torch checkpoints use. Names as in the format ("F32", "BF16", "BOOL", ...).
enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };
inline constexpr std::size_t kDTypeCount = 10;

std::string_view dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);  // bytes per element; BOOL is one byte

// A tensor to write: `nbytes` must equal product(shape) * dtype_size(dtype); shape {} is a
// 0-d scalar (one element), a zero in the shape makes an empty tensor (nbytes 0).
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  const void* data;
  std::size_t nbytes;
};

// Writes the tensors in the order given (header entries and data alike), with "__metadata__"
// first when `metadata` is non-empty. Throws UsageError for an empty, duplicate or reserved
// ("__metadata__") name, a negative dimension or a size mismatch; SystemError for I/O failures.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// One header entry; begin/end are byte offsets relative to the start of the data buffer.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin, end;
};

// Entries in data order (by begin offset; header order among equal offsets). Checks: header
// size ≤ 100 MB and inside the file, JSON object starting with '{', known dtypes, shapes of
// non-negative integers, end - begin == elements * dtype size, and the entries covering the
// data buffer exactly (no holes, no overlaps, nothing after the last tensor). Fills `metadata`
// (if given) from "__metadata__". Throws DataError naming the file and the problem.
std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path,
                                                      std::map<std::string, std::string>* metadata = nullptr);

}  // namespace trainbox::io
