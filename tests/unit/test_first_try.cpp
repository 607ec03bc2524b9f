// What a first try found (issue "What a first try finds"), torch-free parts: the one command
// list behind the container shorthand, the one suspicious-variable list behind the doctor and
// its docs, and the launcher's choice of Python for a script that imports torch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <trainbox/env/entrypoint.h>
#include <trainbox/env/suspicious_env.h>
#include <trainbox/launch/run_config.h>
#include <trainbox/train/config_rules.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/commands.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/strings.h>

#include "fixtures.h"
#include "temp_dir.h"

using namespace trainbox;

namespace {
using V = std::vector<std::string>;
const auto nothing_on_path = [](const std::string&) { return false; };

std::string fake_python(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  auto p = dir / "python3";
  std::ofstream(p) << "#!/bin/sh\nexit 0\n";
  std::filesystem::permissions(p, std::filesystem::perms::owner_all);
  return p.string();
}
}  // namespace

// --- the container shorthand comes from the command list the CLI dispatches on ---
TEST(FirstTry, EveryCommandButEntrypointIsAShorthand) {
  const std::string exe = "/opt/trainbox/bin/trainbox";
  // the two the first try found missing, by name, so that this test fails if the list loses them
  EXPECT_EQ(env::resolve_entrypoint_command({"sample", "--help"}, exe, nothing_on_path), (V{exe, "sample", "--help"}));
  EXPECT_EQ(env::resolve_entrypoint_command({"preflight"}, exe, nothing_on_path), (V{exe, "preflight"}));
  std::size_t n = 0;
  for (const auto& c : kCommands) {
    if (std::string(c.name) == "entrypoint") {
      EXPECT_FALSE(env::is_entrypoint_shorthand(c.name)) << "entrypoint -- entrypoint would loop";
      continue;
    }
    ++n;
    EXPECT_EQ(env::resolve_entrypoint_command({c.name}, exe, nothing_on_path), (V{exe, c.name})) << c.name;
  }
  EXPECT_GE(n, 9u);
  EXPECT_EQ(find_command("bash"), nullptr);
  EXPECT_EQ(env::resolve_entrypoint_command({"bash"}, exe, nothing_on_path), (V{"bash"}));
}

// --- docs/troubleshooting.md's table of suspicious variables is the probe's list ---
TEST(FirstTry, SuspiciousEnvTableIsTheProbesList) {
  auto doc = read_file(test::source_dir() + "/docs/troubleshooting.md");
  ASSERT_TRUE(doc.has_value());
  const auto start = doc->find("\n## suspicious-env\n");
  ASSERT_NE(start, std::string::npos);
  const auto end = doc->find("\n## ", start + 5);
  std::set<std::string> in_doc, in_code;
  for (const auto& line : split(doc->substr(start, end - start), '\n')) {
    if (!starts_with(line, "| `")) continue;
    std::string name = line.substr(3, line.find('`', 3) - 3);
    in_doc.insert(name.substr(0, name.find('=')));
  }
  for (const auto& v : env::kSuspiciousEnv) in_code.insert(v.name);
  EXPECT_EQ(in_doc, in_code);
  EXPECT_FALSE(in_code.count("NCCL_DEBUG")) << "decided: not flagged (see suspicious_env.h)";
}

// --- trainbox run -- x.py: which Python ---
TEST(FirstTry, ImportsTorchReadsImportLines) {
  EXPECT_TRUE(launch::imports_torch("import torch\n"));
  EXPECT_TRUE(launch::imports_torch("import os, sys\nimport torch.distributed as dist\n"));
  EXPECT_TRUE(launch::imports_torch("import os, torch\n"));
  EXPECT_TRUE(launch::imports_torch("  from torch.nn.parallel import DistributedDataParallel as DDP\n"));
  EXPECT_FALSE(launch::imports_torch("import torchvision\nimport os\n"));
  EXPECT_FALSE(launch::imports_torch("# import torch\nprint('import torch')\n"));
  EXPECT_FALSE(launch::imports_torch("from os import torch_like\n"));
}

TEST(FirstTry, ScriptThatImportsTorchRunsWithTheBuildsPython) {
  test::TempDir tmp;
  const std::filesystem::path dir = tmp.path;
  const std::string on_path = fake_python(dir / "pyenv"), build = fake_python(dir / "venv" / "bin");
  tmp.write("ddp.py", "import os\nimport torch\n");
  tmp.write("plain.py", "print('hello')\n");
  const auto env = map_env({{"PATH", (dir / "pyenv").string()}});
  std::vector<std::string> notes;
  launch::PythonChoice c{tmp.path + "/ddp.py", build, &notes};
  EXPECT_EQ(launch::resolve_python(env, "", c), build);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find(build), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find(on_path), std::string::npos) << "names the one it did not choose: " << notes[0];
  EXPECT_NE(notes[0].find("TRAINBOX_PYTHON"), std::string::npos) << notes[0];

  notes.clear();  // a script without torch: python3 from PATH, silently
  c.script = tmp.path + "/plain.py";
  EXPECT_EQ(launch::resolve_python(env, "", c), on_path);
  EXPECT_TRUE(notes.empty());

  notes.clear();  // TRAINBOX_PYTHON always wins
  c.script = tmp.path + "/ddp.py";
  EXPECT_EQ(launch::resolve_python(map_env({{"PATH", (dir / "pyenv").string()}, {"TRAINBOX_PYTHON", on_path}}), "", c),
            on_path);
  EXPECT_TRUE(notes.empty());

  notes.clear();  // the build's Python is gone (trainbox copied elsewhere): PATH's, and the fake cannot find torch
  c.build_python = (dir / "gone" / "python3").string();
  tmp.write("pyenv/python3", "#!/bin/sh\nexit 1\n");  // find_spec('torch') is None: exit 1
  EXPECT_EQ(launch::resolve_python(env, "", c), on_path);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("cannot import it"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("TRAINBOX_PYTHON"), std::string::npos) << notes[0];
}

// --- config: keys the chosen model ignores, resume compatibility, the docs that show output ---
TEST(FirstTry, KeysTheModelIgnoresAreNamed) {
  train::Config c;
  c.model.name = "cnn";
  EXPECT_TRUE(train::ignored_keys(c).empty()) << "defaults are never a warning";
  c.model.hidden = {64};
  auto w = train::ignored_keys(c);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0], "model.hidden = [64] has no effect: it is for model.name = \"mlp\", and this config says \"cnn\"");
  EXPECT_FALSE(train::key_applies(c, "model.hidden"));
  EXPECT_TRUE(train::key_applies(c, "model.channels"));
  EXPECT_TRUE(train::key_applies(c, "model.init_from")) << "a doc that starts with prose applies to every model";
  c.optim.name = "sgd";
  c.optim.betas = {0.8, 0.9};  // adam/adamw only
  w = train::ignored_keys(c);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[1].find("it is for optim.name = \"adam\" or \"adamw\""), std::string::npos) << w[1];
  c.optim.name = "adamw";
  EXPECT_EQ(train::ignored_keys(c).size(), 1u);
}

TEST(FirstTry, ResumeMismatchIsNamedAtTheConfigLevel) {
  train::Config trained, now;
  trained.model.name = "cnn";
  try {
    train::check_resume_config(trained, now, "the run dir runs/poison");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the run dir runs/poison was trained with model.name = \"cnn\"; this config says \"mlp\"");
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_FALSE(e.hint().empty());
  }
  now.model.name = "cnn";
  now.model.hidden = {7};  // not a cnn key: no mismatch
  now.train.epochs = 99;   // nor a train key
  EXPECT_NO_THROW(train::check_resume_config(trained, now, "x"));
  now.model.channels = {8, 8};
  EXPECT_THROW(train::check_resume_config(trained, now, "x"), ConfigError);
  now.model.channels = trained.model.channels;
  now.optim.name = "sgd";
  EXPECT_THROW(train::check_resume_config(trained, now, "x"), ConfigError);
}

TEST(FirstTry, ValuesInErrorsAreWrittenAsTheUserWroteThem) {
  train::Config c;
  try {
    train::apply_override(c, "optim.betas=[0.9]");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("optim.betas = [0.9] is not allowed: a list of 2 numbers each"),
              std::string::npos)
        << e.what();
  }
}

TEST(FirstTry, ConfigDocIntroNamesEverySectionAndTheTableIsTheReference) {
  auto doc = read_file(test::source_dir() + "/docs/config.md");
  ASSERT_TRUE(doc.has_value());
  const std::string intro = doc->substr(0, doc->find("| key |"));
  for (const auto& f : train::config_fields()) {
    const std::string section = "`[" + f.key.substr(0, f.key.find('.')) + "]`";
    EXPECT_NE(intro.find(section), std::string::npos) << section << " missing from config.md's first paragraph";
  }
  // the table is exactly what --config-reference prints
  EXPECT_NE(doc->find(train::config_reference_markdown()), std::string::npos)
      << "regenerate the table with `trainbox train --config-reference`";
}
