#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include <trainbox/io/atomic_file.h>
#include <trainbox/io/durable_file.h>
#include <trainbox/io/sha256.h>
#include <trainbox/train/checkpoint.h>
#include <trainbox/train/run_dir_lock.h>
#include <trainbox/util/errors.h>
#include <trainbox/util/strings.h>

using namespace trainbox;
namespace fs = std::filesystem;

namespace {
using test::TempDir;
void write(const std::string& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// The five files the trainer writes, with fake contents (this level checks bytes, not torch).
const std::vector<std::string> kFiles = {"model.pt", "optimizer.pt", "rng.pt", "state.json", "config.toml"};
std::string save_fake(train::CheckpointStore& store, std::int64_t step) {
  return store.save(step, [&](const std::string& dir) {
    for (const auto& f : kFiles) write(dir + "/" + f, f + " of step " + std::to_string(step) + std::string(300, 'x'));
  });
}
void flip_byte(const std::string& path, std::size_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x01));
}
std::string all_messages(const std::vector<train::CheckpointProblem>& ps) {
  std::string s;
  for (const auto& p : ps) s += p.message() + "\n";
  return s;
}
}  // namespace

TEST(Checkpoint, SaveMovesLatestAndKeepsTheLastK) {
  TempDir d;
  train::CheckpointStore store(d.path, 2);
  EXPECT_FALSE(store.latest());
  EXPECT_FALSE(store.has_checkpoints());
  for (int step : {10, 20, 30})
    store.save(step, [&](const std::string& dir) { write(dir + "/w", std::to_string(step)); });
  ASSERT_TRUE(store.latest());
  EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_30");
  EXPECT_EQ(read_file(*store.latest() + "/w"), "30");
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_10"));  // pruned
  EXPECT_TRUE(fs::exists(d.path + "/checkpoints/step_20"));
  EXPECT_TRUE(store.has_checkpoints());
}

TEST(Checkpoint, FailedWriteNeverBecomesLatest) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  store.save(1, [&](const std::string& dir) { write(dir + "/w", "good"); });
  try {
    store.save(2, [&](const std::string&) { throw SystemError("disk full"); });
    FAIL() << "no throw";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint save failed: disk full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("`latest` still names step_1"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), kExitFailed);
  }
  EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_1");
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_2"));
  for (const auto& e : fs::directory_iterator(d.path + "/checkpoints"))
    EXPECT_FALSE(starts_with(e.path().filename().string(), ".tmp-")) << "temporary dir left behind";
}

// torch's archive writer reports a full disk as "file write failed", with errno still ENOSPC:
// the message must say what happened in words a user acts on.
TEST(Checkpoint, AFullDiskInTheCallersWritesSaysSo) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  save_fake(store, 10);
  try {
    store.save(20, [&](const std::string& dir) {
      write(dir + "/model.pt", "partial");
      errno = ENOSPC;
      throw std::runtime_error(
          "PytorchStreamWriter failed writing file data/0: file write failed\nException raised from …");
    });
    FAIL() << "no throw";
  } catch (const SystemError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(starts_with(what, "checkpoint save failed: No space left on device (step_20 in ")) << what;
    EXPECT_NE(what.find("file write failed; `latest` still names step_10)"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line";
    EXPECT_NE(e.hint().find("free space"), std::string::npos);
  }
  EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_10");
  EXPECT_EQ(fs::directory_iterator(d.path + "/checkpoints") == fs::directory_iterator(), false);
  for (const auto& e : fs::directory_iterator(d.path + "/checkpoints"))
    EXPECT_TRUE(e.path().filename() == "step_10" || e.path().filename() == "latest") << e.path();
}

TEST(Checkpoint, ACallersOwnTypedErrorPassesThroughUnchanged) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  EXPECT_THROW(store.save(2, [&](const std::string&) { throw DataError("bad shape"); }), DataError);
  EXPECT_FALSE(store.has_checkpoints());
}

TEST(Checkpoint, ManifestListsEverySizeAndSha256AndCompleteRecordsTheManifest) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  const std::string dir = store.save(7, [&](const std::string& dir) {
    write(dir + "/abc.bin", "abc");
    fs::create_directories(dir + "/sub");
    write(dir + "/sub/empty", "");
  });
  auto m = nlohmann::json::parse(*read_file(dir + "/" + train::kCheckpointManifest));
  EXPECT_EQ(m["format"], "trainbox-checkpoint");
  EXPECT_EQ(m["version"], 1);
  EXPECT_EQ(m["step"], 7);
  ASSERT_EQ(m["files"].size(), 2u);
  EXPECT_EQ(m["files"][0]["path"], "abc.bin");
  EXPECT_EQ(m["files"][0]["bytes"], 3);
  // FIPS 180-2's test vector for "abc", and the empty string's.
  EXPECT_EQ(m["files"][0]["sha256"], "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(m["files"][1]["path"], "sub/empty");
  EXPECT_EQ(m["files"][1]["sha256"], "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  auto marker = split(*read_file(dir + "/" + train::kCheckpointComplete), '\n');
  ASSERT_EQ(marker.size(), 2u);
  EXPECT_EQ(marker[0], "7");
  EXPECT_TRUE(starts_with(marker[1], "MANIFEST.json sha256 ")) << marker[1];
  EXPECT_TRUE(train::CheckpointStore::verify(dir).empty()) << all_messages(train::CheckpointStore::verify(dir));
  EXPECT_TRUE(train::CheckpointStore::check_resumable(dir).empty());
}

TEST(Checkpoint, AFlippedByteInEachFileIsNamed) {
  for (const auto& f : kFiles) {
    TempDir d;
    train::CheckpointStore store(d.path, 3);
    const std::string dir = save_fake(store, 20);
    flip_byte(dir + "/" + f, 10);
    auto problems = train::CheckpointStore::verify(dir);
    ASSERT_EQ(problems.size(), 1u) << f << ": " << all_messages(problems);
    EXPECT_EQ(problems[0].file, f);
    EXPECT_NE(problems[0].detail.find("contents changed: sha256 "), std::string::npos) << problems[0].detail;
    EXPECT_NE(problems[0].detail.find("the manifest says "), std::string::npos) << problems[0].detail;
    try {
      train::CheckpointStore::check_resumable(dir);
      FAIL() << "no throw for " << f;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(f + ": contents changed"), std::string::npos) << e.what();
      EXPECT_EQ(e.exit_code(), kExitUsage);
    }
  }
}

TEST(Checkpoint, ATruncatedOrMissingFileIsNamed) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  const std::string dir = save_fake(store, 20);
  fs::resize_file(dir + "/optimizer.pt", 100);
  fs::remove(dir + "/rng.pt");
  auto problems = train::CheckpointStore::verify(dir);
  ASSERT_EQ(problems.size(), 2u) << all_messages(problems);
  EXPECT_EQ(problems[0].message(), "optimizer.pt: 100 bytes, the manifest says 323 (truncated)");
  EXPECT_EQ(problems[1].message(), "rng.pt: missing");
}

TEST(Checkpoint, ADamagedManifestOrMarkerIsNamedAsSuch) {
  {
    TempDir d;
    train::CheckpointStore store(d.path, 3);
    const std::string dir = save_fake(store, 20);
    flip_byte(dir + "/" + train::kCheckpointManifest, 40);
    auto problems = train::CheckpointStore::verify(dir);
    ASSERT_EQ(problems.size(), 1u) << all_messages(problems);
    EXPECT_EQ(problems[0].file, train::kCheckpointManifest);
    EXPECT_NE(problems[0].detail.find("COMPLETE records"), std::string::npos);
    fs::remove(dir + "/" + train::kCheckpointManifest);
    EXPECT_EQ(all_messages(train::CheckpointStore::verify(dir)),
              "MANIFEST.json: missing (COMPLETE records its checksum)\n");
  }
  {
    TempDir d;
    train::CheckpointStore store(d.path, 3);
    const std::string dir = save_fake(store, 20);
    write(dir + "/" + train::kCheckpointComplete, "21\n");  // another step's marker
    EXPECT_EQ(all_messages(train::CheckpointStore::verify(dir)), "COMPLETE: says step 21, the directory is step_20\n");
    write(dir + "/" + train::kCheckpointComplete, "20\nMANIFEST.json sha256 zz\n");
    EXPECT_EQ(train::CheckpointStore::verify(dir).at(0).file, train::kCheckpointComplete);
  }
}

TEST(Checkpoint, UntrustedManifestEntriesAreRejectedNotFollowed) {
  TempDir d;
  const std::string dir = d.path + "/ckpt";
  fs::create_directories(dir);
  write(dir + "/" + train::kCheckpointComplete, "5\n");  // a pre-checksum marker: the manifest is not itself checked
  const std::string sha(64, 'a');
  for (const std::string& files :
       std::vector<std::string>{R"([{"path": "../../etc/passwd", "bytes": 1, "sha256": ")" + sha + R"("}])",
                                R"([{"path": "/etc/passwd", "bytes": 1, "sha256": ")" + sha + R"("}])",
                                R"([{"path": "a", "bytes": -1, "sha256": ")" + sha + R"("}])",
                                std::string(R"([{"path": "a", "bytes": 1, "sha256": "xyz"}])"),
                                R"([{"path": "a", "bytes": 1, "sha256": ")" + sha +
                                    R"("}, {"path": "a", "bytes": 1, "sha256": ")" + sha + R"("}])",
                                std::string(R"("not a list")")}) {
    write(dir + "/" + train::kCheckpointManifest,
          R"({"format": "trainbox-checkpoint", "version": 1, "algorithm": "sha256", "files": )" + files + "}");
    auto problems = train::CheckpointStore::verify(dir);
    ASSERT_EQ(problems.size(), 1u) << files;
    EXPECT_EQ(problems[0].file, train::kCheckpointManifest) << files;
    EXPECT_TRUE(starts_with(problems[0].detail, "damaged: ")) << problems[0].detail;
  }
  write(dir + "/" + train::kCheckpointManifest,
        R"({"format": "trainbox-checkpoint", "version": 2, "algorithm": "sha256", "files": []})");
  EXPECT_EQ(all_messages(train::CheckpointStore::verify(dir)),
            "MANIFEST.json: damaged: version 2 (this trainbox reads version 1)\n");
}

TEST(Checkpoint, ExtraFilesAreIgnored) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  const std::string dir = save_fake(store, 20);
  write(dir + "/notes.txt", "a file someone added: nothing reads it");
  EXPECT_TRUE(train::CheckpointStore::verify(dir).empty());
}

TEST(Checkpoint, LatestFallsBackPastADamagedCheckpointAndSaysSo) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  save_fake(store, 20);
  save_fake(store, 40);
  const std::string newest = save_fake(store, 60);
  flip_byte(newest + "/model.pt", 0);
  std::vector<std::string> notes;
  auto dir = store.latest(&notes);
  ASSERT_TRUE(dir);
  EXPECT_EQ(*dir, d.path + "/checkpoints/step_40");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_TRUE(starts_with(notes[0], "checkpoint step_60 is damaged: model.pt: contents changed")) << notes[0];
  EXPECT_EQ(notes[1], "falling back to " + d.path + "/checkpoints/step_40, the newest checkpoint that verifies");
  // two damaged: the oldest is used, each skipped one named
  fs::resize_file(d.path + "/checkpoints/step_40/state.json", 3);
  notes.clear();
  EXPECT_EQ(*store.latest(&notes), d.path + "/checkpoints/step_20");
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_TRUE(starts_with(notes[1], "checkpoint step_40 is damaged: state.json: 3 bytes")) << notes[1];
}

TEST(Checkpoint, LatestPointerMissingOrGarbageFallsBackToTheNewestStep) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  save_fake(store, 20);
  save_fake(store, 40);
  write(d.path + "/checkpoints/latest", "step_4\x01\n");
  std::vector<std::string> notes;
  EXPECT_EQ(*store.latest(&notes), d.path + "/checkpoints/step_40");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], "checkpoint `latest` names \"step_4?\", which is not a checkpoint");
  write(d.path + "/checkpoints/latest", "step_80\n");
  notes.clear();
  EXPECT_EQ(*store.latest(&notes), d.path + "/checkpoints/step_40");
  EXPECT_EQ(notes.at(0), "checkpoint step_80 is missing (`latest` names it)");
}

TEST(Checkpoint, NoUsableCheckpointIsADataErrorNamingTheFiles) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  const std::string a = save_fake(store, 20), b = save_fake(store, 40);
  flip_byte(a + "/rng.pt", 5);
  fs::resize_file(b + "/config.toml", 0);
  EXPECT_TRUE(store.has_checkpoints());
  try {
    store.latest();
    FAIL() << "no throw";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_TRUE(starts_with(what, "no usable checkpoint in " + d.path + "/checkpoints: ")) << what;
    EXPECT_NE(what.find("step_40 is damaged: config.toml: 0 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("step_20 is damaged: rng.pt: contents changed"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line";
  }
}

TEST(Checkpoint, LatestNamingAnIncompleteDirIsNeverLoaded) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  store.save(5, [&](const std::string& dir) { write(dir + "/w", "x"); });
  fs::remove(d.path + "/checkpoints/step_5/" + std::string(train::kCheckpointComplete));
  EXPECT_THROW(store.latest(), DataError);
  EXPECT_THROW(train::CheckpointStore::check_resumable(d.path + "/checkpoints/step_5"), DataError);
  EXPECT_THROW(train::CheckpointStore::check_resumable(d.path + "/checkpoints/step_6"), DataError);
}

TEST(Checkpoint, APreChecksumCheckpointIsAcceptedWithANote) {
  TempDir d;
  d.write("checkpoints/step_10/model.pt", "old");
  d.write("checkpoints/step_10/COMPLETE", "10\n");
  d.write("checkpoints/latest", "step_10\n");
  train::CheckpointStore store(d.path, 3);
  std::vector<std::string> notes;
  EXPECT_EQ(*store.latest(&notes), d.path + "/checkpoints/step_10");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("predates checksums"), std::string::npos);
  EXPECT_EQ(train::CheckpointStore::check_resumable(d.path + "/checkpoints/step_10").size(), 1u);
}

TEST(Checkpoint, CleanIncompleteRemovesLeftovers) {
  TempDir d;
  fs::create_directories(d.path + "/checkpoints/.tmp-step_7-123");
  d.write("checkpoints/latest.tmp", "step_");
  train::CheckpointStore store(d.path, 3);
  store.clean_incomplete();
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/.tmp-step_7-123"));
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/latest.tmp"));
}

// A save of the step `latest` names moves the old copy aside first; a crash between the two
// renames must not lose it (clean_incomplete used to delete it as a leftover).
TEST(Checkpoint, ACheckpointMovedAsideByAnInterruptedResaveIsPutBack) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  const std::string dir = save_fake(store, 30);
  fs::rename(dir, d.path + "/checkpoints/.tmp-old-step_30-4242");
  store.clean_incomplete();
  EXPECT_TRUE(train::CheckpointStore::verify(dir).empty());
  EXPECT_EQ(*store.latest(), dir);
}

TEST(Checkpoint, ResavingTheLatestStepReplacesIt) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  save_fake(store, 30);
  store.save(30, [&](const std::string& dir) { write(dir + "/w", "second"); });
  EXPECT_EQ(read_file(*store.latest() + "/w"), "second");
  EXPECT_FALSE(fs::exists(*store.latest() + "/model.pt"));
  // a failed re-save leaves the first copy in place
  EXPECT_THROW(store.save(30, [&](const std::string&) { throw SystemError("no"); }), SystemError);
  EXPECT_EQ(read_file(*store.latest() + "/w"), "second");
}

// After a fallback past a damaged step_60, saves at 50 must prune 20, not count step_60 as a
// kept one and delete the good step_40.
TEST(Checkpoint, PruningIgnoresStepsAboveTheOneSaved) {
  TempDir d;
  train::CheckpointStore store(d.path, 2);
  save_fake(store, 20);
  save_fake(store, 40);
  const std::string damaged = save_fake(store, 60);  // pruned 20
  flip_byte(damaged + "/model.pt", 3);
  ASSERT_EQ(*store.latest(), d.path + "/checkpoints/step_40");
  save_fake(store, 50);
  EXPECT_TRUE(fs::exists(d.path + "/checkpoints/step_40"));
  EXPECT_TRUE(fs::exists(d.path + "/checkpoints/step_50"));
  EXPECT_TRUE(fs::exists(damaged));  // replaced when the run gets there
  save_fake(store, 60);
  EXPECT_TRUE(train::CheckpointStore::verify(damaged).empty());
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_40"));
}

// /dev/full fails every write with ENOSPC: the sink keeps accepting (as torch's writer needs)
// and close() reports the first error.
TEST(DurableFile, AFullDiskIsReportedAtCloseNotMidStream) {
  io::DurableFile f("/dev/full");
  std::string big(3 << 20, 'x');
  EXPECT_EQ(f.write(big.data(), big.size()), big.size());
  EXPECT_EQ(f.write("tail", 4), 4u);
  try {
    f.close();
    FAIL() << "no throw";
  } catch (const io::FileWriteError& e) {
    EXPECT_EQ(e.err, ENOSPC);
    EXPECT_EQ(std::string(e.what()), "cannot write /dev/full: No space left on device (errno 28)");
  }
}

TEST(DurableFile, WritesSmallBigAndZeroPiecesInOrder) {
  TempDir d;
  const std::string path = d.path + "/f";
  std::string expect;
  {
    io::DurableFile f(path);
    std::string big(std::size_t{5} << 19, 'b');  // 2.5 MiB: past the buffer, written straight through
    for (int i = 0; i < 1000; ++i) {
      f.write("head", 4);
      expect += "head";
    }
    f.write(big.data(), big.size());
    expect += big;
    f.write(nullptr, 7);
    expect += std::string(7, '\0');
    f.write("end", 3);
    expect += "end";
    f.close();
  }
  EXPECT_EQ(read_file(path), expect);
}

// The whole path a trainer takes: its file fails with ENOSPC inside save(); the save fails
// with the cause in words, leaves nothing, and `latest` stays.
TEST(Checkpoint, ENOSPCInACheckpointFileFailsTheSaveCleanly) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  save_fake(store, 10);
  try {
    store.save(20, [&](const std::string& dir) {
      fs::create_symlink("/dev/full", dir + "/model.pt");
      io::DurableFile f(dir + "/model.pt");
      f.write("weights", 7);
      f.close();
    });
    FAIL() << "no throw";
  } catch (const SystemError& e) {
    EXPECT_TRUE(starts_with(e.what(), "checkpoint save failed: No space left on device (step_20 in ")) << e.what();
  }
  EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_10");
  EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_20"));
}

// The disk fills at save()'s own writes: the manifest (before the rename), the `latest`
// pointer (after it: the new directory must go again, and a copy of the same step that was
// moved aside must come back). A symlink to /dev/full stands in for the full disk.
TEST(Checkpoint, ENOSPCWritingTheManifestOrTheLatestPointerUndoesTheSave) {
  {
    TempDir d;
    train::CheckpointStore store(d.path, 3);
    save_fake(store, 10);
    try {
      store.save(20, [&](const std::string& dir) {
        write(dir + "/model.pt", "w");
        fs::create_symlink("/dev/full", dir + "/" + train::kCheckpointManifest);
      });
      FAIL() << "no throw";
    } catch (const SystemError& e) {
      EXPECT_TRUE(starts_with(e.what(), "checkpoint save failed: No space left on device (step_20 in ")) << e.what();
      EXPECT_NE(std::string(e.what()).find("MANIFEST.json"), std::string::npos) << e.what();
    }
    EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_10");
    EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_20"));
  }
  {
    TempDir d;
    train::CheckpointStore store(d.path, 3);
    save_fake(store, 10);
    const std::string first = read_file(d.path + "/checkpoints/step_10/model.pt").value();
    fs::create_symlink("/dev/full", d.path + "/checkpoints/latest.tmp");
    for (int step : {20, 10}) {  // a new step; a re-save of the step `latest` names
      try {
        store.save(step, [&](const std::string& dir) { write(dir + "/model.pt", "other"); });
        FAIL() << "no throw";
      } catch (const SystemError& e) {
        EXPECT_TRUE(
            starts_with(e.what(), "checkpoint save failed: No space left on device (step_" + std::to_string(step)))
            << e.what();
        EXPECT_NE(std::string(e.what()).find("latest.tmp"), std::string::npos) << e.what();
      }
      fs::create_symlink("/dev/full", d.path + "/checkpoints/latest.tmp");  // undo removed it
      EXPECT_FALSE(fs::exists(d.path + "/checkpoints/step_20"));
      EXPECT_EQ(read_file(d.path + "/checkpoints/latest"), "step_10\n");
      EXPECT_EQ(read_file(d.path + "/checkpoints/step_10/model.pt"), first) << "the moved-aside copy is back";
      EXPECT_TRUE(train::CheckpointStore::verify(d.path + "/checkpoints/step_10").empty());
    }
  }
}

// A second holder is refused with the first one's pid (flock conflicts between two open file
// descriptions, even in one process); the lock goes with its owner.
TEST(RunDirLock, ASecondWriterIsRefusedNamingTheHolderUntilTheFirstIsGone) {
  TempDir d;
  {
    train::RunDirLock first(d.path);
    try {
      train::RunDirLock second(d.path);
      FAIL() << "no throw";
    } catch (const UsageError& e) {
      EXPECT_TRUE(starts_with(e.what(), "run dir " + d.path + " is in use by another trainbox train (pid " +
                                            std::to_string(::getpid()) + " on host "))
          << e.what();
    }
  }
  train::RunDirLock again(d.path);  // released with the first
}

// AtomicFile writes through DurableFile (buffered): the bytes land in order, the temp file goes.
TEST(DurableFile, AnAtomicFileCommitsTheWholeFileAndLeavesNoTempFile) {
  TempDir d;
  const std::string path = d.path + "/out.bin";
  std::string expect;
  {
    io::AtomicFile f(path, "test file");
    for (int i = 0; i < 100; ++i) f.write("piece", 5), expect += "piece";
    EXPECT_EQ(f.size(), expect.size());
    f.commit();
  }
  EXPECT_EQ(read_file(path), expect);
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(d.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST(Sha256, KnownDigestsOfTextAndFile) {
  EXPECT_EQ(io::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  TempDir d;
  write(d.path + "/f", "abc");
  const io::FileDigest fd = io::sha256_file(d.path + "/f", /*sync=*/false);
  EXPECT_EQ(fd.err, 0);
  EXPECT_EQ(fd.bytes, 3u);
  EXPECT_EQ(fd.sha256, io::sha256_hex("abc"));
  EXPECT_TRUE(io::is_sha256_hex(fd.sha256));
  EXPECT_EQ(io::sha256_file(d.path + "/missing", false).err, ENOENT);
}

// The output rule trainbox export and trainbox data pack share (io::check_output_path).
TEST(AtomicFile, CheckOutputPathSaysFolderFirstThenExistingThenMissingFolder) {
  test::TempDir d;
  auto message = [](const std::string& path, bool force) {
    try {
      io::check_output_path(path, force);
    } catch (const UsageError& e) {
      return std::string(e.what()) + " | " + e.hint();
    }
    return std::string("ok");
  };
  d.write("adir/x", "");
  for (bool force : {false, true}) {  // a folder: said at once, with or without --force, no --force advice
    EXPECT_NE(message(d / "adir", force).find(": it is a folder |"), std::string::npos) << message(d / "adir", force);
    EXPECT_EQ(message(d / "adir", force).find("--force"), std::string::npos);
  }
  d.write("old.pt", "keep");
  EXPECT_NE(message(d / "old.pt", false).find("already exists | pass --force"), std::string::npos);
  EXPECT_EQ(message(d / "old.pt", true), "ok");
  EXPECT_NE(message(d / "nowhere/o.pt", true).find("its folder"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(d / "nowhere"));  // refused, not created
  EXPECT_EQ(message(d / "new.pt", false), "ok");
}

// A sharded save (dist.zero_stage > 0) at this level: rank files written into the staging dir
// (as the ranks would), rank 0 commits with a layout; verify() holds the rank files to it.
namespace {
std::string fake_sharded(train::CheckpointStore& store, std::int64_t step, int world,
                         std::int64_t rank_json_step = -1) {
  store.begin_staged(step);
  const std::string stage = store.staging_dir(step);
  for (int r = 0; r < world; ++r) {
    write(fmt::format("{}/rank_{}.params.pt", stage, r), "params " + std::to_string(r));
    write(fmt::format("{}/rank_{}.optim.pt", stage, r), "optim " + std::to_string(r));
    const nlohmann::json j = {{"rank", r},
                              {"world_size", world},
                              {"step", r == 1 && rank_json_step >= 0 ? rank_json_step : step},
                              {"shard_sizes", {3}}};
    write(fmt::format("{}/rank_{}.json", stage, r), j.dump());
  }
  const nlohmann::json layout = {{"world_size", world},
                                 {"step", step},
                                 {"buckets",
                                  {{{"numel", 3 * world - 1},
                                    {"padded", 3 * world},
                                    {"shard_size", 3},
                                    {"params", {{{"name", "w"}, {"offset", 0}, {"numel", 3 * world - 1}}}}}}}};
  return store.save_staged(
      step, [&](const std::string& dir) { write(dir + "/state.json", "{}"); }, {}, layout.dump());
}
}  // namespace

TEST(Checkpoint, ShardedSaveCommitsTheStagingDirWithItsLayout) {
  TempDir d;
  train::CheckpointStore store(d.path, 3);
  const std::string dir = fake_sharded(store, 10, 3);
  EXPECT_EQ(*store.latest(), d.path + "/checkpoints/step_10");
  EXPECT_FALSE(fs::exists(store.staging_dir(10)));
  EXPECT_TRUE(train::CheckpointStore::verify(dir).empty()) << all_messages(train::CheckpointStore::verify(dir));
  const auto m = nlohmann::json::parse(*read_file(dir + "/MANIFEST.json"));
  EXPECT_EQ(m["sharding"]["world_size"], 3);
  EXPECT_EQ(m["files"].size(), 10u);  // 3 x 3 rank files + state.json
}

TEST(Checkpoint, ShardedCheckpointNotMatchingItsManifestIsNamedAndPassedOver) {
  TempDir d;
  train::CheckpointStore store(d.path, 5);
  fake_sharded(store, 10, 2);
  const std::string bad = fake_sharded(store, 20, 2, /*rank 1 says step*/ 10);
  auto ps = train::CheckpointStore::verify(bad);
  ASSERT_EQ(ps.size(), 1u) << all_messages(ps);
  EXPECT_EQ(ps[0].file, "rank_1.json");
  EXPECT_NE(ps[0].detail.find("written at step 10, the manifest is step 20 (shards from two different steps)"),
            std::string::npos)
      << ps[0].detail;
  std::vector<std::string> notes;
  EXPECT_EQ(*store.latest(&notes), d.path + "/checkpoints/step_10");
  ASSERT_FALSE(notes.empty());
  EXPECT_TRUE(starts_with(notes[0], "checkpoint step_20 is damaged: rank_1.json: does not match")) << notes[0];

  // A rank's files missing from the manifest: named as missing for the layout's world size.
  const std::string three = fake_sharded(store, 30, 3);
  auto m = nlohmann::json::parse(*read_file(three + "/MANIFEST.json"));
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& f : m["files"])
    if (f["path"] != "rank_2.optim.pt") kept.push_back(f);
  m["files"] = kept;
  const std::string text = m.dump(2) + "\n";
  write(three + "/MANIFEST.json", text);
  write(three + "/COMPLETE", "30\nMANIFEST.json sha256 " + io::sha256_hex(text) + "\n");
  ps = train::CheckpointStore::verify(three);
  ASSERT_EQ(ps.size(), 1u) << all_messages(ps);
  EXPECT_EQ(ps[0].message(), "rank_2.optim.pt: missing: the manifest's layout has 3 ranks");
}
