#include "checkpoint_state.h"

#include "sharded_checkpoint.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/io/durable_file.h>
#include <trainbox/models/lora.h>
#include <trainbox/train/checkpoint.h>
#include <trainbox/train/checkpoint_path.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

namespace trainbox::train {
namespace fs = std::filesystem;

namespace {

// Through io::DurableFile, not OutputArchive::save_to(path): torch's own file writer aborts the
// process when a write fails (a full disk), DurableFile reports it (io/durable_file.h).
void save_archive(torch::serialize::OutputArchive& ar, const std::string& path) {
  io::DurableFile f(path);
  ar.save_to([&](const void* p, std::size_t n) { return f.write(p, n); });
  f.close();  // FileWriteError: "cannot write …: No space left on device (errno 28)"
}

// torch::serialize reports a damaged archive as a c10::Error; name the file instead.
template <class F>
void reading(const std::string& path, F&& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    throw DataError(
        fmt::format(
            "checkpoint file {} cannot be read: {}", path,
            std::string(e.what_without_backtrace()).substr(0, std::string(e.what_without_backtrace()).find('\n'))),
        "resume from an earlier checkpoint (--resume <run_dir>/checkpoints/step_N)");
  }
}

}  // namespace

void write_checkpoint(const std::string& d, torch::nn::Module& module, const Optimizer& opt, const CheckpointState& s,
                      const std::string& config_toml) {
  write_checkpoint(
      d, module, [&](torch::serialize::OutputArchive& ar) { opt.save(ar); }, s, config_toml);
}

void write_checkpoint(const std::string& d, torch::nn::Module& module,
                      const std::function<void(torch::serialize::OutputArchive&)>& write_optimizer,
                      const CheckpointState& s, const std::string& config_toml) {
  torch::serialize::OutputArchive mar;
  module.save(mar);
  save_archive(mar, d + "/model.pt");
  torch::serialize::OutputArchive oar;
  write_optimizer(oar);
  save_archive(oar, d + "/optimizer.pt");
  write_checkpoint_rest(d, s, config_toml);
}

void write_checkpoint_rest(const std::string& d, const CheckpointState& s, const std::string& config_toml) {
  torch::serialize::OutputArchive rar;
  rar.write("cpu", at::detail::getDefaultCPUGenerator().get_state());
  save_archive(rar, d + "/rng.pt");
  nlohmann::json st = {{"epoch", s.pos.epoch},
                       {"batch", s.pos.batch},
                       {"step", s.pos.step},
                       {"samples", s.pos.samples},
                       {"scaler", s.scaler},
                       {"lr", s.lr},
                       {"torch", TORCH_VERSION},
                       {"input_shape", s.sample_shape},
                       {"classes", s.classes},
                       {"world_size", s.layout.world_size},
                       {"global_batch", s.layout.global_batch},
                       {"cursor", s.layout.cursor}};
  for (const auto& [k, v] : s.extra.items()) st[k] = v;
  io::DurableFile::write_text(d + "/state.json", st.dump(2));  // a short write fails the save
  io::DurableFile::write_text(d + "/config.toml", config_toml);
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = dir + "/state.json";
  auto st = nlohmann::json::parse(read_file(path).value_or(""), nullptr, false);
  CheckpointState s;
  try {
    if (st.is_discarded() || !st.is_object()) throw std::runtime_error("not a JSON object");
    s.pos = {st.at("epoch").get<std::int64_t>(), st.at("batch").get<std::int64_t>(), st.at("step").get<std::int64_t>(),
             st.at("samples").get<std::int64_t>()};
    s.scaler = st.at("scaler").get<std::vector<double>>();
    s.lr = st.value("lr", -1.0);  // -1: written before the rate was kept
    s.sample_shape = st.at("input_shape").get<std::vector<std::int64_t>>();
    s.classes = st.at("classes").get<std::int64_t>();
    s.layout = {st.value("world_size", std::int64_t{0}), st.value("global_batch", std::int64_t{0}),
                st.value("cursor", std::int64_t{0})};
    for (const auto& [k, v] : st.items())
      if (!std::set<std::string>{"epoch", "batch", "step", "samples", "scaler", "lr", "torch", "input_shape", "classes",
                                 "world_size", "global_batch", "cursor"}
               .count(k))
        s.extra[k] = v;
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{} is missing or corrupt ({})", path, e.what()),
                    "resume from or export an earlier checkpoint");
  }
  return s;
}

void load_checkpoint_module(const std::string& dir, torch::nn::Module& module, const torch::Device& device) {
  if (is_sharded_checkpoint(dir)) return load_sharded_module(dir, module, device);
  const std::string path = dir + "/model.pt";
  reading(path, [&] {
    torch::serialize::InputArchive ar;
    ar.load_from(path, device);
    module.load(ar);
  });
}

void load_checkpoint_optimizer_rng(const std::string& dir, Optimizer& opt, const torch::Device& device) {
  load_checkpoint_optimizer_rng(
      dir, [&](torch::serialize::InputArchive& ar) { opt.load(ar); }, device);
}

void load_checkpoint_optimizer_rng(const std::string& dir,
                                   const std::function<void(torch::serialize::InputArchive&)>& read_optimizer,
                                   const torch::Device& device) {
  reading(dir + "/optimizer.pt", [&] {
    torch::serialize::InputArchive oar;
    oar.load_from(dir + "/optimizer.pt", device);
    read_optimizer(oar);
  });
  load_checkpoint_rng(dir);
}

void load_checkpoint_rng(const std::string& dir) {
  reading(dir + "/rng.pt", [&] {
    torch::serialize::InputArchive rar;
    rar.load_from(dir + "/rng.pt");
    torch::Tensor cpu_state;
    rar.read("cpu", cpu_state);
    auto gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(cpu_state);
  });
}

namespace {
// A Trainer API program's checkpoint (state.json's trainer_module, trainer.cpp): its config.toml
// keeps the default model.name, and building that model would fail on the file's tensors with
// a fix that points the wrong way. Named instead, with the way to export it.
void refuse_program_module(const std::string& dir, const CheckpointState& state) {
  const auto it = state.extra.find("trainer_module");
  if (it == state.extra.end() || !it->is_string()) return;
  throw UsageError(
      fmt::format("checkpoint {} holds a Trainer API program's own module ({}), which trainbox cannot build: its "
                  "config.toml's [model] keys do not describe it",
                  dir, it->get<std::string>()),
      fmt::format("export it from the program that trained it, which builds the module: after fit(), "
                  "models::save_weights(*net, \"net.safetensors\") or models::save_weights_pt(*net, \"net.pt\"); "
                  "a finished run loads by resuming it (o.resume = \"{}\": fit() trains nothing more) "
                  "(docs/trainer.md, \"Export\")",
                  dir));
}
}  // namespace

CheckpointModel load_checkpoint_model(const std::string& named, const torch::Device& device) {
  CheckpointModel m;
  const std::string dir =
      resolve_checkpoint(named, &m.notes);  // a run dir (its newest that verifies), `latest`, step_N
  m.dir = dir;
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw DataError("checkpoint " + dir + " does not exist",
                    "pass a checkpoint dir (<run_dir>/checkpoints/step_N), the run dir, or its checkpoints/latest");
  if (!fs::exists(dir + "/" + kCheckpointComplete) || (!fs::exists(dir + "/model.pt") && !is_sharded_checkpoint(dir)))
    throw DataError("checkpoint " + dir + " is missing or incomplete",
                    "pass a checkpoint dir (<run_dir>/checkpoints/step_N), the run dir, or its checkpoints/latest");
  try {
    for (auto& n : CheckpointStore::check_resumable(dir)) m.notes.push_back(std::move(n));
  } catch (const DataError& e) {  // a damaged file, named; nothing loaded
    throw DataError(e.what(),
                    "pass an earlier checkpoint (<run_dir>/checkpoints/step_N), or the run dir, which takes the "
                    "newest checkpoint that verifies");
  }
  m.config = load_config(dir + "/config.toml");
  m.state = read_checkpoint_state(dir);
  refuse_program_module(dir, m.state);  // a Trainer API program's module: only that program can build it
  models::InputShape shape;
  if (m.state.sample_shape.size() == 3)
    shape = {m.state.sample_shape[0], m.state.sample_shape[1], m.state.sample_shape[2]};
  m.model = models::make_model(m.config.model, shape, m.state.classes);
  if (m.config.model.lora_r > 0) models::apply_lora(*m.model, m.config.model);  // the adapters' names, the base's dtype
  load_checkpoint_module(dir, *m.model, device);
  m.model->to(device);
  return m;
}

}  // namespace trainbox::train
