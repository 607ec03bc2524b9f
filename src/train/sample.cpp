// `trainbox sample`: a continuation of a prompt by a GPT checkpoint.
#include <trainbox/train/run.h>

#include <chrono>
#include <cmath>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/distributed/device.h>
#include <trainbox/models/gpt.h>
#include <trainbox/models/llama.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/strings.h>

#include "checkpoint_state.h"

namespace trainbox::train {
namespace {

// The byte-level text dataset's vocabulary: token id = byte value.
constexpr std::int64_t kByteVocab = 256;
// An empty prompt of a byte-level model starts from a newline, as nanoGPT's sample.py does.
constexpr std::int64_t kNewline = '\n';

std::vector<std::int64_t> parse_ids(const std::string& prompt, std::int64_t vocab) {
  std::vector<std::int64_t> ids;
  for (const auto& word : split(prompt, ' ')) {
    std::string w = trim(word);
    if (w.empty()) continue;
    const auto v = parse_integer(w);
    if (!v || *v < 0 || *v >= vocab)
      throw UsageError(fmt::format("--prompt: '{}' is not a token id of this model (0 to {})", w, vocab - 1),
                       "this model's vocabulary is not bytes: pass the prompt as token ids separated by spaces, e.g. "
                       "--prompt \"464 2068\"");
    ids.push_back(*v);
  }
  if (ids.empty())
    throw UsageError("--prompt is empty, and this model's tokens are not bytes",
                     "pass at least one token id, e.g. --prompt \"50256\" (GPT-2's <|endoftext|>)");
  return ids;
}

}  // namespace

std::string sample_checkpoint(const std::string& checkpoint, const SampleOptions& o) {
  // --- the values first: a bad one is reported before the checkpoint is read ---
  if (o.tokens < 1) throw UsageError(fmt::format("--tokens must be at least 1, got {}", o.tokens), "e.g. --tokens 200");
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw UsageError(fmt::format("--temperature must be >= 0, got {}", o.temperature),
                     "e.g. --temperature 0.8 (lower: more conservative, higher: more random; 0: greedy)");
  if (o.top_k < 0)
    throw UsageError(fmt::format("--top-k must be >= 0, got {}", o.top_k), "0 keeps the whole vocabulary");

  const torch::Device device = dist::choose_device(o.device).device;  // errors name --device
  CheckpointModel m = load_checkpoint_model(checkpoint, device);
  // Which step is read, always; a damaged newer one skipped is said first.
  if (o.on_note) {
    for (const auto& n : m.notes) o.on_note(n);
    o.on_note("reading " + m.dir);
  }
  const bool llama = m.config.model.name == "llama";
  if (m.config.model.name != "gpt" && !llama)
    throw UsageError(fmt::format("checkpoint {} holds model.name = \"{}\"; only a gpt or a llama generates text",
                                 checkpoint, m.config.model.name),
                     "pass a checkpoint of a run with model.name = \"gpt\" or \"llama\" (configs/text_gpt.toml, "
                     "configs/llama_finetune.toml)");
  if (!llama && (o.top_p != 1.0 || !o.kv_cache))
    throw UsageError("--top-p and --no-kv-cache apply to a llama checkpoint", "drop them for a gpt");

  // --- prompt → token ids ---
  const bool bytes = m.state.classes == kByteVocab;
  const std::int64_t vocab = llama && m.config.model.vocab_size > 0
                                 ? m.config.model.vocab_size
                                 : models::vocab_size_for(m.config.model, m.state.classes);
  std::vector<std::int64_t> ids;
  if (bytes) {
    for (unsigned char c : o.prompt) ids.push_back(c);
    if (ids.empty()) ids.push_back(kNewline);
  } else {
    ids = parse_ids(o.prompt, vocab);
  }

  // --- token ids → text, each as it is drawn: the continuation only, ready to append (ids: " 11 318") ---
  std::string text;
  auto gen = at::detail::createCPUGenerator(o.seed);
  std::int64_t drawn = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto on_token = [&](std::int64_t id) {
    ++drawn;
    // Raw bytes: an invalid UTF-8 sequence prints as the terminal shows it. Ids past 255
    // exist only in a vocabulary padded by model.vocab_size (never in the data): U+FFFD.
    const std::string piece = !bytes            ? ' ' + std::to_string(id)
                              : id < kByteVocab ? std::string(1, static_cast<char>(id))
                                                : std::string("\xEF\xBF\xBD");
    text += piece;
    if (o.on_text) o.on_text(piece);
  };
  const auto prompt = torch::tensor(ids, torch::kLong);
  if (llama) {
    models::GenerateOptions g;
    g.new_tokens = o.tokens;
    g.temperature = o.temperature;
    g.top_k = o.top_k;
    g.top_p = o.top_p;
    g.eos_ids = m.config.model.eos_token_ids;
    g.kv_cache = o.kv_cache;
    models::generate_llama(*m.model, prompt, g, gen, on_token);
  } else {
    models::generate(*m.model, prompt, o.tokens, o.temperature, o.top_k, gen, on_token);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.on_note)
    o.on_note(fmt::format("{} tokens in {:.2f} s: {:.1f} tokens/s{}", drawn, s, s > 0 ? drawn / s : 0.0,
                          llama ? (o.kv_cache ? ", KV cache" : ", no KV cache") : ""));
  return text;
}

}  // namespace trainbox::train
