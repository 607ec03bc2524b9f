// trainbox sample: a gpt or llama checkpoint continues a prompt.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "validators.h"
#include <trainbox/train/run.h>
#include <trainbox/util/errors.h>

namespace trainbox::cli {

Runner add_sample(CLI::App& app) {
  auto ckpt = std::make_shared<std::string>();
  auto o = std::make_shared<train::SampleOptions>();
  app.add_option(
         "checkpoint", *ckpt,
         "Checkpoint of a gpt or llama run: <run_dir>/checkpoints/step_N, <run_dir>/checkpoints/latest, or the run dir")
      ->required();
  app.add_option(
      "--prompt", o->prompt,
      "Text to continue (byte-level models, and any model with a tokenizer; empty: a newline), or token ids separated "
      "by spaces (other vocabularies)");
  app.add_option("--tokenizer", o->tokenizer,
                 "A Hugging Face tokenizer (model folder or tokenizer.json) for a text prompt and a text continuation "
                 "(default: the model.init_from folder's, when it has one)");
  app.add_flag("--chat", o->chat,
               "llama: the prompt is a user turn, rendered with the tokenizer's chat template and its generation "
               "prompt; prints the reply alone, which ends at the end of the turn");
  app.add_option("--system", o->system, "With --chat: a system message before the user's");
  app.add_option("--template", o->chat_template, "With --chat: a Jinja chat template file instead of the tokenizer's");
  app.add_option("--tokens", o->tokens, "Tokens to generate")->check(whole_number(1))->capture_default_str();
  app.add_option("--temperature", o->temperature,
                 "Divides the logits: < 1 more conservative, > 1 more random; 0: greedy, always the most likely token "
                 "(the same text as --top-k 1)")
      ->check(nonnegative_number())
      ->capture_default_str();
  app.add_option("--top-k", o->top_k, "Sample among the K most likely tokens (0: all)")
      ->check(whole_number(0))
      ->capture_default_str();
  app.add_option("--top-p", o->top_p,
                 "llama: sample among the most likely tokens whose probabilities add up to P (1: all)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_flag("--no-kv-cache{false}", o->kv_cache,
               "llama: run the whole sequence for every token instead of the KV cache (slower; the cache's check)");
  app.add_option("--seed", o->seed, "Random seed: the same seed gives the same text")
      ->check(whole_number(0))
      ->capture_default_str();
  app.add_option("--device", o->device, "cpu, cuda, cuda:N or auto")->capture_default_str();
  return [ckpt, o] {
    // The prompt, then its continuation, as nanoGPT's sample.py prints them; bytes as they are
    // (sample_checkpoint's continuation of token ids starts with a space, ready to append).
    // Each token is printed as it is drawn: a long sample on a CPU shows its text at once, not
    // after the last token. The prompt waits for the checkpoint to load (a bad one prints nothing).
    if (!o->chat && (!o->system.empty() || !o->chat_template.empty()))
      throw UsageError("--system and --template apply with --chat", "add --chat, or drop them");
    bool started = o->chat;  // a chat prints the reply alone, not the template's text
    // stderr: stdout holds the text alone. "reading …" names the step; notes say a fallback.
    o->on_note = [](const std::string& n) { std::fprintf(stderr, "trainbox sample: %s\n", n.c_str()); };
    o->on_text = [&](const std::string& piece) {
      if (!started) std::fwrite(o->prompt.data(), 1, o->prompt.size(), stdout);
      started = true;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
    const std::string continuation = train::sample_checkpoint(*ckpt, *o);
    if (!started) std::fwrite(o->prompt.data(), 1, o->prompt.size(), stdout);  // no token drawn
    const std::string& tail = continuation.empty() && !o->chat ? o->prompt : continuation;
    if (tail.empty() || tail.back() != '\n') std::fputc('\n', stdout);
    return kExitOk;
  };
}

}  // namespace trainbox::cli
