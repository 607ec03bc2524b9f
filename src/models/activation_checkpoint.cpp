#include <trainbox/models/activation_checkpoint.h>

#include <array>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <trainbox/util/errors.h>

namespace trainbox {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The autocast state of the device types trainbox trains on.
constexpr std::array<c10::DeviceType, 2> kAutocastDevices = {c10::DeviceType::CPU, c10::DeviceType::CUDA};
struct AutocastState {
  std::array<bool, 2> enabled{};
  std::array<c10::ScalarType, 2> dtype{};
  bool cache = true;
  static AutocastState current() {
    AutocastState s;
    for (std::size_t i = 0; i < kAutocastDevices.size(); ++i) {
      s.enabled[i] = at::autocast::is_autocast_enabled(kAutocastDevices[i]);
      s.dtype[i] = at::autocast::get_autocast_dtype(kAutocastDevices[i]);
    }
    s.cache = at::autocast::is_autocast_cache_enabled();
    return s;
  }
  void apply() const {
    for (std::size_t i = 0; i < kAutocastDevices.size(); ++i) {
      at::autocast::set_autocast_enabled(kAutocastDevices[i], enabled[i]);
      at::autocast::set_autocast_dtype(kAutocastDevices[i], dtype[i]);
    }
    at::autocast::set_autocast_cache_enabled(cache);
  }
  bool any() const { return enabled[0] || enabled[1]; }
};

// The forward's autocast state for the recomputation, the backward's own restored after it
// (with torch.autocast's nesting: leaving the outermost scope drops the cast-weight cache).
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& s) : prev_(AutocastState::current()), nested_(s.any()) {
    s.apply();
    if (nested_) at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    prev_.apply();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState prev_;
  bool nested_;
};

at::Tensor rng_state(at::Generator g) {  // a handle: copies share the generator
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}
void set_rng_state(at::Generator g, const at::Tensor& s) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(s);
}

// The generators a unit's forward may draw from: the CPU's, and the CUDA device's of its input.
struct RngStates {
  at::Generator cpu;
  at::Tensor cpu_state;
  std::optional<at::Generator> cuda;
  at::Tensor cuda_state;
  static RngStates take(const torch::Tensor& x) {
    RngStates r{at::globalContext().defaultGenerator(c10::Device(c10::kCPU)), {}, std::nullopt, {}};
    r.cpu_state = rng_state(r.cpu);
    if (x.is_cuda()) {
      r.cuda = at::globalContext().defaultGenerator(x.device());
      r.cuda_state = rng_state(*r.cuda);
    }
    return r;
  }
  RngStates now() const {  // the same generators' current states
    RngStates r{cpu, rng_state(cpu), cuda, {}};
    if (cuda) r.cuda_state = rng_state(*cuda);
    return r;
  }
  void put_back() const {
    set_rng_state(cpu, cpu_state);
    if (cuda) set_rng_state(*cuda, cuda_state);
  }
};

// A unit's buffers as they were before its recomputation, copied back when this goes (after
// the backward through the recomputation, which may have saved them).
class BufferSnapshot {
 public:
  explicit BufferSnapshot(const std::vector<torch::Tensor>& buffers) : buffers_(buffers) {
    torch::NoGradGuard no_grad;
    for (const auto& b : buffers_) before_.push_back(b.clone());
  }
  ~BufferSnapshot() {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(before_[i]);
  }
  BufferSnapshot(const BufferSnapshot&) = delete;
  BufferSnapshot& operator=(const BufferSnapshot&) = delete;

 private:
  const std::vector<torch::Tensor>& buffers_;
  std::vector<torch::Tensor> before_;
};

// --- dropout masks kept for the recomputation (CPU), trainbox::dropout ---
// A checkpointed unit's forward records each mask trainbox::dropout draws, with the CPU
// generator's state after the draw; its recomputation replays them in order (and sets the
// generator as the draw left it, so any other random op of the unit draws what it drew).
struct MaskTape {
  struct Draw {
    torch::Tensor keep;      // bool: the elements kept
    at::Tensor state_after;  // the CPU generator's state after the draw
  };
  std::vector<Draw> draws;
  std::size_t next = 0;
  bool replay = false;
};
// The tapes open on this thread, innermost last: a unit checkpointed inside another's
// recomputation records what the outer one replays.
thread_local std::vector<MaskTape*> t_tapes;
class TapeScope {
 public:
  explicit TapeScope(MaskTape* t) : t_(t) {
    if (t_) t_tapes.push_back(t_);
  }
  ~TapeScope() {
    if (t_) t_tapes.pop_back();
  }
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  MaskTape* t_;
};

// What the backward needs besides the saved input: the body, the unit's parameters (inputs of
// the node, after the input) and buffers, and the state the forward ran in.
struct Unit : torch::CustomClassHolder {
  CheckpointBody body;
  std::vector<torch::Tensor> params;   // the unit's parameters that require grad: the node's inputs after x
  std::vector<torch::Tensor> buffers;  // put back after the recomputation
  std::optional<RngStates> rng;
  AutocastState autocast;
  MaskTape masks;  // CPU: trainbox::dropout's masks, from the forward to the recomputation
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // args: the input, then unit->params (so the node has an edge to each parameter)
  static torch::Tensor forward(AutogradContext* ctx, const c10::intrusive_ptr<Unit>& unit, at::TensorList args) {
    // Grad is off here (autograd::Function runs forward so): nothing inside the unit is saved.
    const torch::Tensor& x = args[0];
    unit->rng = RngStates::take(x);
    unit->autocast = AutocastState::current();
    ctx->save_for_backward({x});
    ctx->saved_data["unit"] = c10::IValue::make_capsule(unit);
    const TapeScope tape(x.device().is_cpu() ? &unit->masks : nullptr);
    return unit->body(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto unit = c10::static_intrusive_pointer_cast<Unit>(ctx->saved_data["unit"].toCapsule());
    ctx->saved_data.erase("unit");
    const torch::Tensor saved = ctx->get_saved_variables()[0];
    variable_list out(2 + unit->params.size());  // [unit (not a tensor), x, params...]
    if (!grad_out[0].defined()) return out;

    // --- the recomputation: the forward's RNG and autocast; the buffers put back after its backward ---
    // (BatchNorm saves its running statistics for the backward: they are restored once that has run)
    const torch::Tensor x = saved.detach().requires_grad_(saved.requires_grad());
    const BufferSnapshot buffers(unit->buffers);
    const RngStates backward_rng = unit->rng->now();
    unit->rng->put_back();
    torch::Tensor y;
    try {
      torch::AutoGradMode grad_on(true);
      AutocastScope autocast(unit->autocast);
      unit->masks.replay = true;
      unit->masks.next = 0;
      {
        const TapeScope tape(x.device().is_cpu() ? &unit->masks : nullptr);
        y = unit->body(x);
      }
      if (unit->masks.next != unit->masks.draws.size())
        throw std::logic_error(
            fmt::format("activation checkpointing: the recomputation drew {} dropout masks, the forward {}",
                        unit->masks.next, unit->masks.draws.size()));
      unit->masks.draws.clear();  // the recomputation's graph holds what its backward needs
    } catch (...) {
      backward_rng.put_back();
      throw;
    }
    backward_rng.put_back();

    // --- backpropagate through it: the gradients of x and of the parameters ---
    variable_list wrt;
    if (x.requires_grad()) wrt.push_back(x);
    for (const auto& p : unit->params) wrt.push_back(p);
    if (wrt.empty() || !y.requires_grad()) return out;
    auto grads = torch::autograd::grad({y}, wrt, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
    std::size_t k = 0;
    if (x.requires_grad()) out[1] = grads[k++];
    for (std::size_t i = 0; i < unit->params.size(); ++i) out[2 + i] = grads[k++];
    return out;
  }
};

}  // namespace

bool keeps_dropout_masks() { return !t_tapes.empty(); }

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (!training || p == 0.0) return x;
  if (t_tapes.empty() || !x.device().is_cpu() || p >= 1.0 || x.numel() == 0) return torch::dropout(x, p, training);
  // ATen's CPU dropout, step by step (noise = bernoulli(1 - p) / (1 - p); x · noise): the same values.
  MaskTape* from = nullptr;  // the innermost tape that replays, if any
  for (auto it = t_tapes.rbegin(); it != t_tapes.rend() && !from; ++it)
    if ((*it)->replay) from = *it;
  torch::Tensor noise;
  MaskTape::Draw draw;
  if (from) {
    if (from->next >= from->draws.size() || !from->draws[from->next].keep.sizes().equals(x.sizes()))
      throw std::logic_error(
          fmt::format("activation checkpointing: the recomputation asks for dropout mask {} of shape {}, which the "
                      "forward did not draw",
                      from->next, x.sizes()));
    draw = from->draws[from->next++];
    set_rng_state(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)), draw.state_after);
    noise = draw.keep.to(x.scalar_type());
  } else {
    noise = at::empty_like(x).bernoulli_(1 - p);
    draw.keep = noise.to(torch::kBool);
    draw.state_after = rng_state(at::globalContext().defaultGenerator(c10::Device(c10::kCPU)));
  }
  for (auto* t : t_tapes)
    if (!t->replay) t->draws.push_back(draw);
  noise.div_(1 - p);
  return x * noise;
}

torch::Tensor checkpoint(torch::nn::Module& owner, CheckpointBody body, const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled()) return body(x);  // evaluation: nothing to save, nothing to recompute
  auto unit = c10::make_intrusive<Unit>();
  for (const auto& p : owner.parameters())
    if (p.requires_grad()) unit->params.push_back(p);
  if (!x.requires_grad() && unit->params.empty()) return body(x);  // no gradient flows through it
  unit->body = std::move(body);
  unit->buffers = owner.buffers();
  std::vector<torch::Tensor> args;
  args.reserve(1 + unit->params.size());
  args.push_back(x);
  args.insert(args.end(), unit->params.begin(), unit->params.end());
  return CheckpointFunction::apply(unit, at::TensorList(args));
}

namespace {
struct UnitEntry {
  std::weak_ptr<torch::nn::Module> module;  // a stale address (the module gone) is not a unit
  const UnitHooksScope* hooks = nullptr;
};
std::mutex units_mu;
std::unordered_map<const torch::nn::Module*, UnitEntry>& units() {
  static std::unordered_map<const torch::nn::Module*, UnitEntry> u;
  return u;
}
// The live entry for m, or null (units_mu held).
UnitEntry* unit_entry(const torch::nn::Module& m) {
  auto it = units().find(&m);
  if (it == units().end()) return nullptr;
  auto alive = it->second.module.lock();
  if (alive.get() != &m) {
    units().erase(it);
    return nullptr;
  }
  return &it->second;
}
}  // namespace

void mark_unit(torch::nn::Module& m) {
  std::shared_ptr<torch::nn::Module> owned;
  try {
    owned = m.shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    throw ConfigError(fmt::format("mark_unit: module '{}' is not owned by a shared_ptr", m.name()),
                      "mark a module after it is registered (register_module) or made with std::make_shared");
  }
  std::lock_guard<std::mutex> lk(units_mu);
  if (!unit_entry(m)) units()[&m] = UnitEntry{owned, nullptr};
}

bool is_unit(const torch::nn::Module& m) {
  std::lock_guard<std::mutex> lk(units_mu);
  return unit_entry(m) != nullptr;
}

std::vector<std::shared_ptr<torch::nn::Module>> find_units(const std::shared_ptr<torch::nn::Module>& root) {
  std::vector<std::shared_ptr<torch::nn::Module>> out;
  std::function<void(const std::shared_ptr<torch::nn::Module>&)> walk = [&](const auto& m) {
    if (is_unit(*m)) {
      out.push_back(m);
      return;
    }
    for (const auto& c : m->children()) walk(c);
  };
  walk(root);
  return out;
}

UnitHooksScope::UnitHooksScope(std::vector<std::shared_ptr<torch::nn::Module>> units, Before before, After after)
    : units_(std::move(units)), before_(std::move(before)), after_(std::move(after)) {
  std::lock_guard<std::mutex> lk(units_mu);
  for (const auto& u : units_)
    if (auto* e = unit_entry(*u)) e->hooks = this;
}

UnitHooksScope::~UnitHooksScope() {
  std::lock_guard<std::mutex> lk(units_mu);
  for (const auto& u : units_)
    if (auto* e = unit_entry(*u); e && e->hooks == this) e->hooks = nullptr;
}

torch::Tensor run_unit(torch::nn::Module& owner, CheckpointBody body, const torch::Tensor& x, bool recompute) {
  const UnitHooksScope* hooks = nullptr;
  {
    std::lock_guard<std::mutex> lk(units_mu);
    if (auto* e = unit_entry(owner)) hooks = e->hooks;
  }
  if (hooks) hooks->before(owner);
  torch::Tensor y = recompute ? checkpoint(owner, std::move(body), x) : body(x);
  return hooks ? hooks->after(owner, y) : y;
}

namespace models {
std::int64_t checkpoint_every(const ModelConfig& c) {
  if (c.activation_checkpointing == "none") return 0;
  if (c.activation_checkpointing == "blocks") return 1;
  if (c.activation_checkpointing == "every_k") {
    if (c.activation_checkpointing_every < 1)
      throw ConfigError(
          fmt::format("model.activation_checkpointing_every = {} is not a block count",
                      c.activation_checkpointing_every),
          "set model.activation_checkpointing_every to 1 or more (K: blocks K, 2K, ... are checkpointed)");
    return c.activation_checkpointing_every;
  }
  throw ConfigError(
      fmt::format("model.activation_checkpointing = \"{}\" is not a policy", c.activation_checkpointing),
      "use \"none\", \"blocks\" (every block) or \"every_k\" (every model.activation_checkpointing_every-th block)");
}
}  // namespace models

}  // namespace trainbox
