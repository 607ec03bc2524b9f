// io::onnx's switch to external data (docs/export.md, "Beyond 2 GB") at the real numbers: a
// model just under kExternalDataAbove bytes of weights is one file whose protobuf message stays
// under protobuf's 2^31 - 1 bytes, 4 bytes more go to OUT.data. The weights are views of a
// reserved, never-touched anonymous mapping (no memory, nothing written): plan_model is the
// decision write_model follows, and write_model's own refusal (kNever above the limit) runs on
// the same 2 GiB of views. On small models, the files write_model writes are the plan's sizes.
// tests/integration/export_formats.py loads trainbox's external-data exports with onnx and ONNX
// Runtime.
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <trainbox/io/onnx.h>
#include <trainbox/util/errors.h>

using namespace trainbox;
namespace ox = trainbox::io::onnx;
namespace fs = std::filesystem;

namespace {
// protobuf's limit for one message (its sizes are int: ByteSizeLong() > INT_MAX fails to serialise).
constexpr std::uint64_t kProtobufMax = INT_MAX;

// `bytes` of address space that reads as zeros and costs nothing until touched.
class Reserved {
 public:
  explicit Reserved(std::size_t bytes) : n_(bytes) {
    p_ = mmap(nullptr, n_, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p_ == MAP_FAILED) p_ = nullptr;
  }
  ~Reserved() {
    if (p_) munmap(p_, n_);
  }
  Reserved(const Reserved&) = delete;
  Reserved& operator=(const Reserved&) = delete;
  const char* data() const { return static_cast<const char*>(p_); }

 private:
  void* p_ = nullptr;
  std::size_t n_;
};

// input [batch, k] · weight [k, 1] + bias [1]: fp32 initializers of the sizes given (bytes / 4
// elements each), the way trainbox's graph writers name and lay them out.
ox::Model matmul_model(const char* weights, std::uint64_t weight_bytes, std::uint64_t bias_bytes) {
  ox::Model m;
  const auto k = static_cast<std::int64_t>(weight_bytes / 4);
  m.graph.inputs = {{"input", ox::ElemType::kFloat, {{0, "batch"}, {k, {}}}, ""}};
  m.graph.outputs = {{"logits", ox::ElemType::kFloat, {{0, "batch"}, {1, {}}}, ""}};
  m.graph.initializers.push_back({"fc.weight", ox::ElemType::kFloat, {k, 1}, weights, weight_bytes, {}});
  m.graph.initializers.push_back({"fc.bias",
                                  ox::ElemType::kFloat,
                                  {static_cast<std::int64_t>(bias_bytes / 4)},
                                  weights + weight_bytes,
                                  bias_bytes,
                                  {}});
  m.graph.nodes.push_back({"MatMul", "fc", {"input", "fc.weight"}, {"mm"}, {}});
  m.graph.nodes.push_back({"Add", "add", {"mm", "fc.bias"}, {"logits"}, {}});
  return m;
}
}  // namespace

TEST(OnnxExternalData, TheAutomaticSwitchIsAtTheLimitAndTheSingleFileStaysUnderProtobufs) {
  static_assert(ox::kExternalDataAbove == 2080374784u, "2 GiB - 64 MiB (include/trainbox/io/onnx.h)");
  Reserved zeros((std::size_t{2} << 30) + 4096);
  ASSERT_NE(zeros.data(), nullptr);
  const std::uint64_t limit = ox::kExternalDataAbove;
  // exactly at the limit (weight + bias): one file, under protobuf's limit by the graph's room
  const auto at = ox::plan_model("big.onnx", matmul_model(zeros.data(), limit - 4, 4));
  EXPECT_EQ(at.weight_bytes, limit);
  EXPECT_FALSE(at.external) << "kAuto wrote external data at exactly kExternalDataAbove";
  EXPECT_GT(at.model_bytes, limit);
  EXPECT_LE(at.model_bytes, kProtobufMax) << "the single-file model is over protobuf's 2 GiB";
  EXPECT_EQ(at.data_bytes, 0u);
  // 4 bytes more (one more bias element): every weight in big.onnx.data, a small model file
  const auto over = ox::plan_model("big.onnx", matmul_model(zeros.data(), limit - 4, 8));
  EXPECT_EQ(over.weight_bytes, limit + 4);
  EXPECT_TRUE(over.external) << "kAuto kept " << over.weight_bytes << " bytes of weights in one file";
  EXPECT_LT(over.model_bytes, 4096u);
  EXPECT_GE(over.data_bytes, over.weight_bytes);  // 64-byte aligned
  EXPECT_LT(over.data_bytes, over.weight_bytes + 2 * 64);
  // a real 2 GiB of weights, the size protobuf itself cannot hold
  const auto two_gib = ox::plan_model("big.onnx", matmul_model(zeros.data(), (std::uint64_t{2} << 30) - 4, 4));
  EXPECT_TRUE(two_gib.external);
  // forced either way
  EXPECT_TRUE(ox::plan_model("m.onnx", matmul_model(zeros.data(), 64, 4), {ox::ExternalData::kAlways}).external);
  EXPECT_FALSE(ox::plan_model("m.onnx", matmul_model(zeros.data(), 64, 4), {ox::ExternalData::kAuto}).external);
  // write_model itself, on the same views: kNever above the limit is refused before a file exists
  const fs::path dir = fs::temp_directory_path() / ("tb-onnx-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "big.onnx").string();
  try {
    ox::write_model(out, matmul_model(zeros.data(), limit - 4, 8), {ox::ExternalData::kNever});
    ADD_FAILURE() << "kNever wrote " << limit + 4 << " bytes of weights into one protobuf message";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("2080374788 bytes of weights do not fit in one protobuf message"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_empty(dir)) << "a refused write left a file";
  fs::remove_all(dir);
}

// The plan is what write_model writes: the files' sizes, and OUT.data only when it says so.
TEST(OnnxExternalData, WriteModelWritesThePlannedFiles) {
  std::vector<float> w(300, 0.5f);
  const char* p = reinterpret_cast<const char*>(w.data());
  const fs::path dir = fs::temp_directory_path() / ("tb-onnx-w-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (auto mode : {ox::ExternalData::kAuto, ox::ExternalData::kAlways}) {
    const std::string out = (dir / "m.onnx").string();
    const auto model = matmul_model(p, 256 * 4, 44 * 4);
    const auto plan = ox::plan_model(out, model, {mode});
    const std::string data = ox::write_model(out, model, {mode});
    EXPECT_EQ(fs::file_size(out), plan.model_bytes);
    EXPECT_EQ(!data.empty(), plan.external);
    EXPECT_EQ(fs::exists(out + ".data"), plan.external);
    if (plan.external) {
      EXPECT_EQ(data, out + ".data");
      EXPECT_EQ(fs::file_size(data), plan.data_bytes);
    }
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  fs::remove_all(dir);
}
