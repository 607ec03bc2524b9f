#include <trainbox/io/onnx.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include <trainbox/io/atomic_file.h>
#include <trainbox/util/errors.h>

namespace trainbox::io::onnx {
namespace {

// --- protobuf wire format (developers.google.com/protocol-buffers/docs/encoding) ---
enum Wire : std::uint32_t { kVarint = 0, kFixed32 = 5, kLen = 2 };

// A message as a list of pieces: bytes it owns, or borrowed tensor data, so that embedding a
// message in another (length prefix + its pieces) moves the weights' pointers, never the bytes.
class Msg {
 public:
  std::uint64_t size() const { return size_; }

  void varint(std::uint32_t field, std::uint64_t v) { tag(field, kVarint), raw_varint(v); }
  void int64(std::uint32_t field, std::int64_t v) { varint(field, static_cast<std::uint64_t>(v)); }
  void fixed32(std::uint32_t field, float f) {
    tag(field, kFixed32);
    char b[4];
    std::memcpy(b, &f, 4);  // little-endian hosts only (x86-64, aarch64)
    append(b, 4);
  }
  void bytes(std::uint32_t field, std::string_view s) {
    tag(field, kLen), raw_varint(s.size());
    append(s.data(), s.size());
  }
  void borrowed(std::uint32_t field, const void* p, std::size_t n) {  // raw_data, not copied
    tag(field, kLen), raw_varint(n);
    if (n == 0) return;
    pieces_.push_back({{}, p, n});
    size_ += n;
  }
  void packed_int64(std::uint32_t field, const std::vector<std::int64_t>& v) {
    Msg m;
    for (auto x : v) m.raw_varint(static_cast<std::uint64_t>(x));
    message(field, std::move(m));
  }
  void packed_float(std::uint32_t field, const std::vector<float>& v) {
    std::string b(v.size() * 4, '\0');
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    bytes(field, b);
  }
  void message(std::uint32_t field, Msg&& m) {
    tag(field, kLen), raw_varint(m.size_);
    for (auto& p : m.pieces_) {
      if (p.ptr) {
        pieces_.push_back(std::move(p));
      } else {
        append(p.own.data(), p.own.size());
        size_ -= p.own.size();  // append counted it again
      }
    }
    size_ += m.size_;
  }

  template <class Sink>
  void emit(Sink&& sink) const {
    for (const auto& p : pieces_) p.ptr ? sink(p.ptr, p.n) : sink(p.own.data(), p.own.size());
  }

 private:
  struct Piece {
    std::string own;
    const void* ptr = nullptr;
    std::size_t n = 0;
  };
  void tag(std::uint32_t field, Wire w) { raw_varint((std::uint64_t{field} << 3) | w); }
  void raw_varint(std::uint64_t v) {
    char b[10];
    int n = 0;
    do {
      b[n++] = static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
      v >>= 7;
    } while (v);
    append(b, static_cast<std::size_t>(n));
  }
  void append(const char* p, std::size_t n) {
    if (pieces_.empty() || pieces_.back().ptr) pieces_.push_back({});
    pieces_.back().own.append(p, n);
    size_ += n;
  }
  std::vector<Piece> pieces_;
  std::uint64_t size_ = 0;
};

Msg string_pair(const std::string& k, const std::string& v) {  // StringStringEntryProto
  Msg m;
  m.bytes(1, k);
  m.bytes(2, v);
  return m;
}

Msg value_info(const ValueInfo& v) {
  Msg shape;  // TensorShapeProto
  for (const auto& d : v.shape) {
    Msg dim;
    if (d.param.empty())
      dim.int64(1, d.value);
    else
      dim.bytes(2, d.param);
    shape.message(1, std::move(dim));
  }
  Msg tensor;  // TypeProto.Tensor
  tensor.varint(1, static_cast<std::uint64_t>(v.type));
  tensor.message(2, std::move(shape));
  Msg type;  // TypeProto
  type.message(1, std::move(tensor));
  Msg m;  // ValueInfoProto
  m.bytes(1, v.name);
  m.message(2, std::move(type));
  if (!v.doc.empty()) m.bytes(3, v.doc);
  return m;
}

Msg attribute(const Attr& a) {
  Msg m;  // AttributeProto; type: FLOAT 1, INT 2, STRING 3, FLOATS 6, INTS 7
  m.bytes(1, a.name);
  switch (a.kind) {
    case Attr::Kind::kFloat: m.fixed32(2, a.f), m.varint(20, 1); break;
    case Attr::Kind::kInt: m.int64(3, a.i), m.varint(20, 2); break;
    case Attr::Kind::kString: m.bytes(4, a.s), m.varint(20, 3); break;
    case Attr::Kind::kFloats: m.packed_float(7, a.floats), m.varint(20, 6); break;
    case Attr::Kind::kInts: m.packed_int64(8, a.ints), m.varint(20, 7); break;
  }
  return m;
}

Msg node(const Node& n) {
  Msg m;  // NodeProto
  for (const auto& i : n.inputs) m.bytes(1, i);
  for (const auto& o : n.outputs) m.bytes(2, o);
  if (!n.name.empty()) m.bytes(3, n.name);
  m.bytes(4, n.op_type);
  for (const auto& a : n.attrs) m.message(5, attribute(a));
  return m;
}

constexpr std::uint64_t kExternalAlign = 64;

}  // namespace

const char* trainbox_version() {
#ifdef TRAINBOX_VERSION
  return TRAINBOX_VERSION;
#else
  return "unknown";
#endif
}

std::size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::kBool:
    case ElemType::kUInt8:
    case ElemType::kInt8: return 1;
    case ElemType::kInt16:
    case ElemType::kFloat16:
    case ElemType::kBFloat16: return 2;
    case ElemType::kFloat:
    case ElemType::kInt32: return 4;
    case ElemType::kInt64:
    case ElemType::kDouble: return 8;
  }
  throw UsageError(fmt::format("ONNX element type {} is not supported", static_cast<int>(t)));
}

namespace {
// The whole ModelProto as pieces (the weights borrowed, never read), the blobs for `<path>.data`,
// and the plan: what write_model writes. The one place that decides external data.
struct Built {
  Msg model;
  std::vector<std::pair<const void*, std::size_t>> external_blobs;
  std::string data_path;
  Plan plan;
};

Built build(const std::string& path, const Model& model, const WriteOptions& options) {
  const Graph& g = model.graph;
  // --- checks, before anything is written ---
  if (g.outputs.empty() || g.nodes.empty())
    throw UsageError("an ONNX graph needs at least one node and one output", "build the graph first");
  std::set<std::string> names;
  std::uint64_t weight_bytes = 0;
  for (const auto& t : g.initializers) {
    if (t.name.empty() || !names.insert(t.name).second)
      throw UsageError(fmt::format("ONNX initializer name '{}' is empty or appears twice", t.name), "name each once");
    std::uint64_t n = elem_size(t.type);
    for (auto d : t.dims) n *= static_cast<std::uint64_t>(d < 0 ? 0 : d);
    const std::size_t have = t.data ? t.nbytes : t.owned.size();
    if (n != have)
      throw UsageError(fmt::format("ONNX initializer {}: {} bytes given, its dims and type need {}", t.name, have, n),
                       "pass the tensor's whole contiguous data");
    weight_bytes += n;
  }
  const bool external = options.external == ExternalData::kAlways ||
                        (options.external == ExternalData::kAuto && weight_bytes > kExternalDataAbove);
  if (!external && weight_bytes > kExternalDataAbove)
    throw UsageError(fmt::format("{} bytes of weights do not fit in one protobuf message (2 GiB)", weight_bytes),
                     "write them as external data");
  Built out;
  out.data_path = external ? path + ".data" : std::string();
  const std::string data_name = external ? std::filesystem::path(out.data_path).filename().string() : std::string();

  // --- the graph ---
  Msg graph;  // GraphProto
  for (const auto& n : g.nodes) graph.message(1, node(n));
  graph.bytes(2, g.name.empty() ? "trainbox" : g.name);
  std::uint64_t offset = 0;
  for (const auto& t : g.initializers) {
    Msg tp;                                // TensorProto
    for (auto d : t.dims) tp.int64(1, d);  // dims: repeated int64 (unpacked is valid proto2 and proto3)
    tp.varint(2, static_cast<std::uint64_t>(t.type));
    tp.bytes(8, t.name);
    const void* p = t.data ? t.data : t.owned.data();
    const std::size_t n = t.data ? t.nbytes : t.owned.size();
    if (external) {
      offset = (offset + kExternalAlign - 1) / kExternalAlign * kExternalAlign;
      tp.message(13, string_pair("location", data_name));
      tp.message(13, string_pair("offset", std::to_string(offset)));
      tp.message(13, string_pair("length", std::to_string(n)));
      tp.varint(14, 1);  // data_location = EXTERNAL
      out.external_blobs.push_back({p, n});
      offset += n;
    } else {
      tp.borrowed(9, p, n);  // raw_data
    }
    graph.message(5, std::move(tp));
  }
  if (!g.doc.empty()) graph.bytes(10, g.doc);
  for (const auto& v : g.inputs) graph.message(11, value_info(v));
  for (const auto& v : g.outputs) graph.message(12, value_info(v));

  Msg& m = out.model;  // ModelProto
  m.int64(1, model.ir_version);
  m.bytes(2, model.producer_name);
  m.bytes(3, model.producer_version.empty() ? trainbox_version() : model.producer_version);
  if (!model.doc.empty()) m.bytes(6, model.doc);
  m.message(7, std::move(graph));
  Msg opset;  // OperatorSetIdProto, the default domain ""
  opset.int64(2, model.opset);
  m.message(8, std::move(opset));
  for (const auto& [k, v] : model.metadata) m.message(14, string_pair(k, v));
  out.plan = {weight_bytes, external, m.size(), offset};
  return out;
}
}  // namespace

Plan plan_model(const std::string& path, const Model& model, const WriteOptions& options) {
  return build(path, model, options).plan;
}

std::string write_model(const std::string& path, const Model& model, const WriteOptions& options) {
  Built b = build(path, model, options);
  const Msg& m = b.model;
  const std::string& data_path = b.data_path;
  const bool external = b.plan.external;
  const auto& external_blobs = b.external_blobs;

  // --- the files: external data first, so the model never points at a missing one ---
  std::optional<AtomicFile> data_file;
  if (external) {
    data_file.emplace(data_path, "ONNX external data file");
    static const char zeros[kExternalAlign] = {};
    for (const auto& [p, n] : external_blobs) {
      const auto pad = (kExternalAlign - data_file->size() % kExternalAlign) % kExternalAlign;
      data_file->write(zeros, pad);
      data_file->write(p, n);
    }
  }
  AtomicFile file(path, "ONNX file");
  m.emit([&](const void* p, std::size_t n) { file.write(p, n); });
  if (data_file) data_file->commit();
  file.commit();
  return data_path;
}

}  // namespace trainbox::io::onnx
