// bench heartbeat: what one progress beat costs (util/heartbeat.h: a record written into a
// shared mapping), in nanoseconds — trainbox train makes about four per optimizer step.
#include <trainbox/bench/bench.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <torch/torch.h>

#include <trainbox/util/heartbeat.h>

namespace trainbox::bench {

BenchReport bench_heartbeat(const BenchOptions& o) {
  BenchReport r("heartbeat");
  describe_run(r, torch::kCPU);
  char path[] = "/tmp/trainbox-bench-heartbeat-XXXXXX";
  const int fd = mkstemp(path);
  if (fd >= 0) ::close(fd);
  Heartbeat hb(path);
  const int beats = o.quick ? 10000 : 100000;
  r.header("what", fmt::format("{} beats per timed iteration into a 64-byte shared mapping ({})", beats,
                               hb.active() ? "active" : "INACTIVE"));
  r.columns({"beats", "time_us", "ns_per_beat"});
  std::int64_t step = 0;
  const char* phases[] = {"data", "forward_backward", "allreduce", "optimizer"};
  Stats st = time_op(
      [&] {
        for (int i = 0; i < beats; ++i) hb.beat(step++, phases[i & 3]);
      },
      torch::kCPU, o.warmup, o.iters);
  r.add({beats, st.median * 1e6, st.median * 1e9 / beats});
  if (!hb.active()) r.fail("the heartbeat file could not be mapped");
  std::remove(path);
  return r;
}

extern const BenchPlugin kHeartbeatBench{"heartbeat", "nanoseconds per progress beat (stall detection's cost)", false,
                                         bench_heartbeat};

}  // namespace trainbox::bench
