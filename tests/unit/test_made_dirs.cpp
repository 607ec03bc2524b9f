// io::MadeDirs: trainbox removes only the folders it made in this process, by inode, never
// through a link or "..", never a folder holding anything it did not write.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <trainbox/io/made_dirs.h>
#include <trainbox/util/errors.h>

#include "temp_dir.h"

namespace fs = std::filesystem;
using trainbox::io::MadeDirs;

TEST(MadeDirs, RecordsOnlyTheFoldersItMadeAndRemovesThemDeepestFirst) {
  trainbox::test::TempDir t;
  t.write("runs/keep.txt", "the user's");
  MadeDirs made;
  made.create(t / "runs/exp2/deeper");
  ASSERT_EQ(made.made().size(), 2u);  // runs/ existed
  EXPECT_EQ(made.made()[0].path, trainbox::io::resolved_path(t / "runs/exp2"));
  std::ofstream(t / "runs/exp2/deeper/.lock") << "pid 1";
  const auto removed = made.remove({".lock"});
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_FALSE(fs::exists(t / "runs/exp2"));
  EXPECT_TRUE(fs::exists(t / "runs/keep.txt"));
}

TEST(MadeDirs, AFolderHoldingAnythingElseStaysAndSoDoItsParents) {
  trainbox::test::TempDir t;
  MadeDirs made;
  made.create(t / "a/b");
  std::ofstream(t / "a/b/config.toml") << "ours";
  std::ofstream(t / "a/b/notes.md") << "the user's, written meanwhile";
  made.remove({"config.toml"});
  EXPECT_FALSE(fs::exists(t / "a/b/config.toml"));  // ours: gone
  EXPECT_TRUE(fs::exists(t / "a/b/notes.md"));      // not ours: kept, and with it a/b and a
  EXPECT_TRUE(fs::is_directory(t / "a"));
}

TEST(MadeDirs, AFolderReplacedSinceOrALinkInItsPlaceIsNotTouched) {
  trainbox::test::TempDir t;
  t.write("sentinel/precious.txt", "keep me");
  MadeDirs made;
  made.create(t / "run");
  fs::remove(t / "run");
  fs::create_directory_symlink(t / "sentinel", t / "run");  // a link where the made folder was
  std::ofstream(t / "sentinel/config.toml") << "the user's file of our name";
  made.remove({"config.toml", "precious.txt"});
  EXPECT_TRUE(fs::exists(t / "sentinel/precious.txt"));
  EXPECT_TRUE(fs::exists(t / "sentinel/config.toml"));
  EXPECT_TRUE(fs::is_symlink(t / "run"));

  MadeDirs again;
  again.create(t / "other");
  EXPECT_TRUE(again.intact());
  fs::remove(t / "other");
  fs::create_directory(t / "other");  // another folder of the same name: another inode
  std::ofstream(t / "other/config.toml") << "x";
  EXPECT_FALSE(again.intact());
  again.remove({"config.toml"});
  EXPECT_TRUE(fs::exists(t / "other/config.toml"));
}

TEST(MadeDirs, DotDotAndLinksAreResolvedBeforeAnythingIsMade) {
  trainbox::test::TempDir t;
  t.write("outside/keep/data.txt", "reached through a link");
  fs::create_directory(t / "proj");
  fs::create_directory_symlink(t / "outside", t / "proj/link");
  // proj/link/x: the kernel makes outside/x; recorded as that folder, not proj/link/x
  MadeDirs made;
  made.create(t / "proj/link/x/");
  ASSERT_EQ(made.made().size(), 1u);
  EXPECT_EQ(made.made()[0].path, trainbox::io::resolved_path(t / "outside/x"));
  made.remove({});
  EXPECT_FALSE(fs::exists(t / "outside/x"));
  EXPECT_TRUE(fs::exists(t / "outside/keep/data.txt"));
  // "a/b/../.." of a missing a/: nothing above the temp dir is made or removed
  MadeDirs up;
  up.create(t / "proj/new/sub/../..");
  EXPECT_TRUE(up.made().empty());  // it is proj itself, which exists
  EXPECT_TRUE(up.remove({}).empty());
  EXPECT_TRUE(fs::exists(t / "proj/link"));
}

TEST(MadeDirs, AFileWhereAFolderIsExpectedIsAnErrorAndNothingIsMade) {
  trainbox::test::TempDir t;
  t.write("afile", "a file");
  MadeDirs made;
  EXPECT_THROW(made.create(t / "afile/sub"), trainbox::SystemError);
  EXPECT_TRUE(made.made().empty());
  EXPECT_TRUE(fs::is_regular_file(t / "afile"));
}
