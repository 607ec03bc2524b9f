#include <trainbox/io/torch/pt.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>

#include <trainbox/io/atomic_file.h>
#include <trainbox/util/errors.h>

namespace trainbox::io {
namespace {

// The legacy storage classes torch.load maps to a dtype (torch/storage.py), by DType.
std::string_view storage_class(DType d) {
  switch (d) {
    case DType::kF64: return "DoubleStorage";
    case DType::kF32: return "FloatStorage";
    case DType::kF16: return "HalfStorage";
    case DType::kBF16: return "BFloat16Storage";
    case DType::kI64: return "LongStorage";
    case DType::kI32: return "IntStorage";
    case DType::kI16: return "ShortStorage";
    case DType::kI8: return "CharStorage";
    case DType::kU8: return "ByteStorage";
    case DType::kBool: return "BoolStorage";
  }
  throw UsageError("unknown dtype");
}

// --- a protocol-2 pickle, only the opcodes a state_dict needs (Lib/pickletools.py names) ---
class Pickle {
 public:
  Pickle() { op('\x80'), op('\x02'); }  // PROTO 2
  void op(char c) { out_.push_back(c); }
  void global(std::string_view module, std::string_view name) {
    op('c');  // GLOBAL "module\nname\n"
    out_.append(module).push_back('\n');
    out_.append(name).push_back('\n');
  }
  void str(std::string_view s) {
    op('X');  // BINUNICODE: u32 little-endian length, UTF-8 bytes
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void integer(std::int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');  // BININT: 4-byte signed little-endian
      u32(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)));
    } else {
      op('\x8a');  // LONG1: n bytes of two's complement, little-endian
      op('\x08');
      for (int i = 0; i < 8; ++i) op(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
    }
  }
  void tuple(const std::vector<std::int64_t>& v) {
    op('(');  // MARK … TUPLE
    for (auto x : v) integer(x);
    op('t');
  }
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    op(')');  // EMPTY_TUPLE
    op('R');  // REDUCE: OrderedDict()
  }
  std::string finish() {
    op('.');  // STOP
    return std::move(out_);
  }

 private:
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) op(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

}  // namespace

void write_pt_state_dict(const std::string& path, const std::vector<TensorView>& tensors) {
  // --- check everything before the first byte is written ---
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty()) throw UsageError("a tensor without a name cannot go into a state_dict", "name every tensor");
    if (!names.insert(t.name).second)
      throw UsageError(fmt::format("tensor name {} appears twice", t.name), "give every tensor its own name");
    std::uint64_t n = dtype_size(t.dtype);
    for (auto d : t.shape) {
      if (d < 0) throw UsageError(fmt::format("tensor {} has a negative dimension", t.name), "pass a valid shape");
      n *= static_cast<std::uint64_t>(d);
    }
    if (n != t.nbytes)
      throw UsageError(fmt::format("tensor {}: {} bytes given, its shape and dtype need {}", t.name, t.nbytes, n),
                       "pass the tensor's whole contiguous data");
  }

  // --- the pickle: OrderedDict{name: _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())} ---
  std::map<std::pair<const void*, std::size_t>, std::string> storage_keys;  // shared data → one storage
  std::vector<const TensorView*> storages;
  Pickle p;
  p.empty_ordered_dict();
  p.op('(');  // MARK for SETITEMS
  for (const auto& t : tensors) {
    auto [it, fresh] = storage_keys.try_emplace({t.data, t.nbytes}, std::to_string(storages.size()));
    if (fresh) storages.push_back(&t);
    const auto numel = static_cast<std::int64_t>(t.nbytes / dtype_size(t.dtype));
    p.str(t.name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');  // the persistent id: ('storage', torch.FloatStorage, key, 'cpu', numel)
    p.str("storage");
    p.global("torch", storage_class(t.dtype));
    p.str(it->second);
    p.str("cpu");
    p.integer(numel);
    p.op('t');
    p.op('Q');     // BINPERSID
    p.integer(0);  // storage offset
    p.tuple(t.shape);
    p.tuple(contiguous_strides(t.shape));
    p.op('\x89');            // NEWFALSE: requires_grad
    p.empty_ordered_dict();  // backward hooks
    p.op('t');
    p.op('R');
  }
  p.op('u');  // SETITEMS
  const std::string pickle = p.finish();

  // --- the zip, through torch's own writer; our AtomicFile does the I/O ---
  AtomicFile file(path, "PyTorch state_dict file");
  std::optional<SystemError> io_error;
  auto sink = [&](const void* data, std::size_t n) -> std::size_t {
    if (io_error) return 0;
    try {
      file.write(data, n);
      return n;
    } catch (const SystemError& e) {  // never through the zip library's C frames
      io_error = e;
      return 0;
    }
  };
  try {
    caffe2::serialize::PyTorchStreamWriter zip(sink);
    zip.writeRecord("data.pkl", pickle.data(), pickle.size());
    zip.writeRecord("byteorder", "little", 6);
    for (std::size_t i = 0; i < storages.size(); ++i)
      zip.writeRecord("data/" + std::to_string(i), storages[i]->data, storages[i]->nbytes);
    zip.writeEndOfFile();
  } catch (const c10::Error& e) {
    if (io_error) throw *io_error;
    throw SystemError(fmt::format("cannot write PyTorch state_dict file {}: {}", path,
                                  std::string(e.what_without_backtrace()).substr(0, 200)));
  }
  if (io_error) throw *io_error;
  file.commit();
}

}  // namespace trainbox::io
