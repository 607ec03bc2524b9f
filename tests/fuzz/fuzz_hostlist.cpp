// The scheduler strings workers and the launcher parse (util/job_env.h): Slurm hostlists and
// task counts, integers, CUDA_VISIBLE_DEVICES. First byte: which parser; the rest: the text.
// Property: first_host() is expand_hostlist()'s first name, without expanding the rest.
#include <string>
#include <string_view>

#include "fuzz_common.h"
#include <trainbox/util/errors.h>
#include <trainbox/util/job_env.h>
#include <trainbox/util/parse.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: {
        auto hosts = trainbox::expand_hostlist(text);
        FUZZ_CHECK(hosts.size() <= trainbox::kMaxHosts);
        if (!hosts.empty()) FUZZ_CHECK(trainbox::first_host(text) == hosts.front());
        break;
      }
      case 1:
        for (int n : trainbox::expand_tasks_per_node(text)) FUZZ_CHECK(n >= 0);
        break;
      case 2:
        if (auto v = trainbox::parse_integer(text)) (void)trainbox::slurm_master_port(*v);
        break;
      case 3: {
        const int physical = data[0] / 4;  // 0..63
        const int n = trainbox::visible_device_count(text, physical);
        FUZZ_CHECK(n >= 0 && n <= physical);
        break;
      }
    }
  } catch (const trainbox::Error&) {
  }
  return 0;
}
