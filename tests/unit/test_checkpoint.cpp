#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "temp_dir.h"
#include <trainbox/train/checkpoint.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

using namespace trainbox;
namespace fs = std::filesystem;

namespace {
using test::TempDir;
void write(const std::string& p, const std::string& s) { std::ofstream(p) << s; }
}  // namespace

TEST(Checkpoint, SaveMovesLatestAndKeepsTheLastK) {
  TempDir d;
  train::CheckpointStore store(d.path, 2);
  EXPECT_FALSE(store.latest());
  for (int step : {10, 20, 30}) store.save(step, [&](const std::string& dir) { write(dir + "/w", std::to_string(step)); });
  ASSERT_TRUE(store.latest());
  EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_30");
  EXPECT_EQ(read_file(*store.latest() + "/w"), "30");
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_10"));  // pruned
  EXPECT_TRUE(fs::exists(d.path + "/checkpoints/step_20"));
}

TEST(Checkpoint, FailedWriteNeverBecomesLatest) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  store.save(1, [&](const std::string& dir) { write(dir + "/w", "good"); });
  EXPECT_THROW(store.save(2, [&](const std::string&) { throw SystemError("disk full"); }), SystemError);
  EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_1");
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_2"));
  for (const auto& e : fs::directory_iterator(d.path + "/checkpoints"))
    EXPECT_FALSE(starts_with(e.path().filename().string(), ".tmp-")) << "temporary dir left behind";
}

TEST(Checkpoint, LatestNamingAnIncompleteDirIsIgnored) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  store.save(5, [&](const std::string& dir) { write(dir + "/w", "x"); });
  fs::remove(d.path + "/checkpoints/step_5/" + std::string(train::kCheckpointComplete));
  EXPECT_FALSE(store.latest());
}

TEST(Checkpoint, CleanIncompleteRemovesLeftovers) {
  TempDir d;
  fs::create_directories(d.path + "/checkpoints/.tmp-step_7-123");
  train::CheckpointStore store(d.path, 3);
  store.clean_incomplete();
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/.tmp-step_7-123"));
}
