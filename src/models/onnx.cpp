// The built-in models as ONNX graphs: one writer per model, reading the weights by their
// state_dict names. Ops are opset 17's (onnx/docs/Operators.md); each writer mirrors the
// model's forward() in src/models/models.cpp / gpt.cpp, in eval mode.
#include <trainbox/models/onnx.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/models/llama.h>
#include <trainbox/models/weights.h>
#include <trainbox/util/errors.h>

#include "resnet_spec.h"

namespace trainbox::models {
namespace {

namespace ox = io::onnx;
using Attr = ox::Attr;

// PyTorch's BatchNorm and LayerNorm default epsilon (and GPT-2's).
constexpr float kNormEps = 1e-5f;

struct DTypeChoice {
  torch::ScalarType torch_type;
  ox::ElemType onnx_type;
};
DTypeChoice parse_dtype(const std::string& d) {
  if (d == "fp32") return {torch::kFloat32, ox::ElemType::kFloat};
  if (d == "fp16") return {torch::kFloat16, ox::ElemType::kFloat16};
  if (d == "bf16") return {torch::kBFloat16, ox::ElemType::kBFloat16};
  throw UsageError(fmt::format("--dtype {} is not an ONNX export dtype", d), "use fp32, fp16 or bf16");
}

// Builds one graph: initializers from the model's state_dict (converted to the export dtype),
// small constants, nodes with generated output names. Records which state_dict tensors the
// graph uses, so that a model with a layer the writer does not know is refused, not exported
// without it.
class Builder {
 public:
  Builder(Model& model, const std::string& model_name, DTypeChoice dt, std::vector<torch::Tensor>& keep)
      : model_name_(model_name), dt_(dt), keep_(keep) {
    std::set<std::string> aliases;
    for (const auto& [alias, owner] : model.tied_weights()) aliases.insert(alias);
    for (auto& [name, t] : state_dict(model)) {
      if (aliases.count(name)) continue;  // the same tensor as its owner, exported once
      weights_[name] = t;
    }
  }

  bool has(const std::string& name) const { return weights_.count(name) > 0; }
  std::int64_t size(const std::string& name, std::int64_t dim) const { return tensor(name).size(dim); }

  // The state_dict tensor `name` as an initializer (once), in the export dtype.
  std::string weight(const std::string& name) {
    if (added_.insert(name).second) {
      auto t = tensor(name).detach().to(torch::kCPU, dt_.torch_type).contiguous();
      keep_.push_back(t);
      g.initializers.push_back({name, dt_.onnx_type, t.sizes().vec(), t.data_ptr(), t.nbytes(), {}});
    }
    return name;
  }
  std::string weight_or_empty(const std::string& name) { return has(name) ? weight(name) : std::string(); }

  std::string ints(const std::string& name, const std::vector<std::int64_t>& v) {
    ox::Initializer i{name, ox::ElemType::kInt64, {static_cast<std::int64_t>(v.size())}, nullptr, 0, {}};
    i.owned.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::int64_t));
    g.initializers.push_back(std::move(i));
    return name;
  }
  // A constant in the export dtype (scalars for the GELU, the attention scale, the mask).
  std::string constant(const std::string& name, const torch::Tensor& value) {
    auto t = value.to(torch::kCPU, dt_.torch_type).contiguous();
    ox::Initializer i{name, dt_.onnx_type, t.sizes().vec(), nullptr, 0, {}};
    i.owned.assign(static_cast<const char*>(t.data_ptr()), t.nbytes());
    g.initializers.push_back(std::move(i));
    return name;
  }

  std::string op(const std::string& type, std::vector<std::string> inputs, std::vector<Attr> attrs = {},
                 const std::string& name = {}) {
    return ops(type, std::move(inputs), 1, std::move(attrs), name).front();
  }
  std::vector<std::string> ops(const std::string& type, std::vector<std::string> inputs, int outputs,
                               std::vector<Attr> attrs = {}, const std::string& name = {}) {
    const std::string node_name = name.empty() ? fmt::format("{}_{}", type, g.nodes.size()) : name;
    std::vector<std::string> outs;
    for (int i = 0; i < outputs; ++i) outs.push_back(outputs == 1 ? node_name : fmt::format("{}:{}", node_name, i));
    while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();  // trailing optional inputs
    g.nodes.push_back({type, node_name, std::move(inputs), outs, std::move(attrs)});
    return outs;
  }
  // The last node's output gets the graph output's name.
  void rename_last_output(const std::string& name) { g.nodes.back().outputs.front() = name; }

  // Every state_dict tensor must be in the graph (BatchNorm's step counter is not a weight).
  void check_all_used() const {
    std::vector<std::string> unused;
    for (const auto& [name, t] : weights_)
      if (!added_.count(name) && name.find("num_batches_tracked") == std::string::npos) unused.push_back(name);
    if (!unused.empty())
      throw UsageError(fmt::format("the ONNX graph writer for model {} does not know the tensors {}: this model has "
                                   "layers that ONNX export does not support",
                                   model_name_, fmt::join(unused, ", ")),
                       "export the weights as .safetensors or .pt instead");
  }

  ox::Graph g;

 private:
  const torch::Tensor& tensor(const std::string& name) const {
    auto it = weights_.find(name);
    if (it == weights_.end())
      throw UsageError(fmt::format("the ONNX graph writer for model {} needs the tensor {}, which this model lacks",
                                   model_name_, name),
                       "export the weights as .safetensors or .pt instead");
    return it->second;
  }

  std::string model_name_;
  DTypeChoice dt_;
  std::vector<torch::Tensor>& keep_;
  std::map<std::string, torch::Tensor> weights_;
  std::set<std::string> added_;
};

std::string linear(Builder& b, const std::string& x, const std::string& prefix) {  // Gemm: x·Wᵀ + b
  return b.op("Gemm", {x, b.weight(prefix + ".weight"), b.weight_or_empty(prefix + ".bias")},
              {Attr::integer("transB", 1)}, prefix);
}
// x [.., in] · Wᵀ (+ b), any rank: MatMul with the transposed weight (ONNX Runtime folds the
// Transpose of a constant once, at session start).
std::string linear_nd(Builder& b, const std::string& x, const std::string& prefix) {
  auto wt = b.op("Transpose", {b.weight(prefix + ".weight")}, {Attr::integers("perm", {1, 0})}, prefix + ".weight_t");
  auto y = b.op("MatMul", {x, wt}, {}, prefix + ".matmul");
  return b.has(prefix + ".bias") ? b.op("Add", {y, b.weight(prefix + ".bias")}, {}, prefix) : y;
}
std::string conv(Builder& b, const std::string& x, const std::string& prefix, std::int64_t stride, std::int64_t pad) {
  const std::string w = prefix + ".weight";  // [out, in, kh, kw]
  return b.op("Conv", {x, b.weight(w), b.weight_or_empty(prefix + ".bias")},
              {Attr::integers("kernel_shape", {b.size(w, 2), b.size(w, 3)}),
               Attr::integers("strides", {stride, stride}), Attr::integers("pads", {pad, pad, pad, pad})},
              prefix);
}
std::string batch_norm(Builder& b, const std::string& x, const std::string& prefix) {
  return b.op("BatchNormalization",
              {x, b.weight(prefix + ".weight"), b.weight(prefix + ".bias"), b.weight(prefix + ".running_mean"),
               b.weight(prefix + ".running_var")},
              {Attr::real("epsilon", kNormEps)}, prefix);
}
std::string relu(Builder& b, const std::string& x) { return b.op("Relu", {x}); }

// --- mlp: Flatten → [Gemm → Relu]* → Gemm ---
void mlp_graph(Builder& b, const ModelConfig& c, std::string x) {
  x = b.op("Flatten", {x}, {Attr::integer("axis", 1)});
  const std::size_t n = c.hidden.size() + 1;
  for (std::size_t i = 1; i <= n; ++i) {
    x = linear(b, x, "fc" + std::to_string(i));
    if (i < n) x = relu(b, x);
  }
}

// --- cnn: [Conv3x3 → Relu → MaxPool2]* → Flatten → fc1 → Relu → fc2 ---
void cnn_graph(Builder& b, const ModelConfig& c, std::string x) {
  for (std::size_t i = 1; i <= c.channels.size(); ++i) {
    x = relu(b, conv(b, x, "conv" + std::to_string(i), 1, 1));
    x = b.op("MaxPool", {x}, {Attr::integers("kernel_shape", {2, 2}), Attr::integers("strides", {2, 2})});
  }
  x = b.op("Flatten", {x}, {Attr::integer("axis", 1)});
  x = linear(b, relu(b, linear(b, x, "fc1")), "fc2");
}

// --- resnet: stem → blocks (downsample where the shape changes) → GlobalAveragePool → fc ---
void resnet_graph(Builder& b, const ModelConfig& c, std::string x) {
  const ResNetSpec spec = resnet_spec(c);
  x = relu(b, batch_norm(b, conv(b, x, "conv1", spec.imagenet_stem ? 2 : 1, spec.imagenet_stem ? 3 : 1), "bn1"));
  if (spec.imagenet_stem)
    x = b.op("MaxPool", {x},
             {Attr::integers("kernel_shape", {3, 3}), Attr::integers("strides", {2, 2}),
              Attr::integers("pads", {1, 1, 1, 1})});
  for (std::size_t s = 0; s < spec.blocks.size(); ++s) {
    for (std::int64_t k = 0; k < spec.blocks[s]; ++k) {
      const std::string p = fmt::format("layer{}.{}", s + 1, k);
      const std::int64_t stride = k == 0 && s > 0 ? 2 : 1;
      std::string y;
      if (spec.bottleneck) {  // the stride in the 3×3 conv (torchvision's v1.5)
        y = relu(b, batch_norm(b, conv(b, x, p + ".conv1", 1, 0), p + ".bn1"));
        y = relu(b, batch_norm(b, conv(b, y, p + ".conv2", stride, 1), p + ".bn2"));
        y = batch_norm(b, conv(b, y, p + ".conv3", 1, 0), p + ".bn3");
      } else {
        y = relu(b, batch_norm(b, conv(b, x, p + ".conv1", stride, 1), p + ".bn1"));
        y = batch_norm(b, conv(b, y, p + ".conv2", 1, 1), p + ".bn2");
      }
      std::string skip = x;
      if (b.has(p + ".downsample.0.weight"))
        skip = batch_norm(b, conv(b, x, p + ".downsample.0", stride, 0), p + ".downsample.1");
      x = relu(b, b.op("Add", {y, skip}, {}, p + ".residual"));
    }
  }
  x = b.op("Flatten", {b.op("GlobalAveragePool", {x})}, {Attr::integer("axis", 1)});
  linear(b, x, "fc");
}

// --- gpt: nanoGPT's forward, attention written out (MatMul, causal mask, Softmax, MatMul) ---
void gpt_graph(Builder& b, const ModelConfig& c, std::string ids) {
  const std::int64_t C = c.n_embd, nh = c.n_head, hs = C / nh, bs = c.block_size;
  auto T = b.op("Shape", {ids}, {Attr::integer("start", 1), Attr::integer("end", 2)}, "sequence_length");  // [1]
  auto zero1 = b.ints("zeros_1", {0}), axes0 = b.ints("axes_0", {0});
  auto tok = b.op("Gather", {b.weight("transformer.wte.weight"), ids}, {Attr::integer("axis", 0)}, "token_embedding");
  auto pos = b.op("Slice", {b.weight("transformer.wpe.weight"), zero1, T, axes0}, {}, "position_embedding");
  // [B, T, C] + [min(T, block_size), C]: a longer sequence fails here, in a node that says why.
  auto x = b.op("Add", {tok, pos}, {}, fmt::format("sequence_length_must_be_at_most_block_size_{}", bs));
  // The causal mask: 0 on and below the diagonal, -inf above, cropped to [T, T].
  auto full = torch::full({bs, bs}, -std::numeric_limits<float>::infinity()).triu(1);
  auto mask = b.op("Slice",
                   {b.constant("causal_mask", full), b.ints("zeros_2", {0, 0}),
                    b.op("Concat", {T, T}, {Attr::integer("axis", 0)}, "sequence_length_2"), b.ints("axes_01", {0, 1})},
                   {}, "causal_mask_t");
  auto scale = b.constant("attention_scale", torch::tensor(1.0 / std::sqrt(static_cast<double>(hs))));
  auto heads = b.ints("shape_heads", {0, 0, nh, hs}), merged = b.ints("shape_merged", {0, 0, C});
  auto split = b.ints("split_qkv", {C, C, C});
  auto half = b.constant("half", torch::tensor(0.5)), one = b.constant("one", torch::tensor(1.0));
  auto sqrt2 = b.constant("sqrt2", torch::tensor(std::sqrt(2.0)));
  auto layer_norm = [&](const std::string& in, const std::string& p) {
    return b.op("LayerNormalization", {in, b.weight(p + ".weight"), b.weight_or_empty(p + ".bias")},
                {Attr::integer("axis", -1), Attr::real("epsilon", kNormEps)}, p);
  };
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("transformer.h.{}", i);
    // --- attention ---
    auto qkv = b.ops("Split", {linear_nd(b, layer_norm(x, p + ".ln_1"), p + ".attn.c_attn"), split}, 3,
                     {Attr::integer("axis", 2)}, p + ".attn.split");
    auto to_heads = [&](const std::string& t, std::vector<std::int64_t> perm, const char* n) {
      return b.op("Transpose", {b.op("Reshape", {t, heads}, {}, p + ".attn." + n + "_heads")},
                  {Attr::integers("perm", perm)}, p + ".attn." + n);
    };
    auto q = to_heads(qkv[0], {0, 2, 1, 3}, "q"), kt = to_heads(qkv[1], {0, 2, 3, 1}, "k_t"),
         v = to_heads(qkv[2], {0, 2, 1, 3}, "v");
    auto att = b.op("Mul", {b.op("MatMul", {q, kt}, {}, p + ".attn.scores"), scale}, {}, p + ".attn.scaled");
    att = b.op("Softmax", {b.op("Add", {att, mask}, {}, p + ".attn.masked")}, {Attr::integer("axis", -1)},
               p + ".attn.softmax");
    auto y = b.op("Transpose", {b.op("MatMul", {att, v}, {}, p + ".attn.values")},
                  {Attr::integers("perm", {0, 2, 1, 3})}, p + ".attn.merge_t");
    y = linear_nd(b, b.op("Reshape", {y, merged}, {}, p + ".attn.merge"), p + ".attn.c_proj");
    x = b.op("Add", {x, y}, {}, p + ".residual_1");
    // --- mlp: exact GELU, x·½·(1 + erf(x/√2)) ---
    auto h = linear_nd(b, layer_norm(x, p + ".ln_2"), p + ".mlp.c_fc");
    auto erf = b.op("Erf", {b.op("Div", {h, sqrt2}, {}, p + ".mlp.gelu_div")}, {}, p + ".mlp.gelu_erf");
    h = b.op("Mul", {b.op("Mul", {h, b.op("Add", {erf, one}, {}, p + ".mlp.gelu_add")}, {}, p + ".mlp.gelu_mul"), half},
             {}, p + ".mlp.gelu");
    x = b.op("Add", {x, linear_nd(b, h, p + ".mlp.c_proj")}, {}, p + ".residual_2");
  }
  x = layer_norm(x, "transformer.ln_f");
  auto wte_t =
      b.op("Transpose", {b.weight("transformer.wte.weight")}, {Attr::integers("perm", {1, 0})}, "lm_head.weight_t");
  b.op("MatMul", {x, wte_t}, {}, "lm_head");  // tied to wte
}

// --- attention written out: softmax(q·kᵀ·scale + mask)·v over [B, heads, T, d], merged to [B, T, heads·d] ---
std::string attention(Builder& b, const std::string& q, const std::string& k, const std::string& v,
                      const std::string& mask, std::int64_t head_dim, std::int64_t width, const std::string& p) {
  auto kt = b.op("Transpose", {k}, {Attr::integers("perm", {0, 1, 3, 2})}, p + ".k_t");
  auto scale = b.constant(p + ".scale", torch::tensor(1.0 / std::sqrt(static_cast<double>(head_dim))));
  auto att = b.op("Mul", {b.op("MatMul", {q, kt}, {}, p + ".scores"), scale}, {}, p + ".scaled");
  att = b.op("Softmax", {b.op("Add", {att, mask}, {}, p + ".masked")}, {Attr::integer("axis", -1)}, p + ".softmax");
  auto y = b.op("Transpose", {b.op("MatMul", {att, v}, {}, p + ".values")}, {Attr::integers("perm", {0, 2, 1, 3})},
                p + ".merge_t");
  return b.op("Reshape", {y, b.ints(p + ".merged_shape", {0, 0, width})}, {}, p + ".merge");
}
// [B, T, n·d] → [B, n, T, d]
std::string to_heads(Builder& b, const std::string& x, std::int64_t n, std::int64_t d, const std::string& p) {
  auto h = b.op("Reshape", {x, b.ints(p + ".heads_shape", {0, 0, n, d})}, {}, p + ".heads");
  return b.op("Transpose", {h}, {Attr::integers("perm", {0, 2, 1, 3})}, p + ".t");
}
// Exact GELU: x·½·(1 + erf(x/√2)).
std::string gelu(Builder& b, const std::string& x, const std::string& p) {
  auto erf = b.op("Erf", {b.op("Div", {x, b.constant(p + ".sqrt2", torch::tensor(std::sqrt(2.0)))}, {}, p + ".div")},
                  {}, p + ".erf");
  auto one = b.constant(p + ".one", torch::tensor(1.0)), half = b.constant(p + ".half", torch::tensor(0.5));
  return b.op("Mul", {b.op("Mul", {x, b.op("Add", {erf, one}, {}, p + ".add")}, {}, p + ".mul"), half}, {}, p);
}

// --- llama: RMSNorm, RoPE (rotate-half, cos/sin tables cropped to T), grouped-query attention, SwiGLU ---
void llama_graph(Builder& b, const ModelConfig& c, std::string ids) {
  const std::int64_t H = c.n_embd, nh = c.n_head, nkv = c.n_kv_head > 0 ? c.n_kv_head : c.n_head;
  const std::int64_t hd = c.head_dim > 0 ? c.head_dim : H / nh, P = c.block_size;
  auto T = b.op("Shape", {ids}, {Attr::integer("start", 1), Attr::integer("end", 2)}, "sequence_length");
  auto zero1 = b.ints("zeros_1", {0}), axes0 = b.ints("axes_0", {0});
  auto x = b.op("Gather", {b.weight("model.embed_tokens.weight"), ids}, {Attr::integer("axis", 0)}, "embed");
  const auto [cos_t, sin_t] = llama_rope_table(c, P);
  auto cos = b.op("Slice", {b.constant("rope_cos", cos_t), zero1, T, axes0}, {}, "rope_cos_t");
  auto sin = b.op("Slice", {b.constant("rope_sin", sin_t), zero1, T, axes0}, {}, "rope_sin_t");
  auto pos = torch::arange(P);
  auto allowed = pos.unsqueeze(0) <= pos.unsqueeze(1);
  if (c.sliding_window > 0) allowed = allowed.logical_and(pos.unsqueeze(1) - pos.unsqueeze(0) < c.sliding_window);
  auto full = torch::zeros({P, P}).masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  auto mask = b.op("Slice",
                   {b.constant("causal_mask", full), b.ints("zeros_2", {0, 0}),
                    b.op("Concat", {T, T}, {Attr::integer("axis", 0)}, "sequence_length_2"), b.ints("axes_01", {0, 1})},
                   {}, "causal_mask_t");
  auto eps = b.constant("norm_eps", torch::tensor(c.norm_eps));
  auto rms = [&](const std::string& in, const std::string& w, const std::string& p) {  // x / √(mean(x²) + eps) · w
    auto ms = b.op("ReduceMean", {b.op("Mul", {in, in}, {}, p + ".sq")},
                   {Attr::integers("axes", {-1}), Attr::integer("keepdims", 1)}, p + ".mean");
    auto den = b.op("Sqrt", {b.op("Add", {ms, eps}, {}, p + ".add_eps")}, {}, p + ".rms");
    return b.op("Mul", {b.op("Div", {in, den}, {}, p + ".normed"), b.weight(w)}, {}, p);
  };
  const auto half = b.ints("rope_halves", {hd / 2, hd / 2});
  auto rope = [&](const std::string& t, const std::string& p) {  // t·cos + rotate_half(t)·sin
    auto parts = b.ops("Split", {t, half}, 2, {Attr::integer("axis", -1)}, p + ".halves");
    auto rot = b.op("Concat", {b.op("Neg", {parts[1]}, {}, p + ".neg"), parts[0]}, {Attr::integer("axis", -1)},
                    p + ".rotated");
    return b.op("Add", {b.op("Mul", {t, cos}, {}, p + ".cos"), b.op("Mul", {rot, sin}, {}, p + ".sin")}, {}, p);
  };
  auto repeat = [&](const std::string& t, const std::string& p) {  // [B, nkv, T, d] → [B, nh, T, d]
    if (nkv == nh) return t;
    auto t5 = b.op("Unsqueeze", {t, b.ints(p + ".axis2", {2})}, {}, p + ".unsqueeze");
    auto e = b.op("Expand", {t5, b.ints(p + ".expand_shape", {1, 1, nh / nkv, 1, 1})}, {}, p + ".expand");
    return b.op("Reshape", {e, b.ints(p + ".merged_shape", {0, nh, -1, hd})}, {}, p);
  };
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("model.layers.{}", i), a = p + ".self_attn";
    auto h = rms(x, p + ".input_layernorm.weight", p + ".input_layernorm");
    auto heads = [&](const std::string& proj, std::int64_t n, const std::string& norm) {
      auto y = b.op("Reshape", {linear_nd(b, h, a + "." + proj), b.ints(a + "." + proj + ".heads", {0, 0, n, hd})}, {},
                    a + "." + proj + ".split");
      if (!norm.empty()) y = rms(y, a + "." + norm + ".weight", a + "." + norm);
      return b.op("Transpose", {y}, {Attr::integers("perm", {0, 2, 1, 3})}, a + "." + proj + ".t");
    };
    auto q = rope(heads("q_proj", nh, c.qk_norm ? "q_norm" : ""), a + ".q_rope");
    auto k = repeat(rope(heads("k_proj", nkv, c.qk_norm ? "k_norm" : ""), a + ".k_rope"), a + ".k_repeat");
    auto v = repeat(heads("v_proj", nkv, ""), a + ".v_repeat");
    auto y = linear_nd(b, attention(b, q, k, v, mask, hd, nh * hd, a), a + ".o_proj");
    x = b.op("Add", {x, y}, {}, p + ".residual_1");
    h = rms(x, p + ".post_attention_layernorm.weight", p + ".post_attention_layernorm");
    auto g = linear_nd(b, h, p + ".mlp.gate_proj");
    auto silu = b.op("Mul", {g, b.op("Sigmoid", {g}, {}, p + ".mlp.sigmoid")}, {}, p + ".mlp.silu");
    auto m = b.op("Mul", {silu, linear_nd(b, h, p + ".mlp.up_proj")}, {}, p + ".mlp.gated");
    x = b.op("Add", {x, linear_nd(b, m, p + ".mlp.down_proj")}, {}, p + ".residual_2");
  }
  x = rms(x, "model.norm.weight", "model.norm");
  const std::string head = b.has("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight";  // tied
  b.op("MatMul", {x, b.op("Transpose", {b.weight(head)}, {Attr::integers("perm", {1, 0})}, "lm_head.weight_t")}, {},
       "lm_head");
}

// --- bert: embeddings, post-LayerNorm encoder layers (padding masked out), the task's head ---
void bert_graph(Builder& b, const ModelConfig& c, std::string ids) {
  const std::int64_t H = c.n_embd, nh = c.n_head, hd = H / nh;
  const std::string base = c.task == "encoder" ? "" : "bert.";
  auto T = b.op("Shape", {ids}, {Attr::integer("start", 1), Attr::integer("end", 2)}, "sequence_length");
  auto e = base + "embeddings.";
  auto x = b.op("Gather", {b.weight(e + "word_embeddings.weight"), ids}, {Attr::integer("axis", 0)}, "word");
  auto pos =
      b.op("Slice", {b.weight(e + "position_embeddings.weight"), b.ints("zeros_1", {0}), T, b.ints("axes_0", {0})}, {},
           "position");
  auto type0 = b.op("Gather", {b.weight(e + "token_type_embeddings.weight"), b.ints("type_0", {0})},
                    {Attr::integer("axis", 0)}, "token_type");
  x = b.op("Add", {b.op("Add", {x, pos}, {}, "word_position"), type0}, {}, "embeddings_sum");
  auto layer_norm = [&](const std::string& in, const std::string& p) {
    return b.op("LayerNormalization", {in, b.weight(p + ".weight"), b.weight(p + ".bias")},
                {Attr::integer("axis", -1), Attr::real("epsilon", static_cast<float>(c.norm_eps))}, p);
  };
  x = layer_norm(x, e + "LayerNorm");
  // keys that are padding get -inf: [B, 1, 1, T]
  auto pad = b.op("Equal", {ids, b.ints("pad_id", {c.pad_token_id})}, {}, "is_padding");
  auto neg = b.constant("minus_inf", torch::tensor(-std::numeric_limits<float>::infinity()));
  auto zero = b.constant("zero", torch::tensor(0.0));
  auto mask = b.op("Unsqueeze", {b.op("Where", {pad, neg, zero}, {}, "padding_mask_2d"), b.ints("axes_12", {1, 2})}, {},
                   "padding_mask");
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = fmt::format("{}encoder.layer.{}", base, i), a = p + ".attention";
    auto q = to_heads(b, linear_nd(b, x, a + ".self.query"), nh, hd, a + ".q");
    auto k = to_heads(b, linear_nd(b, x, a + ".self.key"), nh, hd, a + ".k");
    auto v = to_heads(b, linear_nd(b, x, a + ".self.value"), nh, hd, a + ".v");
    auto y = linear_nd(b, attention(b, q, k, v, mask, hd, H, a + ".self"), a + ".output.dense");
    auto h = layer_norm(b.op("Add", {y, x}, {}, a + ".residual"), a + ".output.LayerNorm");
    auto f = gelu(b, linear_nd(b, h, p + ".intermediate.dense"), p + ".intermediate.gelu");
    x = layer_norm(b.op("Add", {linear_nd(b, f, p + ".output.dense"), h}, {}, p + ".residual"),
                   p + ".output.LayerNorm");
  }
  if (c.task == "encoder") {
    if (b.has("pooler.dense.weight"))
      b.weight("pooler.dense.weight"), b.weight("pooler.dense.bias");  // unused: BertModel's
    b.op("Identity", {x}, {}, "last_hidden_state");
  } else if (c.task == "mlm") {
    const std::string p = "cls.predictions";
    auto h =
        layer_norm(gelu(b, linear_nd(b, x, p + ".transform.dense"), p + ".transform.gelu"), p + ".transform.LayerNorm");
    auto wt =
        b.op("Transpose", {b.weight(e + "word_embeddings.weight")}, {Attr::integers("perm", {1, 0})}, "decoder_t");
    b.op("Add", {b.op("MatMul", {h, wt}, {}, "decoder"), b.weight(p + ".bias")}, {}, "mlm_logits");
  } else {
    auto cls = b.op("Gather", {x, b.ints("first", {0})}, {Attr::integer("axis", 1)}, "cls_token");
    auto squeezed = b.op("Squeeze", {cls, b.ints("axis_1", {1})}, {}, "cls_squeezed");
    auto pooled = b.op("Tanh", {linear_nd(b, squeezed, "bert.pooler.dense")}, {}, "pooled");
    linear_nd(b, pooled, "classifier");
  }
}

// --- the graph writers, one per registered model with onnx = true (models/registry.h) ---
struct GraphWriter {
  std::string_view name;
  void (*write)(Builder& b, const ModelConfig& c, std::string input);
  bool bf16;  // opset 17's Conv and MaxPool have no bfloat16: only the convolution-free models
};
constexpr GraphWriter kWriters[] = {
    {"mlp", mlp_graph, true},          {"cnn", cnn_graph, false},         {"resnet", resnet_graph, false},
    {"resnet18", resnet_graph, false}, {"resnet34", resnet_graph, false}, {"resnet50", resnet_graph, false},
    {"gpt", gpt_graph, true},          {"llama", llama_graph, true},      {"bert", bert_graph, true}};
static_assert(covers_exactly(kWriters, [](const ModelInfo& m) { return m.onnx; }),
              "every model with onnx = true in models/registry.h needs exactly one graph writer here, and only those");

// The writer for cfg.name at dtype `dt`; UsageError when there is none, or not at that dtype.
const GraphWriter& writer_for(const ModelConfig& cfg, const DTypeChoice& dt) {
  const GraphWriter* w = nullptr;
  for (const auto& e : kWriters)
    if (e.name == cfg.name) w = &e;
  if (!w)
    throw UsageError(fmt::format("model {} has no ONNX graph writer (ONNX export covers {})", cfg.name,
                                 fmt::join(model_names(/*onnx_only=*/true), ", ")),
                     "export the weights as .safetensors or .pt instead");
  if (dt.onnx_type == ox::ElemType::kBFloat16 && !w->bf16) {
    std::vector<std::string_view> bf16;
    for (const auto& e : kWriters)
      if (e.bf16) bf16.push_back(e.name);
    throw UsageError(
        fmt::format("--dtype bf16 cannot express model {}: opset 17's Conv and MaxPool have no bfloat16", cfg.name),
        fmt::format("use --dtype fp16 or fp32 (bf16 covers {})", fmt::join(bf16, " and ")));
  }
  return *w;
}

nlohmann::json config_json(const ModelConfig& c) {
  nlohmann::json j = {{"name", c.name}};
  if (c.name == "mlp") j["hidden"] = c.hidden;
  if (c.name == "cnn") j["channels"] = c.channels, j["fc"] = c.fc;
  if (c.name == "resnet") j["width"] = c.width, j["blocks"] = c.blocks;
  if (c.name == "gpt")
    j.update({{"n_layer", c.n_layer},
              {"n_head", c.n_head},
              {"n_embd", c.n_embd},
              {"block_size", c.block_size},
              {"bias", c.bias},
              {"vocab_size", c.vocab_size}});
  if (c.name == "llama" || c.name == "bert")
    j.update({{"n_layer", c.n_layer},
              {"n_head", c.n_head},
              {"n_embd", c.n_embd},
              {"block_size", c.block_size},
              {"hf_architecture", c.hf_architecture},
              {"task", c.name == "bert" ? c.task : "causal-lm"}});
  return j;
}

}  // namespace

io::onnx::Model onnx_model(Model& model, const ModelConfig& cfg, const InputShape& in, std::int64_t classes,
                           const OnnxOptions& o, std::vector<torch::Tensor>& keep_alive) {
  const DTypeChoice dt = parse_dtype(o.dtype);
  const GraphWriter& writer = writer_for(cfg, dt);  // UsageError before any work
  const bool tokens = find_model(cfg.name)->input == ModelInput::kTokens;
  torch::NoGradGuard no_grad;
  Builder b(model, cfg.name, dt, keep_alive);
  ox::Model m;
  m.doc = fmt::format("trainbox {} model, exported for inference (eval mode)", cfg.name);
  m.graph.name = "trainbox_" + cfg.name;
  ox::Dim batch{0, "batch"};
  if (tokens) {  // gpt, llama, bert
    const std::string embedding = cfg.name == "gpt"       ? "transformer.wte.weight"
                                  : cfg.name == "llama"   ? "model.embed_tokens.weight"
                                  : cfg.task == "encoder" ? "embeddings.word_embeddings.weight"
                                                          : "bert.embeddings.word_embeddings.weight";
    const auto vocab = b.size(embedding, 0);
    m.graph.inputs.push_back({"input_ids",
                              ox::ElemType::kInt64,
                              {batch, {0, "sequence"}},
                              fmt::format("token ids in [0, {}), sequence length 1 … {}", vocab, cfg.block_size)});
    writer.write(b, cfg, "input_ids");
    if (cfg.name == "bert" && cfg.task == "classification")
      m.graph.outputs.push_back(
          {"logits", dt.onnx_type, {batch, {b.size("classifier.weight", 0), {}}}, "class logits"});
    else if (cfg.name == "bert" && cfg.task == "encoder")
      m.graph.outputs.push_back(
          {"logits", dt.onnx_type, {batch, {0, "sequence"}, {cfg.n_embd, {}}}, "the last hidden state"});
    else
      m.graph.outputs.push_back(
          {"logits",
           dt.onnx_type,
           {batch, {0, "sequence"}, {vocab, {}}},
           cfg.name == "bert" ? "masked-LM logits per position" : "next-token logits per position"});
  } else {
    m.graph.inputs.push_back({"input",
                              dt.onnx_type,
                              {batch, {in.channels, {}}, {in.height, {}}, {in.width, {}}},
                              "images NCHW, (pixel / 255 - input_mean) / input_std per channel"});
    writer.write(b, cfg, "input");
    m.graph.outputs.push_back({"logits", dt.onnx_type, {batch, {classes, {}}}, "class logits"});
  }
  b.rename_last_output("logits");
  b.check_all_used();
  m.graph.nodes = std::move(b.g.nodes);
  m.graph.initializers = std::move(b.g.initializers);
  m.metadata = {{"trainbox_version", io::onnx::trainbox_version()},
                {"trainbox_model", cfg.name},
                {"model_config", config_json(cfg).dump()},
                {"dtype", o.dtype}};
  if (!tokens) m.metadata.push_back({"classes", std::to_string(classes)});
  for (const auto& kv : o.metadata) m.metadata.push_back(kv);
  return m;
}

std::string export_onnx(Model& model, const ModelConfig& cfg, const InputShape& in, std::int64_t classes,
                        const std::string& path, const OnnxOptions& o) {
  std::vector<torch::Tensor> keep;
  auto m = onnx_model(model, cfg, in, classes, o, keep);
  io::onnx::WriteOptions w;
  w.external = o.external;
  return io::onnx::write_model(path, m, w);
}

}  // namespace trainbox::models
