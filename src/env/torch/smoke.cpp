#include <trainbox/env/torch/smoke.h>

#include <chrono>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#ifdef TRAINBOX_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif
#ifdef TRAINBOX_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef TRAINBOX_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <trainbox/util/errors.h>
#include <trainbox/util/clock.h>

namespace trainbox::env {

bool SmokeResult::ok() const {
  for (const auto& c : checks)
    if (!c.ok) return false;
  return !checks.empty();
}

namespace {

void sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
}

// Runs one check; an exception is a failure with its message, never a crash.
void check(SmokeResult& r, const std::string& name, const torch::Device& dev,
           const std::function<std::string()>& body) {
  SmokeCheck c;
  c.name = name;
  auto t0 = std::chrono::steady_clock::now();
  try {
    c.detail = body();
    sync(dev);
    c.ok = c.detail.rfind("FAIL", 0) != 0;
  } catch (const std::exception& e) {
    c.ok = false;
    std::string msg = e.what();
    c.detail = msg.substr(0, msg.find('\n'));
  }
  c.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.checks.push_back(std::move(c));
}

// The device --device names; "auto": CUDA when torch sees it, else the CPU (with a note).
torch::Device choose_device(const std::string& device, SmokeResult& r) {
  torch::Device dev(torch::kCPU);
  if (device == "auto") {
    if (torch::cuda::is_available())
      dev = torch::Device(torch::kCUDA, 0);
    else
      r.note = "no CUDA device visible to torch: ran the CPU equivalents";
  } else {
    try {
      dev = torch::Device(device);
    } catch (const std::exception&) {
      throw UsageError("--device " + device + " is not a device", "use auto, cpu, cuda or cuda:N");
    }
    if (dev.is_cuda() && !torch::cuda::is_available())
      throw UsageError("--device " + device + " but torch sees no CUDA device", "run `trainbox doctor` to see why");
  }
  if (dev.is_cuda() && !dev.has_index()) dev = torch::Device(torch::kCUDA, 0);
  return dev;
}

// Start-up: context, first allocation, first kernel; timed apart from the checks (ms).
double start_device(const torch::Device& dev) {
  auto t0 = std::chrono::steady_clock::now();
  try {
#ifdef TRAINBOX_WITH_CUDA
    if (dev.is_cuda()) c10::cuda::set_device(dev.index());
#endif
    auto t = torch::ones({1024}, torch::TensorOptions().device(dev));
    (void)t.sum().item<float>();
  } catch (const std::exception&) {
    // the alloc check reports it, with the message
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// allocation: 256 MiB, written and read back
std::string check_alloc(const torch::Device& dev) {
  const int64_t n = 64LL << 20;  // floats = 256 MiB
  auto t = torch::full({n}, 2.0f, torch::TensorOptions().device(dev));
  double s = t.sum().item<double>();
  return s == 2.0 * n ? fmt::format("256 MiB allocated and summed on {}", dev.str())
                      : fmt::format("FAIL: sum {} != {}", s, 2.0 * n);
}

// GEMM: random fp32 1024³, checked against a float64 CPU reference
std::string check_gemm(const torch::Device& dev) {
  const int64_t n = 1024;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  auto ref = torch::mm(a.to(torch::kFloat64), b.to(torch::kFloat64));
  auto ad = a.to(dev), bd = b.to(dev);
  auto c = torch::mm(ad, bd);  // warm-up: library handles, workspaces
  sync(dev);
  auto t0 = std::chrono::steady_clock::now();
  c = torch::mm(ad, bd);
  sync(dev);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  double err = ((c.cpu().to(torch::kFloat64) - ref).abs().max() / ref.abs().max()).item<double>();
  // fp32 accumulation over 1024 terms: ~1e-6 relative; TF32 would be ~1e-3.
  return err < 5e-3 ? fmt::format("1024x1024 fp32, max rel err {:.1e} vs CPU float64, {:.2f} ms", err, ms)
                    : fmt::format("FAIL: max rel err {:.1e} vs CPU float64", err);
}

// copy: 64 MiB host → device → host, pinned when on CUDA
std::string check_copy(const torch::Device& dev) {
  const int64_t n = 16LL << 20;
  auto host = torch::randn({n}, torch::TensorOptions().pinned_memory(dev.is_cuda()));
  (void)host.to(dev, /*non_blocking=*/false, /*copy=*/true).to(torch::kCPU, false, true);  // warm-up
  sync(dev);
  auto t0 = std::chrono::steady_clock::now();
  auto on_dev = host.to(dev, /*non_blocking=*/false, /*copy=*/true);
  auto back = on_dev.to(torch::kCPU, false, true);
  sync(dev);
  double s = seconds_since(t0);
  bool same = torch::equal(host, back);
  double gbps = 2.0 * n * 4 / s / 1e9;
  return same ? fmt::format("64 MiB round trip bit-exact, {:.1f} GB/s", gbps)
              : std::string("FAIL: data changed in transit");
}

// allreduce: a single-rank process group, the whole communication path
std::string check_allreduce(const torch::Device& dev) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  c10::intrusive_ptr<c10d::Backend> pg;
  std::string backend;
  if (dev.is_cuda()) {
#ifdef TRAINBOX_WITH_NCCL
    c10::cuda::set_device(dev.index());
    pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, 0, 1);
    backend = "nccl";
#else
    return "FAIL: this trainbox was built without NCCL";
#endif
  } else {
#ifdef TRAINBOX_WITH_GLOO
    auto opts = c10d::ProcessGroupGloo::Options::create();
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, opts);
    backend = "gloo";
#else
    return "FAIL: this trainbox was built without Gloo";
#endif
  }
  std::vector<at::Tensor> ts = {torch::arange(1024, torch::TensorOptions().dtype(torch::kFloat32).device(dev))};
  auto expect = ts[0].clone();
  pg->allreduce(ts)->wait();
  bool same = torch::equal(ts[0], expect);
#ifdef TRAINBOX_WITH_NCCL
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(pg.get())) nccl->shutdown();
#endif
  return same ? fmt::format("{} world of 1: 4 KiB allreduce correct", backend)
              : std::string("FAIL: allreduce of one rank changed the data");
}

}  // namespace

SmokeResult run_smoke(const std::string& device) {
  SmokeResult r;
  const torch::Device dev = choose_device(device, r);
  r.device = dev.str();
  torch::manual_seed(1234);
  r.startup_ms = start_device(dev);
  check(r, "alloc", dev, [&] { return check_alloc(dev); });
  check(r, "gemm", dev, [&] { return check_gemm(dev); });
  check(r, "copy", dev, [&] { return check_copy(dev); });
  check(r, "allreduce", dev, [&] { return check_allreduce(dev); });
  return r;
}

nlohmann::json smoke_to_json(const SmokeResult& r) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& c : r.checks) checks.push_back({{"name", c.name}, {"ok", c.ok}, {"ms", c.ms}, {"detail", c.detail}});
  nlohmann::json j = {{"device", r.device}, {"ok", r.ok()}, {"startup_ms", r.startup_ms}, {"checks", checks}};
  if (!r.note.empty()) j["note"] = r.note;
  return j;
}

}  // namespace trainbox::env
