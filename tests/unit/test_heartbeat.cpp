// The heartbeat contract: what beat() writes is what parse_heartbeat() (the launcher's reader)
// reads, through the file, and what the documented Python lines write parses too.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <trainbox/util/heartbeat.h>

#include "temp_dir.h"

using trainbox::Heartbeat;
using trainbox::parse_heartbeat;

TEST(Heartbeat, BeatIsReadBackThroughTheFile) {
  trainbox::test::TempDir dir;
  const std::string path = dir.path + "/heartbeat";
  Heartbeat hb(path);
  ASSERT_TRUE(hb.active());
  hb.beat(41, "forward_backward");
  hb.phase("allreduce");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  ASSERT_EQ(ss.str().size(), trainbox::kHeartbeatBytes);
  auto r = parse_heartbeat(ss.str());
  ASSERT_TRUE(r.has_value()) << ss.str();
  EXPECT_EQ(r->step, 41);
  EXPECT_EQ(r->phase, "allreduce");
  EXPECT_GT(r->unix_ms, 1600000000000LL);
}

TEST(Heartbeat, OffWithoutAFileCostsNothing) {
  Heartbeat hb;
  EXPECT_FALSE(hb.active());
  hb.beat(3, "data");  // no crash, nothing written
  EXPECT_EQ(hb.step(), 3);
}

TEST(Heartbeat, PythonSnippetRecordParses) {
  // f"{step} {phase} {time.time_ns() // 10**6}".ljust(63).encode() + b"\n"
  std::string rec = "12 data 1764580000123";
  rec.append(63 - rec.size(), ' ');
  rec += '\n';
  auto r = parse_heartbeat(rec);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 12);
  EXPECT_EQ(r->phase, "data");
}

TEST(Heartbeat, EmptyTornOrForeignRecordsAreRejected) {
  EXPECT_FALSE(parse_heartbeat(std::string(64, '\0')).has_value());
  EXPECT_FALSE(parse_heartbeat("").has_value());
  EXPECT_FALSE(parse_heartbeat("12 da").has_value());
  EXPECT_FALSE(parse_heartbeat("12 Data 99").has_value());
  EXPECT_FALSE(parse_heartbeat("x data 99").has_value());
  EXPECT_FALSE(parse_heartbeat("12 data 99 junk").has_value());
}
