// What the rendezvous server answers a join (rdzv_admission.h).
#include "rdzv_admission.h"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <trainbox/launch/job_digest.h>

#include "rdzv_roster.h"

namespace trainbox::launch::rdzv {

std::optional<msg::Refuse> Admission::refusal(const msg::Join& j, const JobStanding& job) const {
  const bool elastic = cfg_.elastic();
  const int max_nodes = elastic ? cfg_.nnodes_max : cfg_.nnodes;
  if (j.version != kRdzvProtocolVersion)
    return msg::Refuse{fmt::format("the rendezvous at {} speaks protocol {}, node {} speaks {}", endpoint_,
                                   kRdzvProtocolVersion, j.host, j.version),
                       "run the same trainbox version on every node"};
  if (j.run_id != cfg_.run_id)
    return msg::Refuse{
        fmt::format("the rendezvous at {} belongs to job '{}', not '{}'", endpoint_, cfg_.run_id, j.run_id),
        "pass the same --rdzv-id on every node; a second job needs its own endpoint port"};
  if (!job.forming && !(elastic && job.admitting))
    return msg::Refuse{fmt::format("job '{}' is already running with {} nodes at {}", cfg_.run_id,
                                   elastic ? job.active : cfg_.nnodes, endpoint_),
                       elastic ? "it is stopping: start this node again for the next job"
                               : "a second job needs its own --rdzv-id and endpoint port; or wait until this one "
                                 "ends (an elastic job, --nnodes MIN:MAX, admits nodes while it runs)"};
  if (!job.forming && job.remaining >= max_nodes)
    return msg::Refuse{
        fmt::format("elastic job '{}' at {} already has its maximum of {} nodes", cfg_.run_id, endpoint_, max_nodes),
        "start this node again when one of them is gone, or raise MAX in --nnodes MIN:MAX"};
  return std::nullopt;
}

std::optional<std::pair<std::string, std::string>> Admission::difference(const msg::Join& j,
                                                                         const std::string& hosting_host) const {
  auto differs = [&](const std::string& what, const std::string& theirs, const std::string& ours,
                     const std::string& fix) {
    return std::pair{fmt::format("{} differs between nodes: {} on {}, but {} on {} (which hosts the rendezvous at {})",
                                 what, theirs, j.host, ours, hosting_host, endpoint_),
                     fix};
  };
  const std::string ours_nnodes =
      cfg_.elastic() ? fmt::format("{}:{}", cfg_.nnodes, cfg_.nnodes_max) : std::to_string(cfg_.nnodes);
  const std::string theirs_nnodes =
      j.nnodes_max != j.nnodes ? fmt::format("{}:{}", j.nnodes, j.nnodes_max) : std::to_string(j.nnodes);
  if (theirs_nnodes != ours_nnodes)
    return differs("--nnodes", "--nnodes " + theirs_nnodes, "--nnodes " + ours_nnodes,
                   "pass the same --nnodes on every node");
  if (j.max_restarts != cfg_.max_restarts)
    return differs("--max-restarts", fmt::format("--max-restarts {}", j.max_restarts),
                   fmt::format("--max-restarts {}", cfg_.max_restarts), "pass the same --max-restarts on every node");
  if (j.trainbox_version != msg::trainbox_version_text())
    return differs("the trainbox version", "trainbox " + j.trainbox_version,
                   "trainbox " + std::string(msg::trainbox_version_text()),
                   "install the same trainbox version on every node");
  // The worker command (launch/job_digest.h): what changes the math refuses; paths are noted.
  if (auto refused = compare_job_digests(j.config, cfg_.job_digest).refused)
    return differs(refused->what, refused->theirs, refused->ours, refused->fix);
  return std::nullopt;
}

std::string Admission::note_for(const msg::Join& j, const std::string& hosting_host) {
  const auto noted = compare_job_digests(j.config, cfg_.job_digest).noted;
  if (noted.empty()) return "";
  std::vector<std::string> parts;
  std::string kind, fix;
  for (const auto& d : noted) {
    parts.push_back(fmt::format("{} on {}, but {} on {}", d.theirs, j.host, d.ours, hosting_host));
    kind += d.what + '\n';
    if (fix.empty() && (cfg_.max_restarts > 0 || cfg_.elastic())) fix = d.fix;
  }
  std::string line = fmt::format(
      "the worker command differs between nodes only in what does not change the math: {} (allowed; "
      "docs/distributed.md, \"What the nodes must agree on\"){}",
      fmt::join(parts, "; "), fix.empty() ? "" : "; " + fix);
  if (noted_kinds_.insert(kind).second) log_line(endpoint_, "note: " + line);
  return line;
}

}  // namespace trainbox::launch::rdzv
