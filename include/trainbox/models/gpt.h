// trainbox/models/gpt.h — the built-in GPT (model.name = "gpt") and sampling from it.
//
// The nanoGPT / llm.c GPT-2 shape: token + position embeddings (wte, wpe) → dropout →
// n_layer pre-LayerNorm blocks (x + attn(ln_1(x)), x + mlp(ln_2(x))) → ln_f → lm_head.
//   attn  c_attn Linear C→3C, causal self-attention (models/attention.h: trainbox's kernel on
//         the CPU in fp32, at::scaled_dot_product_attention with is_causal otherwise — flash /
//         memory-efficient kernels on GPU; dropout only while training), c_proj C→C,
//         residual dropout.
//   mlp   c_fc C→4C, GELU, c_proj 4C→C, dropout. The GELU is the exact (erf) one, as
//         nanoGPT's nn.GELU(); GPT-2 and Hugging Face's GPT2 use the tanh approximation
//         ("gelu_new"), which differs by < 1e-3 per activation.
//   LayerNorm eps 1e-5 (PyTorch's and GPT-2's). bias = false drops every Linear and LayerNorm bias.
//   lm_head is tied to wte: one tensor, registered once, as transformer.wte.weight — so the
//         optimizer, DDP and gradient clipping see it once. PyTorch's state_dict carries it
//         under both names; tied_weights() says so, and models/weights.h writes and reads
//         both (see there).
// Initialisation as GPT-2 / nanoGPT: Linear and Embedding weights normal(0, 0.02), biases
// zero, the residual projections (attn.c_proj, mlp.c_proj) normal(0, 0.02/sqrt(2·n_layer)),
// LayerNorms ones/zeros; the draws are made in nanoGPT's order, so for one torch seed this
// model and bench/peers/models.py's GPT start from the same weights on CPU.
// Parameter names are nanoGPT's: transformer.wte.weight, transformer.wpe.weight,
// transformer.h.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias},
// transformer.ln_f.{weight,bias}, and (tied) lm_head.weight.
//
// Contract: forward(idx int64 [B, T]) → logits [B, T, vocab] for every position; T >
// block_size is a UsageError. generate() needs no grad and leaves the model's train/eval
// mode as it found it. Not thread-safe (one forward at a time per model object).
//
//   models::ModelConfig c; c.name = "gpt"; c.n_layer = 2; c.n_embd = 64; c.block_size = 64;
//   auto gpt = models::make_model(c, {}, /*dataset vocab=*/256);
//   auto logits = gpt->forward(torch::randint(256, {8, 64}));         // [8, 64, 256]
//   auto gen = at::detail::createCPUGenerator(/*seed=*/42);           // <ATen/CPUGeneratorImpl.h>
//   auto ids = models::generate(*gpt, torch::tensor({72, 105}), 100, 0.8, 40, gen);
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include <torch/types.h>

#include <trainbox/models/config.h>
#include <trainbox/models/models.h>

namespace trainbox::models {

// The vocabulary a GPT is built with: model.vocab_size when > 0 (it may be larger than the
// dataset's, e.g. padded to a multiple of 64 as nanoGPT pads 50257 → 50304), else the
// dataset's. make_model("gpt", …, classes) calls this with classes = the dataset's vocab, so
// every program that rebuilds a model from (config, dataset vocab) — the trainer, export,
// sample — gets the same one. Throws ConfigError when vocab_size is below the dataset's
// (its token ids would be out of range) or neither gives a size.
std::int64_t vocab_size_for(const ModelConfig& cfg, std::int64_t dataset_vocab);

// Builds the GPT of `cfg` (n_layer, n_head, n_embd, block_size, dropout, bias) with `vocab`
// tokens. Throws ConfigError for n_embd not divisible by n_head or a non-positive size.
std::shared_ptr<Model> make_gpt(const ModelConfig& cfg, std::int64_t vocab);

// Autoregressive sampling: appends `new_tokens` tokens to `prompt_ids` (int64 [T0], T0 ≥ 1)
// and returns the whole sequence [T0 + new_tokens] on the CPU. Each step feeds the last
// block_size tokens, divides the last position's logits by `temperature` (> 0), keeps the
// `top_k` largest (0: all), and draws from the softmax with torch::multinomial and `gen`
// (a CPU generator: the draw happens on the CPU whatever the model's device, so one seed
// gives one text). temperature 0 is greedy decoding: the most likely token (argmax, the
// first of equals), the limit of temperature → 0 and the same text as top_k 1; `gen` unused. Deterministic for a seed
// on one device. Throws UsageError for bad values. `gpt` must be a GPT (make_gpt); other models throw UsageError.
// `on_token`, when set, is called with each token id as it is drawn (`trainbox sample` prints
// it then, instead of after the last).
torch::Tensor generate(Model& gpt, torch::Tensor prompt_ids, std::int64_t new_tokens, double temperature,
                       std::int64_t top_k, torch::Generator gen,
                       const std::function<void(std::int64_t)>& on_token = {});

// The block_size of a GPT built by make_gpt (UsageError for other models).
std::int64_t block_size_of(const Model& gpt);

}  // namespace trainbox::models
