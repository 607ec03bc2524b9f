// hostlist_expand LIST… — prints trainbox's expansion of each Slurm hostlist, one host per
// line (what `scontrol show hostnames LIST` prints), for tests/integration/slurm.sh to compare
// with Slurm's own. Exit 2 with the message on a list trainbox rejects.
#include <cstdio>
#include <exception>

#include <trainbox/util/job_env.h>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    try {
      for (const auto& h : trainbox::expand_hostlist(argv[i])) std::printf("%s\n", h.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hostlist_expand: %s\n", e.what());
      return 2;
    }
  }
  return 0;
}
