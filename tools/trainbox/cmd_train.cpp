// trainbox train / trainbox export.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "train_args.h"
#include <trainbox/distributed/worker_env.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/metrics/progress.h>
#include <trainbox/train/allocation_counter.h>
#include <trainbox/train/checkpoint_path.h>
#include <trainbox/train/config.h>
#include <trainbox/train/config_rules.h>
#include <trainbox/train/memory_plan.h>
#include <trainbox/train/process_setup.h>
#include <trainbox/train/run.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/parse.h>
#include <trainbox/util/plural.h>
#include <trainbox/util/process.h>
#include <trainbox/util/result_file.h>
#include <trainbox/util/strings.h>

namespace trainbox::cli {

namespace {
std::string default_run_dir(const train::Config& c) {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return fmt::format("runs/{}-{}", c.model.name, buf);
}

// --- Ctrl-C: say what was saved (async-signal-safe: open/read/write only, strings built before) ---
char g_latest_path[4096], g_checkpoints_dir[4096];
void on_interrupt(int sig) {
  char buf[512];
  int n = -1;
  int fd = ::open(g_latest_path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = static_cast<int>(::read(fd, buf, sizeof buf - 1));
    ::close(fd);
  }
  auto say = [](const char* s) { (void)!::write(STDERR_FILENO, s, std::strlen(s)); };
  say("\ntrainbox train: interrupted; ");
  if (n > 0) {
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) --n;
    buf[n] = 0;
    say("the last checkpoint is ");
    say(g_checkpoints_dir);
    say(buf);
    say(" (--resume auto continues from it; steps after it are lost)\n");
  } else {
    say("nothing was saved: no checkpoint yet (checkpoint.every_steps = N saves one every N steps)\n");
  }
  ::signal(sig, SIG_DFL);  // then die of the signal, as before: exit 128 + sig for the caller
  ::raise(sig);
}

// SIGINT (Ctrl-C, also forwarded by a launcher) always; SIGTERM only for a plain run: under a
// launcher it is the teardown after another rank failed, whose summary says what happened.
void say_on_interrupt(const std::string& run_dir, bool under_launcher) {
  const std::string dir = run_dir + "/checkpoints/", latest = dir + "latest";
  if (latest.size() >= sizeof g_latest_path) return;
  std::memcpy(g_latest_path, latest.c_str(), latest.size() + 1);
  std::memcpy(g_checkpoints_dir, dir.c_str(), dir.size() + 1);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    if (sig == SIGTERM && under_launcher) continue;
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_DFL) sigaction(sig, &sa, nullptr);  // never override a choice made above us
  }
}

// --plan: the memory plan of this job per rank (rank 0 prints it, once per job). Exit 0 when
// it fits the --budget (or none is given), 1 when it does not (the line names the change).
// With --nproc-per-node N it plans for N ranks in this process: nothing is launched, so the
// exit code is the plan's own, not a launcher's failure report.
int run_plan(const TrainArgs& a, const train::Config& cfg) {
  const auto env = dist::WorkerEnv::from_environment();
  if (env.rank != 0) return kExitOk;
  const int world = a.world > 0 ? a.world : !a.nproc.empty() ? launch::resolve_nproc(a.nproc) : env.world_size;
  train::configure_process(train::process_setup_for(cfg));
  train::install_cpu_allocation_counter();  // exact CPU bytes: the activations are measured
  const train::PlanInputs in = train::plan_training(cfg, world);
  const bool fits = a.budget <= 0 || train::plan_figures(in).total() <= a.budget;
  if (a.json)
    write_result(train::plan_json(in, a.budget), env.rank);
  else
    std::cout << train::format_plan(in, a.budget);
  return fits ? kExitOk : kExitFailed;
}

// "communication per step (rank 0): 4.3 MiB sent (fp32 DDP: 3.2 MiB, 1.35x more; dist.zero_stage = 3,
// dist.grad_compression = none), 0.012 s blocked waiting": the bytes themselves first, then the
// baseline; a ratio under 1 (ZeRO's all-gathers) reads as more bytes, never as "0.74x fewer".
std::string communication_line(const train::TrainSummary& s) {
  const double sent = s.comm.rank_sent_bytes_per_step[0], fp32 = double(s.comm.fp32_bytes_per_step);
  const std::string versus = sent <= 0 || fp32 <= 0 ? std::string("nothing to compare")
                             : fp32 >= sent         ? fmt::format("{:.2f}x fewer", fp32 / sent)
                                                    : fmt::format("{:.2f}x more", sent / fp32);
  return fmt::format(
      "communication per step (rank 0): {} sent (fp32 DDP: {}, {}; dist.zero_stage = {}, dist.grad_compression = "
      "{}), {:.3f} s blocked waiting",
      human_bytes(static_cast<std::uint64_t>(sent)), human_bytes(static_cast<std::uint64_t>(fp32)), versus,
      s.zero_stage, s.comm.compression, s.comm.rank_wait_s_per_step[0]);
}

int run_train(TrainArgs a) {
  if (a.reference) {
    std::cout << train::config_reference_markdown();
    return kExitOk;
  }
  normalize_resume(a);
  const train::Config cfg = train::with_model_folder(resolve_config(a));  // llama: the folder's architecture
  const bool rank0 = dist::WorkerEnv::from_environment().rank == 0;
  if (rank0 && !a.quiet)
    for (const auto& w : train::ignored_keys(cfg)) std::fprintf(stderr, "trainbox train: warning: %s\n", w.c_str());
  if (a.print_config) {
    std::cout << train::to_toml(cfg);
    return kExitOk;
  }
  if (a.plan) return run_plan(a, cfg);
  train::TrainOptions o;
  o.config = cfg;
  o.resume = a.resume;
  o.quiet = a.quiet;
  o.run_dir = !a.run_dir.empty()  ? a.run_dir
              : !a.resume.empty() ? train::run_dir_of_checkpoint(a.resume)  // <run_dir>/checkpoints/step_N, resolved
                                  : default_run_dir(cfg);
  if (rank0 && !a.quiet)
    say_on_interrupt(o.run_dir, dist::WorkerEnv::from_environment().source != dist::WorkerSource::kSingle);
  train::configure_process(train::process_setup_for(cfg));  // malloc, cuBLAS, NCCL: before torch does any work
  train::install_cpu_allocation_counter();                  // exact CPU tensor bytes for the summary's memory figures
  train::TrainSummary s = train::run_training(o);
  if (a.json) {
    // Rank 0's summary, once: into the launcher's result file under `trainbox run` (which
    // prints it unprefixed on its stdout), on stdout otherwise; other ranks print nothing.
    write_result(train::summary_to_json(s), dist::WorkerEnv::from_environment().rank);
  } else if (rank0 && s.tokens_per_s > 0) {  // a language model
    // tokens/s, as the progress lines show it for a sequence model
    std::cout << fmt::format(
        "done: val loss {:.4f} nats/token (perplexity {:.2f}) after {} / {} on {}{}\n"
        "      {:.1f} s wall, {} tokens/s, peak memory {}, model state {} per rank\n"
        "      run dir {} (metrics.jsonl, TensorBoard: tensorboard --logdir {}), checkpoint {}\n",
        s.test_loss, s.test_perplexity, plural(s.epochs, "epoch"), plural(s.steps, "step"), s.device,
        s.unigram_loss > 0
            ? fmt::format("\n      a unigram model's loss is {:.4f} nats/token (the baseline to beat)", s.unigram_loss)
            : std::string(),
        s.wall_s, metrics::Progress::format_rate(s.tokens_per_s),
        human_bytes(static_cast<std::uint64_t>(s.peak_memory_bytes)),
        human_bytes(static_cast<std::uint64_t>(s.model_state_bytes)), s.run_dir, s.run_dir, s.checkpoint);
  } else if (rank0) {
    std::cout << fmt::format(
        "done: test accuracy {:.2f}% (loss {:.4f}) after {} / {} on {}\n"
        "      {:.1f} s wall, {} samples/s, peak memory {}, model state {} per rank\n"
        "      run dir {} (metrics.jsonl, TensorBoard: tensorboard --logdir {}), checkpoint {}\n",
        100 * s.test_accuracy, s.test_loss, plural(s.epochs, "epoch"), plural(s.steps, "step"), s.device, s.wall_s,
        metrics::Progress::format_rate(s.samples_per_s), human_bytes(static_cast<std::uint64_t>(s.peak_memory_bytes)),
        human_bytes(static_cast<std::uint64_t>(s.model_state_bytes)), s.run_dir, s.run_dir, s.checkpoint);
  }
  if (!a.json && rank0 && !s.comm.empty())  // the gradient exchange (docs/distributed.md, communication figures)
    std::cout << "      " << communication_line(s) << "\n";
  if (rank0 && s.skipped_samples > 0)  // data.on_bad_image = "skip": never silent
    std::cerr << fmt::format(
        "trainbox train: skipped {} image{} that would not decode (data.on_bad_image = "
        "\"skip\"), first: {}\n",
        s.skipped_samples, s.skipped_samples == 1 ? "" : "s", fmt::join(s.skipped_examples, "; "));
  return kExitOk;
}
}  // namespace

// `trainbox train --nproc-per-node 2 --master-port 31001`: a `trainbox run` option among train's
// arguments is a usage error whose fix is the whole command, the launcher's options before `--`.
// Called when train's own parse failed (a value that merely looks like an option parses).
void refuse_launcher_options(const std::vector<std::string>& rest, const std::optional<std::string>& nproc) {
  std::vector<std::string> run_args, train_args;
  std::string first;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    const launch::RunOption* opt = nullptr;
    bool inline_value = false;
    for (const auto& o : launch::run_options())
      for (const auto& n : split(o.names, ','))
        if (starts_with(n, "--") && (rest[i] == n || starts_with(rest[i], n + "="))) {
          opt = &o;
          inline_value = rest[i] != n;
        }
    if (!opt) {
      train_args.push_back(rest[i]);
      continue;
    }
    if (first.empty()) first = rest[i].substr(0, rest[i].find('='));
    run_args.push_back(rest[i]);
    if (!opt->toggle && !inline_value && i + 1 < rest.size()) run_args.push_back(rest[++i]);
  }
  if (first.empty()) return;
  throw UsageError(
      fmt::format("{} is an option of trainbox run, not of trainbox train", first),
      fmt::format("trainbox run {}{} -- trainbox train {}", nproc ? "--nproc-per-node " + *nproc + " " : std::string(),
                  fmt::join(run_args, " "), fmt::join(train_args, " ")));
}

int maybe_launch_self(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "train") return -1;
  std::vector<std::string> rest;
  std::optional<std::string> nproc;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--nproc-per-node" || a == "--nproc_per_node") {
      if (i + 1 >= argc) throw UsageError("--nproc-per-node needs a value", "e.g. --nproc-per-node 2");
      nproc = argv[++i];
    } else if (starts_with(a, "--nproc-per-node=")) {
      nproc = a.substr(17);
    } else {
      rest.push_back(a);
    }
  }
  // The count first, by the launcher's own rule (launch/run_config.h): a bad one is one line
  // from this process, before the config is read and before any worker starts.
  if (nproc) (void)launch::resolve_nproc(*nproc);
  {  // the config is checked here, once, not by every worker (a typo is one line, not N root causes)
    CLI::App check{"trainbox train"};
    TrainArgs ta;
    add_train_options(check, ta);
    std::vector<std::string> args(rest.rbegin(), rest.rend());  // CLI11 takes them reversed
    bool help = false;
    try {
      check.parse(args);
    } catch (const CLI::CallForHelp&) {
      help = true;  // the worker prints it
    } catch (const CLI::ParseError& e) {
      refuse_launcher_options(rest, nproc);  // `--master-port P`: name the command that takes it
      if (!nproc) return -1;                 // the usual parse says what else is wrong
      throw UsageError(e.what(), "see `trainbox train --help`");
    }
    if (!nproc || ta.plan) return -1;  // --plan plans for --nproc-per-node N ranks here (run_plan)
    if (!help && !ta.reference && !ta.print_config) {
      normalize_resume(ta);
      (void)resolve_config(ta);
    }
  }
  std::string launcher = find_sibling_program("trainbox");
  if (launcher.empty())
    throw UsageError(
        "--nproc-per-node needs the trainbox launcher next to trainbox-torch (" + self_exe_dir() + ")",
        "install both programs side by side, or run `trainbox run --nproc-per-node N -- trainbox-torch train …`");
  std::vector<std::string> args = {launcher, "run", "--standalone", "--nproc-per-node",
                                   *nproc,   "--",  launcher,       "train"};
  args.insert(args.end(), rest.begin(), rest.end());
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execv(launcher.c_str(), cargs.data());
  throw SystemError("cannot run " + launcher + ": " + errno_text(errno));
}

Runner add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  add_train_options(app, *a);
  return [a] { return run_train(*a); };
}

Runner add_export(CLI::App& app) {
  struct ExportArgs {
    std::string checkpoint, out;
    std::string shard = "5GB";
    train::ExportOptions o;
  };
  auto a = std::make_shared<ExportArgs>();
  app.add_option("checkpoint", a->checkpoint,
                 "Checkpoint: <run_dir>/checkpoints/step_N, <run_dir>/checkpoints/latest, or the run dir (its newest)")
      ->required();
  app.add_option("out", a->out, "Output file: .safetensors, .pt (torch.load) or .onnx (ONNX Runtime, TensorRT)")
      ->required();
  app.add_option("--format", a->o.format,
                 "safetensors, pt, onnx, or hf: a Hugging Face folder that from_pretrained(OUT) loads (llama, gpt) "
                 "(default: from OUT's extension)");
  app.add_option("--max-shard-size", a->shard, "hf: the largest safetensors shard (e.g. 5GB, 500MB)")
      ->capture_default_str();
  app.add_option("--dtype", a->o.dtype, "ONNX only: fp32 (default), fp16 or bf16");
  app.add_flag("--force", a->o.force, "Replace an existing OUT");
  app.add_flag("--external-data", a->o.external_data, "ONNX: weights in OUT.data (automatic beyond 2 GB)");
  app.add_flag("--adapter", a->o.adapter,
               "A LoRA run: OUT is a PEFT adapter folder (adapter_config.json, adapter_model.safetensors) that "
               "PeftModel.from_pretrained(base, OUT) loads");
  app.add_flag("--merge", a->o.merge, "A LoRA run: the adapters folded into the base (W + scale B A), in OUT's format");
  return [a] {
    a->o.max_shard_bytes = static_cast<std::uint64_t>(parse_size(Given{a->shard, "--max-shard-size", true}, 1));
    if (const std::string w = train::export_extension_warning(a->out, a->o.format); !w.empty())
      std::cerr << "trainbox export: warning: " << w << "\n";
    train::ExportResult r = train::export_checkpoint(a->checkpoint, a->out, a->o);
    for (const auto& n : r.notes) std::cerr << "trainbox export: note: " << n << "\n";  // a fallback above all
    std::cout << fmt::format(
        "wrote {} ({} {}, {} tensors{}) from {}\n", a->out, r.model, r.format, r.tensors,
        r.data_file.empty() ? "" : (r.format == "hf" || r.format == "peft" ? ", " : ", weights in ") + r.data_file,
        r.checkpoint);
    return kExitOk;
  };
}

}  // namespace trainbox::cli
