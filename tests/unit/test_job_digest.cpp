// The job digest of a c10d job (launch/job_digest.h): what the nodes' worker commands must
// share (refused, named) and what each may set its own way (noted, named), for `trainbox
// train` workers through the CLI's own config resolution (tools/trainbox/train_args.h) and
// for other commands.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <trainbox/launch/job_digest.h>

#include "temp_dir.h"
#include "train_args.h"

namespace trainbox::launch {
namespace {

using Command = std::vector<std::string>;

std::string train_digest(const Command& c) { return job_digest(c, cli::train_worker_keys); }

struct Compared {
  JobDigestComparison c;
  bool refused(const std::string& what) const { return c.refused && c.refused->what == what; }
};
Compared compare(const Command& theirs, const Command& ours) {
  return {compare_job_digests(train_digest(theirs), train_digest(ours))};
}

TEST(JobDigest, TheSameCommandAgreesWhereverTheProgramLives) {
  const Command a = {"/opt/a/bin/trainbox", "train", "--set", "optim.lr=0.01"};
  const Command b = {"/usr/local/bin/trainbox-torch", "train", "--set", "optim.lr=0.01"};
  const auto c = compare(a, b);
  EXPECT_FALSE(c.c.refused);
  EXPECT_TRUE(c.c.noted.empty());
}

// Issue 34 item 1: per-node run dirs (runs/job-$HOSTNAME) run, and the difference is named.
TEST(JobDigest, PerNodeRunDirsAreNotedNotRefused) {
  test::TempDir dir;
  dir.write("job.toml", "[optim]\nlr = 0.01\n");
  const auto c = compare({"trainbox", "train", dir / "job.toml", "--run-dir", "runs/job-node1"},
                         {"trainbox", "train", dir / "job.toml", "--run-dir", "runs/job-node0"});
  ASSERT_FALSE(c.c.refused) << c.c.refused->what;
  ASSERT_EQ(c.c.noted.size(), 1u);
  EXPECT_EQ(c.c.noted[0].what, "--run-dir");
  EXPECT_EQ(c.c.noted[0].theirs, "--run-dir runs/job-node1");
  EXPECT_EQ(c.c.noted[0].ours, "--run-dir runs/job-node0");
  EXPECT_NE(c.c.noted[0].fix.find("only rank 0's holds the checkpoints"), std::string::npos);  // for restarts
  // --run-dir=… and a per-node key set on the command line ($SLURM_NODEID in a path)
  const auto d = compare({"trainbox", "train", "--run-dir=runs/1", "--set", "data.path=/scratch/1/fmnist"},
                         {"trainbox", "train", "--run-dir=runs/0", "--set", "data.path=/scratch/0/fmnist"});
  ASSERT_FALSE(d.c.refused) << d.c.refused->what;
  ASSERT_EQ(d.c.noted.size(), 2u);
  EXPECT_EQ(d.c.noted[0].what, "--run-dir");
  EXPECT_EQ(d.c.noted[1].what, "data.path");
  EXPECT_EQ(d.c.noted[1].theirs, "data.path = \"/scratch/1/fmnist\"");
}

TEST(JobDigest, AKeyThatChangesTheMathIsRefusedByName) {
  const auto c = compare({"trainbox", "train", "--set", "optim.lr=0.01"}, {"trainbox", "train"});
  ASSERT_TRUE(c.refused("optim.lr"));
  EXPECT_EQ(c.c.refused->theirs, "optim.lr = 0.01");
  EXPECT_EQ(c.c.refused->ours, "optim.lr = 0.001");
  EXPECT_NE(c.c.refused->fix.find("paths and per-machine keys may differ"), std::string::npos);
  // The same key through config files at different paths (per-node copies): their keys decide.
  test::TempDir dir;
  dir.write("n0.toml", "[model]\nname = \"cnn\"\n[data]\npath = \"/scratch/0\"\n");
  dir.write("n1.toml", "[model]\nname = \"cnn\"\n[data]\npath = \"/scratch/1\"\n");
  dir.write("n2.toml", "[model]\nname = \"mlp\"\n");
  const auto same = compare({"trainbox", "train", dir / "n1.toml"}, {"trainbox", "train", dir / "n0.toml"});
  EXPECT_FALSE(same.c.refused);
  ASSERT_EQ(same.c.noted.size(), 2u);  // the file's path, then data.path
  EXPECT_EQ(same.c.noted[1].what, "data.path");
  EXPECT_TRUE(
      compare({"trainbox", "train", dir / "n2.toml"}, {"trainbox", "train", dir / "n0.toml"}).refused("model.name"));
  // A key that changes the ranks' collectives, not the math: shared too.
  EXPECT_TRUE(
      compare({"trainbox", "train", "--set", "train.log_every=5"}, {"trainbox", "train"}).refused("train.log_every"));
  // Per-machine resources may differ.
  EXPECT_FALSE(compare({"trainbox", "train", "--set", "train.threads=8"}, {"trainbox", "train"}).c.refused);
}

// Issue 36: gradient compression changes every rank's collectives: nodes must agree (the
// workers' DDP compares the ranks again, for launchers without a digest).
TEST(JobDigest, GradientCompressionSettingsAreShared) {
  EXPECT_TRUE(compare({"trainbox", "train", "--set", "dist.grad_compression=bf16"}, {"trainbox", "train"})
                  .refused("dist.grad_compression"));
  const auto c =
      compare({"trainbox", "train", "--set", "dist.grad_compression=powersgd", "--set", "dist.powersgd.rank=4"},
              {"trainbox", "train", "--set", "dist.grad_compression=powersgd", "--set", "dist.powersgd.rank=2"});
  ASSERT_TRUE(c.refused("dist.powersgd.rank"));
  EXPECT_EQ(c.c.refused->theirs, "dist.powersgd.rank = 4");
}

// A config that does not resolve on one node: not a digest refusal (the worker names the bad key).
TEST(JobDigest, AConfigThatDoesNotResolveIsLeftToTheWorker) {
  const auto c = compare({"trainbox", "train", "--set", "optim.lr=-1"}, {"trainbox", "train"});
  EXPECT_FALSE(c.c.refused);
  EXPECT_EQ(c.c.noted.size(), 1u);
}

TEST(JobDigest, OtherCommandsRefuseAnotherProgramOrScriptAndNoteTheRest) {
  test::TempDir dir;
  dir.write("train.py", "print('v1')\n");
  dir.write("copy/train.py", "print('v1')\n");
  dir.write("conf.yaml", "lr: 0.1\n");
  const auto py = [&](const std::string& script, const std::string& log) {
    return job_digest({"/usr/bin/python3", "-u", script, "--config", dir / "conf.yaml", "--log", log});
  };
  // the script by its contents, not its path; the log name is noted
  const auto same = compare_job_digests(py(dir / "copy/train.py", "n1.log"), py(dir / "train.py", "n0.log"));
  ASSERT_FALSE(same.refused) << same.refused->what;
  ASSERT_EQ(same.noted.size(), 1u);
  EXPECT_EQ(same.noted[0].what, "the worker command's arguments");
  EXPECT_EQ(same.noted[0].theirs, dir / "copy/train.py --config " + dir / "conf.yaml" + " --log n1.log");
  const std::string before = py(dir / "train.py", "n0.log");
  dir.write("conf.yaml", "lr: 0.2\n");  // a file trainbox cannot read the keys of: noted
  const auto file = compare_job_digests(py(dir / "train.py", "n0.log"), before);
  ASSERT_FALSE(file.refused);
  ASSERT_EQ(file.noted.size(), 1u);
  EXPECT_EQ(file.noted[0].what, "the contents of " + dir / "conf.yaml");
  dir.write("train.py", "print('v2')\n");  // another version of the code: refused
  const auto code = compare_job_digests(py(dir / "train.py", "n0.log"), before);
  ASSERT_TRUE(code.refused);
  EXPECT_EQ(code.refused->what, "the worker script");
  const auto prog = compare_job_digests(job_digest({"bash", "x.sh"}), before);
  ASSERT_TRUE(prog.refused);
  EXPECT_EQ(prog.refused->what, "the worker program");
  EXPECT_EQ(prog.refused->theirs, "bash");
  EXPECT_EQ(prog.refused->ours, "python");
}

// Arguments are bytes: one that is not UTF-8 (found by fuzz_run_config) digests, agrees with
// itself on another node, and another argument still differs.
TEST(JobDigest, ArgumentsThatAreNotUtf8StillDigestAndCompare) {
  const std::string bad = "runs/\xF9\xFF-node";
  const auto ours = job_digest({"/usr/bin/bash", "x.sh", "--out", bad});
  EXPECT_FALSE(compare_job_digests(job_digest({"/opt/bin/bash", "x.sh", "--out", bad}), ours).refused);
  const auto other = compare_job_digests(job_digest({"bash", "y.sh", "--out", bad}), ours);
  EXPECT_TRUE(other.refused || !other.noted.empty());
}

}  // namespace
}  // namespace trainbox::launch
