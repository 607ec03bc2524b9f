// trainbox run --dashboard's pure half: addresses and tokens, redaction, the Prometheus text
// and the state JSON (dashboard/dashboard.h).
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <trainbox/dashboard/dashboard.h>
#include <trainbox/util/errors.h>

using namespace trainbox::dashboard;

TEST(Dashboard, LoopbackDefaultAndAddresses) {
  auto c = resolve_dashboard("8265", "", "");
  EXPECT_EQ(c.addr, "127.0.0.1");
  EXPECT_EQ(c.port, 8265);
  EXPECT_EQ(resolve_dashboard("127.0.0.2:0", "", "").port, 0);
  EXPECT_EQ(resolve_dashboard("[::1]:80", "", "").addr, "::1");
  EXPECT_EQ(resolve_dashboard("[::ffff:127.0.0.1]:80", "", "").token, "");  // util/net.h's loopback rule
  EXPECT_THROW(resolve_dashboard("host:notaport", "", ""), trainbox::UsageError);
  EXPECT_THROW(resolve_dashboard("70000", "", ""), trainbox::UsageError);
}

TEST(Dashboard, NonLoopbackNeedsAToken) {
  EXPECT_THROW(resolve_dashboard("0.0.0.0:8265", "", ""), trainbox::UsageError);
  EXPECT_EQ(resolve_dashboard("0.0.0.0:8265", "abc", "").token, "abc");
  EXPECT_EQ(resolve_dashboard("0.0.0.0:8265", "", "fromenv").token, "fromenv");
  EXPECT_EQ(resolve_dashboard("0.0.0.0:8265", "cli", "fromenv").token, "cli");  // the option wins
}

// The message and its fix name the options of the command that was typed (issue 34 item 10).
static std::string refusal(const std::string& spec, DashboardServer who) {
  try {
    resolve_dashboard(spec, "", "", who);
  } catch (const trainbox::UsageError& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

TEST(Dashboard, RefusalsNameTheCommandsOptions) {
  const std::string run = refusal("0.0.0.0:8265", DashboardServer::kRun);
  EXPECT_NE(run.find("--dashboard 0.0.0.0:8265"), std::string::npos) << run;
  EXPECT_NE(run.find("--dashboard-token TOKEN"), std::string::npos) << run;
  const std::string dash = refusal("0.0.0.0:8265", DashboardServer::kDash);
  EXPECT_NE(dash.find("trainbox dash --addr 0.0.0.0"), std::string::npos) << dash;
  EXPECT_NE(dash.find("--token TOKEN"), std::string::npos) << dash;
  EXPECT_EQ(dash.find("--dashboard"), std::string::npos) << dash;  // run's options, not dash's
  const std::string port = refusal("127.0.0.1:x", DashboardServer::kDash);
  EXPECT_NE(port.find("trainbox dash --port x"), std::string::npos) << port;
  EXPECT_EQ(port.find("--dashboard"), std::string::npos) << port;
  EXPECT_NE(refusal("127.0.0.1:x", DashboardServer::kRun).find("--dashboard 127.0.0.1:x"), std::string::npos);
}

TEST(Dashboard, TokenCheck) {
  EXPECT_TRUE(token_matches("", ""));
  EXPECT_TRUE(token_matches("", "anything"));
  EXPECT_TRUE(token_matches("s3cret", "s3cret"));
  EXPECT_FALSE(token_matches("s3cret", ""));
  EXPECT_FALSE(token_matches("s3cret", "s3cre"));
  EXPECT_FALSE(token_matches("s3cret", "s3cret2"));
  EXPECT_FALSE(token_matches("s3cret", "S3cret"));
}

TEST(Dashboard, RedactsSecrets) {
  EXPECT_EQ(redact_command({"python3", "train.py", "--api-key", "xyz", "--lr", "0.1", "WANDB_API_KEY=abc"}),
            "python3 train.py --api-key <redacted> --lr 0.1 WANDB_API_KEY=<redacted>");
  EXPECT_EQ(redact_command({"x", "--hf-token=abc"}), "x --hf-token=<redacted>");
  EXPECT_EQ(redact_line("step 3 password: hunter2 loss=0.5"), "step 3 password: <redacted> loss=0.5");
  EXPECT_EQ(redact_line("loss=0.5 step=3"), "loss=0.5 step=3");
}

TEST(Dashboard, RunDirFromTheCommand) {
  EXPECT_EQ(run_dir_of({"trainbox", "train", "--run-dir", "runs/a"}, ""), "runs/a");
  EXPECT_EQ(run_dir_of({"trainbox", "train", "--run-dir=runs/b"}, ""), "runs/b");
  EXPECT_EQ(run_dir_of({"trainbox", "train", "--resume", "runs/c"}, ""), "runs/c");
  EXPECT_EQ(run_dir_of({"trainbox", "train", "--resume", "auto"}, ""), "");
  EXPECT_EQ(run_dir_of({"trainbox", "train", "--run-dir", "runs/a"}, "given"), "given");
}

TEST(Dashboard, PrometheusLabelEscaping) {
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  DashboardState s;
  s.job.run_id = "run \"1\"";
  s.job.host = "h\\1";
  DashRank r;
  r.rank = 3;
  r.local_rank = 1;
  r.node_rank = 1;
  r.host = "node\n1";
  r.step = 42;
  r.stalled = true;
  s.ranks.push_back(r);
  s.job.attempt = 2;
  const std::string text = render_prometheus(s);
  EXPECT_NE(text.find("trainbox_step{rank=\"3\",local_rank=\"1\",node=\"1\",host=\"node\\n1\"} 42\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("trainbox_stalled{rank=\"3\",local_rank=\"1\",node=\"1\",host=\"node\\n1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("trainbox_restarts{rank=\"3\",local_rank=\"1\",node=\"1\",host=\"node\\n1\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("trainbox_heartbeat_age_seconds{rank=\"3\",local_rank=\"1\",node=\"1\",host=\"node\\n1\"} NaN"),
            std::string::npos);
  EXPECT_NE(text.find("run_id=\"run \\\"1\\\"\",host=\"h\\\\1\""), std::string::npos);
  EXPECT_NE(text.find("# TYPE trainbox_samples_per_second gauge\n"), std::string::npos);
  EXPECT_EQ(text.find("DCGM_"), std::string::npos);  // no GPU, no GPU family
  s.gpus.push_back({"h", "NVIDIA H200", "GPU-1", 0, 87, 30, 55, 3LL << 30, 4LL << 30, 312.5});
  const std::string g = render_prometheus(s);
  EXPECT_NE(g.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",uuid=\"GPU-1\",device=\"nvidia0\",model_name=\"NVIDIA "
                   "H200\",hostname=\"h\"} 87\n"),
            std::string::npos)
      << g;
  EXPECT_NE(g.find("DCGM_FI_DEV_FB_USED{gpu=\"0\""), std::string::npos);
  EXPECT_NE(g.find("} 3072\n"), std::string::npos);  // MiB used
  EXPECT_NE(g.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""), std::string::npos);
}

// A mixture of experts' routing (metrics.jsonl's "moe", docs/moe.md): per layer, and per layer and expert,
// only once a train line carried it.
TEST(Dashboard, PrometheusExpertsLoad) {
  DashboardState s;
  EXPECT_EQ(render_prometheus(s).find("trainbox_moe_"), std::string::npos);
  s.moe_tokens = {{96, 32, 0, 0}, {40, 40, 24, 24}};
  s.moe_imbalance = {3.0, 1.25};
  const std::string text = render_prometheus(s);
  EXPECT_NE(text.find("# TYPE trainbox_moe_load_imbalance gauge\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trainbox_moe_load_imbalance{layer=\"0\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trainbox_moe_load_imbalance{layer=\"1\"} 1.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trainbox_moe_expert_tokens{layer=\"0\",expert=\"2\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trainbox_moe_expert_tokens{layer=\"1\",expert=\"3\"} 24\n"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(render_state_json(s));
  EXPECT_EQ(j["moe"]["tokens"][0][0], 96);
  EXPECT_EQ(j["moe"]["imbalance"][1], 1.25);
}

// The communication figures (train/types.h CommFigures): one series per rank, only once a
// train line carried them; the compression method as a label.
TEST(Dashboard, PrometheusCommunicationFigures) {
  DashboardState s;
  DashRank r;
  r.rank = 1;
  r.host = "n2";
  s.ranks.push_back(r);
  EXPECT_EQ(render_prometheus(s).find("trainbox_comm_"), std::string::npos);  // none logged yet
  s.ranks[0].comm_sent_bytes_per_step = 503808;
  s.ranks[0].comm_wait_s_per_step = 0.25;
  s.ranks[0].compression_ratio = 11.5;
  s.job.compression = "powersgd";
  const std::string text = render_prometheus(s);
  const std::string labels = "{rank=\"1\",local_rank=\"0\",node=\"0\",host=\"n2\",compression=\"powersgd\"}";
  EXPECT_NE(text.find("trainbox_comm_sent_bytes_per_step" + labels + " 503808\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trainbox_comm_wait_seconds_per_step" + labels + " 0.25\n"), std::string::npos) << text;
  EXPECT_NE(text.find("trainbox_compression_ratio" + labels + " 11.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE trainbox_compression_ratio gauge\n"), std::string::npos);
}

TEST(Dashboard, StateJson) {
  DashboardState s;
  s.job.status = "running";
  s.job.world_size = 2;
  DashRank a;
  a.rank = 0;
  a.step = 5;
  a.heartbeat_age_s = 0.5;
  a.steps_per_s = 2;
  DashRank b;
  b.rank = 1;
  b.host = "bad \xff utf8";
  s.ranks = {a, b};
  s.gpu_note = "NVML sees none";
  s.curves.push_back({"train/loss", {{1, 2.5}, {2, 2.0}}});
  const auto j = nlohmann::json::parse(render_state_json(s));
  EXPECT_EQ(j["job"]["status"], "running");
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][0]["step"], 5);
  EXPECT_EQ(j["ranks"][0]["steps_per_s"], 2.0);
  EXPECT_TRUE(j["ranks"][0]["samples_per_s"].is_null());  // unknown → null, not -1
  EXPECT_TRUE(j["ranks"][1]["heartbeat_age_s"].is_null());
  EXPECT_TRUE(j["gpus"].empty());
  EXPECT_EQ(j["gpu_note"], "NVML sees none");
  EXPECT_EQ(j["curves"]["train/loss"][1][1], 2.0);
  EXPECT_TRUE(j["job"]["exit_code"].is_null());
  EXPECT_TRUE(j["job"]["samples_per_s"].is_null());
  EXPECT_TRUE(j["job"]["log_rank"].is_null());
  s.job.run_dir = "/r/run";
  s.job.metrics_path = "/r/run/metrics.jsonl";
  s.job.samples_per_s = 12.5;
  s.job.log_rank = 1;
  const auto k = nlohmann::json::parse(render_state_json(s));
  EXPECT_EQ(k["job"]["run_dir"], "/r/run");
  EXPECT_EQ(k["job"]["metrics_path"], "/r/run/metrics.jsonl");
  EXPECT_EQ(k["job"]["samples_per_s"], 12.5);
  EXPECT_EQ(k["job"]["log_rank"], 1);
}

// --- trainbox dash ---
TEST(DashRuns, FlattenConfigToml) {
  const auto c = flatten_config_toml(
      "[model]\nname = \"mlp\"\nhidden = [64, 32]\n[optim]\nlr = 0.1\nnesterov = false\nbetas = [0.9, 1.0]\n"
      "[a.b]\nc = 3\n");
  EXPECT_EQ(c.at("model.name"), "\"mlp\"");
  EXPECT_EQ(c.at("model.hidden"), "[64, 32]");
  EXPECT_EQ(c.at("optim.lr"), "0.1");  // as written, not 0.10000000000000001
  EXPECT_EQ(c.at("optim.betas"), "[0.9, 1.0]");
  EXPECT_EQ(c.at("optim.nesterov"), "false");
  EXPECT_EQ(c.at("a.b.c"), "3");
  EXPECT_TRUE(flatten_config_toml("not = [toml").empty());  // a config being written: no keys
}

TEST(DashRuns, ConfigDiffNamesOnlyWhatDiffers) {
  DashRun a, b, c;
  a.config = {{"optim.lr", "0.1"}, {"train.epochs", "2"}, {"only.a", "1"}};
  b.config = {{"optim.lr", "0.01"}, {"train.epochs", "2"}};
  const auto d = config_diff({a, b, c});  // c has no config.toml yet: compared with nothing
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, "only.a");
  EXPECT_EQ(d[0].values[0], "1");
  EXPECT_FALSE(d[0].values[1].has_value());
  EXPECT_EQ(d[1].key, "optim.lr");
  EXPECT_EQ(d[1].values[1], "0.01");
  EXPECT_TRUE(config_diff({a, a}).empty());
}

TEST(DashRuns, RunsJson) {
  RunsState s;
  DashRun r;
  r.name = "lr-0.1";
  r.status = "finished";
  r.curves.push_back({"train/loss", {{1, 2.5}, {2, std::nan("")}}});
  r.config = {{"optim.lr", "0.1"}};
  s.runs = {r, r};
  s.config_diff.push_back({"optim.lr", {"0.1", std::nullopt}});
  const auto j = nlohmann::json::parse(render_runs_json(s));
  EXPECT_EQ(j["mode"], "runs");
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["curves"]["train/loss"][0][1], 2.5);
  EXPECT_TRUE(j["runs"][0]["curves"]["train/loss"][1][1].is_null());  // NaN -> null: valid JSON
  EXPECT_EQ(j["config_diff"][0]["values"][0], "0.1");
  EXPECT_TRUE(j["config_diff"][0]["values"][1].is_null());
}

TEST(DashRuns, RunDirsFoundAndNamed) {
  namespace fs = std::filesystem;
  const fs::path t = fs::temp_directory_path() / ("dash_runs_" + std::to_string(::getpid()));
  fs::create_directories(t / "runs" / "a");
  fs::create_directories(t / "runs" / "b");
  fs::create_directories(t / "other" / "a");
  fs::create_directories(t / "empty");
  for (const char* d : {"runs/a", "runs/b", "other/a"}) std::ofstream(t / d / "metrics.jsonl") << "{}\n";
  const auto dirs = expand_run_dirs({(t / "runs").string(), (t / "other" / "a").string(), (t / "runs/a").string()});
  ASSERT_EQ(dirs.size(), 3u);  // runs/a once
  EXPECT_EQ(run_names(dirs)[2], "other/a");
  EXPECT_EQ(run_names({(t / "runs" / "b").string()})[0], "b");
  EXPECT_THROW(expand_run_dirs({(t / "empty").string()}), trainbox::UsageError);
  EXPECT_THROW(expand_run_dirs({(t / "missing").string()}), trainbox::UsageError);
  fs::remove_all(t);
}
