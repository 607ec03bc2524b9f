// `trainbox sample`: a continuation of a prompt by a GPT checkpoint.
#include <trainbox/train/run.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <trainbox/distributed/device.h>
#include <trainbox/models/gpt.h>
#include <trainbox/models/llama.h>
#include <trainbox/models/lora.h>
#include <trainbox/text/chat.h>
#include <trainbox/text/tokenizer.h>
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

// The tokenizer for a text prompt when --tokenizer names none: the model.init_from folder's tokenizer.json.
std::optional<text::Tokenizer> tokenizer_for(const models::ModelConfig& model) {
  std::error_code ec;
  if (model.init_from.empty() ||
      !std::filesystem::is_regular_file(std::filesystem::path(model.init_from) / "tokenizer.json", ec))
    return std::nullopt;
  return text::Tokenizer::load(model.init_from);
}

// The prompt's ids through the tokenizer (its template's bos included), each within the model's vocabulary.
std::vector<std::int64_t> encode_prompt(const text::Tokenizer& tok, const std::string& prompt, std::int64_t vocab) {
  std::vector<std::int64_t> ids;
  for (const int32_t id : tok.encode(prompt, true)) {
    if (id >= vocab)
      throw UsageError(fmt::format("--prompt: the tokenizer {} gives token id {}, beyond the model's vocabulary ({} "
                                   "ids)",
                                   tok.source(), id, vocab),
                       "pass the tokenizer of this model's checkpoint with --tokenizer");
    ids.push_back(id);
  }
  if (ids.empty())
    throw UsageError("--prompt is empty, and the tokenizer adds no token to it (no bos)",
                     "pass some text, e.g. --prompt \"Once upon a time\"");
  return ids;
}

// --chat: the prompt as a user turn (after the system message, when there is one), rendered with
// the chat template and its generation prompt; adds the tokenizer's eos to `stops` (a chat
// model ends its turn with it: <|im_end|>, <|eot_id|>).
std::vector<std::int64_t> chat_prompt(const text::Tokenizer& tok, const SampleOptions& o,
                                      const std::string& template_source, std::int64_t vocab,
                                      std::vector<std::int64_t>& stops) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  messages.push_back({{"role", "user"}, {"content", o.prompt}});
  const text::Formatter chat(tok, template_source, o.chat_template);
  std::vector<std::int64_t> ids;
  for (const int32_t id : chat.chat({{"messages", messages}}, /*add_generation_prompt=*/true).ids) {
    if (id >= vocab)
      throw UsageError(
          fmt::format("--chat: the template's text gives token id {}, beyond the model's vocabulary ({} ids)", id,
                      vocab),
          "pass the tokenizer of this model's checkpoint with --tokenizer");
    ids.push_back(id);
  }
  if (auto eos = tok.token_to_id(tok.eos_token()); eos && std::find(stops.begin(), stops.end(), *eos) == stops.end())
    stops.push_back(*eos);
  if (o.on_note) o.on_note(fmt::format("chat template of {}: the prompt is {} tokens", tok.source(), ids.size()));
  return ids;
}

// The text of each new token: the decode of prompt + continuation less what was printed (a
// decoder may join tokens, strip a first space or wait for a character's last byte).
class TextStream {
 public:
  TextStream(const text::Tokenizer& tok, const std::vector<std::int64_t>& prompt) : tok_(tok) {
    ids_.assign(prompt.begin(), prompt.end());
    printed_ = tok_.decode(ids_, true).size();
  }
  std::string next(std::int64_t id) {
    ids_.push_back(static_cast<int32_t>(id));
    const std::string full = tok_.decode(ids_, true);
    // an incomplete UTF-8 character decodes as U+FFFD until its last byte comes
    if (full.size() >= 3 && full.compare(full.size() - 3, 3, "\xEF\xBF\xBD") == 0) return {};
    if (full.size() <= printed_) return {};
    std::string piece = full.substr(printed_);
    printed_ = full.size();
    return piece;
  }

 private:
  const text::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  std::size_t printed_ = 0;
};

}  // namespace

std::string sample_checkpoint(const std::string& checkpoint, const SampleOptions& o) {
  // --- the values first: a bad one is reported before the checkpoint is read ---
  if (o.tokens < 1) throw UsageError(fmt::format("--tokens must be at least 1, got {}", o.tokens), "e.g. --tokens 200");
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw UsageError(fmt::format("--temperature must be >= 0, got {}", o.temperature),
                     "e.g. --temperature 0.8 (lower: more conservative, higher: more random; 0: greedy)");
  if (o.top_k < 0)
    throw UsageError(fmt::format("--top-k must be >= 0, got {}", o.top_k), "0 keeps the whole vocabulary");

  std::optional<text::Tokenizer> tok;  // --tokenizer's, read before the checkpoint: a bad one costs no load
  if (!o.tokenizer.empty()) tok = text::Tokenizer::load(o.tokenizer);
  std::string template_source;  // --template's, likewise
  if (!o.chat_template.empty()) {
    const auto file = read_file(o.chat_template);
    if (!file || file->empty())
      throw UsageError("--template: cannot read " + o.chat_template + " (or it is empty)",
                       "give a Jinja chat template file, or leave --template out for the tokenizer's own");
    template_source = *file;
  }
  const torch::Device device = dist::choose_device(o.device).device;  // errors name --device
  CheckpointModel m = load_checkpoint_model(checkpoint, device);
  // A LoRA run: base and adapters merged once (W + scale·B·A), so each token costs the base's matmuls alone.
  if (const int merged = models::merge_lora(*m.model); merged > 0)
    m.notes.push_back(fmt::format("LoRA: {} adapters merged into the base for sampling", merged));
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
  if (!llama && (o.top_p != 1.0 || !o.kv_cache || o.chat))
    throw UsageError("--top-p, --no-kv-cache and --chat apply to a llama checkpoint", "drop them for a gpt");

  // --- prompt → token ids ---
  const bool bytes = m.state.classes == kByteVocab;
  const std::int64_t vocab = llama && m.config.model.vocab_size > 0
                                 ? m.config.model.vocab_size
                                 : models::vocab_size_for(m.config.model, m.state.classes);
  if (!tok) tok = tokenizer_for(m.config.model);
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> stops = m.config.model.eos_token_ids;
  if (o.chat) {
    if (!tok)
      throw UsageError(
          fmt::format("--chat needs the model's tokenizer and chat template, and checkpoint {} names none", checkpoint),
          "pass --tokenizer MODEL_FOLDER (a Hugging Face folder with tokenizer.json and "
          "tokenizer_config.json)");
    ids = chat_prompt(*tok, o, template_source, vocab, stops);
  } else if (tok) {
    ids = encode_prompt(*tok, o.prompt, vocab);
    if (o.on_note) o.on_note(fmt::format("tokenizer {}: the prompt is {} tokens", tok->source(), ids.size()));
  } else if (bytes) {
    for (unsigned char c : o.prompt) ids.push_back(c);
    if (ids.empty()) ids.push_back(kNewline);
  } else {
    ids = parse_ids(o.prompt, vocab);
  }
  std::optional<TextStream> stream;
  if (tok) stream.emplace(*tok, ids);

  // --- token ids → text, each as it is drawn: the continuation only, ready to append (ids: " 11 318") ---
  std::string text;
  auto gen = at::detail::createCPUGenerator(o.seed);
  std::int64_t drawn = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto on_token = [&](std::int64_t id) {
    ++drawn;
    // Raw bytes: an invalid UTF-8 sequence prints as the terminal shows it. Ids past 255
    // exist only in a vocabulary padded by model.vocab_size (never in the data): U+FFFD.
    const std::string piece = stream            ? stream->next(id)
                              : !bytes          ? ' ' + std::to_string(id)
                              : id < kByteVocab ? std::string(1, static_cast<char>(id))
                                                : std::string("\xEF\xBF\xBD");
    text += piece;
    if (o.on_text && !piece.empty()) o.on_text(piece);
  };
  const auto prompt = torch::tensor(ids, torch::kLong);
  if (llama) {
    models::GenerateOptions g;
    g.new_tokens = o.tokens;
    g.temperature = o.temperature;
    g.top_k = o.top_k;
    g.top_p = o.top_p;
    g.eos_ids = stops;
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
