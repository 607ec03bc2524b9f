// trainbox/io/onnx.h — writing an ONNX model file (the protobuf ModelProto of onnx.proto).
//
// A small protobuf wire-format writer of our own, covering the subset of onnx.proto a static
// inference graph needs: ModelProto (ir_version, opset_import, producer, graph,
// metadata_props), GraphProto (node, initializer, input, output), NodeProto, AttributeProto
// (int, float, string, ints, floats), TensorProto (dims, data_type, name, raw_data or external
// data), ValueInfoProto with tensor types and symbolic or fixed dims. Field numbers are
// onnx.proto's (onnx 1.23; stable since IR version 3). Why not libprotobuf + the schema:
// docs/decisions.md ("ONNX: our own protobuf writer").
//
// Initializer bytes are never copied: the file is streamed from the views given, which must
// stay alive during write_model(). Protobuf messages cannot exceed 2 GiB, so beyond
// kExternalDataAbove bytes of initializers (or always, with ExternalData::kAlways) every
// initializer goes to `<path>.data` beside the model (64-byte aligned offsets, onnx's
// external-data keys location/offset/length), which ONNX Runtime and onnx.load read from the
// model's folder. Both files are written atomically (io/atomic_file.h), the data file first.
// Throws UsageError for an empty graph or a size mismatch, SystemError for I/O failures.
//
//   io::onnx::Model m;
//   m.graph.inputs = {{"input", io::onnx::ElemType::kFloat, {{0, "batch"}, {784}}}};
//   m.graph.initializers.push_back({"fc1.weight", io::onnx::ElemType::kFloat, {128, 784}, w, nbytes});
//   m.graph.nodes.push_back({"Gemm", "fc1", {"input", "fc1.weight", "fc1.bias"}, {"logits"},
//                            {io::onnx::Attr::integer("transB", 1)}});
//   io::onnx::write_model("net.onnx", m);
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainbox::io::onnx {

// TensorProto.DataType values.
enum class ElemType : std::int32_t {
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kBFloat16 = 16
};
std::size_t elem_size(ElemType t);

// One axis of a value's shape: a fixed size (param empty) or a named, dynamic one.
struct Dim {
  std::int64_t value = 0;
  std::string param;
};
struct ValueInfo {
  std::string name;
  ElemType type = ElemType::kFloat;
  std::vector<Dim> shape;
  std::string doc;
};

struct Attr {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats };
  std::string name;
  Kind kind = Kind::kInt;
  std::int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<std::int64_t> ints;
  std::vector<float> floats;
  static Attr integer(std::string n, std::int64_t v) {
    Attr a;
    a.name = std::move(n);
    a.kind = Kind::kInt;
    a.i = v;
    return a;
  }
  static Attr real(std::string n, float v) {
    Attr a;
    a.name = std::move(n);
    a.kind = Kind::kFloat;
    a.f = v;
    return a;
  }
  static Attr string(std::string n, std::string v) {
    Attr a;
    a.name = std::move(n);
    a.kind = Kind::kString;
    a.s = std::move(v);
    return a;
  }
  static Attr integers(std::string n, std::vector<std::int64_t> v) {
    Attr a;
    a.name = std::move(n);
    a.kind = Kind::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attr reals(std::string n, std::vector<float> v) {
    Attr a;
    a.name = std::move(n);
    a.kind = Kind::kFloats;
    a.floats = std::move(v);
    return a;
  }
};

struct Node {
  std::string op_type, name;
  std::vector<std::string> inputs, outputs;
  std::vector<Attr> attrs;
};

// A constant of the graph. `data` (nbytes long, row-major, little-endian) is borrowed; when it
// is null, `owned` holds the bytes (small constants built by the graph writer).
struct Initializer {
  std::string name;
  ElemType type = ElemType::kFloat;
  std::vector<std::int64_t> dims;
  const void* data = nullptr;
  std::size_t nbytes = 0;
  std::string owned;
};

struct Graph {
  std::string name, doc;
  std::vector<Node> nodes;
  std::vector<Initializer> initializers;
  std::vector<ValueInfo> inputs, outputs;
};

struct Model {
  std::int64_t ir_version = 8;  // IR 8 goes with opset 17 (onnx's VERSION_TABLE, onnx 1.12)
  std::int64_t opset = 17;
  std::string producer_name = "trainbox", producer_version, doc;
  Graph graph;
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props
};

enum class ExternalData { kAuto, kAlways, kNever };
// 2 GiB is protobuf's hard limit for one message; leave room for the graph itself.
inline constexpr std::uint64_t kExternalDataAbove = (std::uint64_t{2} << 30) - (std::uint64_t{64} << 20);

struct WriteOptions {
  ExternalData external = ExternalData::kAuto;
};

// This build's trainbox version ("0.1.0"): the default producer_version.
const char* trainbox_version();

// What write_model(path, model, options) writes, computed without writing a byte or reading a
// weight (the decision is this function's; write_model follows it): the initializers' bytes;
// whether they go to `<path>.data` (kAuto: above kExternalDataAbove); the size of the model file,
// one protobuf message, which protobuf refuses beyond 2^31 - 1 bytes; and the data file's size.
struct Plan {
  std::uint64_t weight_bytes = 0;
  bool external = false;
  std::uint64_t model_bytes = 0, data_bytes = 0;
};
Plan plan_model(const std::string& path, const Model& model, const WriteOptions& options = {});

// Writes `model` to `path`. Returns the external data file's path, or "" when none was needed.
std::string write_model(const std::string& path, const Model& model, const WriteOptions& options = {});

}  // namespace trainbox::io::onnx
