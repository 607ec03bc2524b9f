// src/launch/rdzv_admission.h (private) — what the rendezvous server (rdzv_server.cpp) answers a
// join: a refusal that concerns the joining node alone (another protocol or job, a job that is
// running and not elastic, an elastic job at its MAX), a difference in what every node must agree
// on (--nnodes, --max-restarts, the trainbox version, the worker command's math: the job cannot
// form), or a note (the worker command differs only in what does not change the math: allowed).
// Pure but for the notes it logs once per kind; docs/distributed.md, "What the nodes must agree on".
//
//   Admission admission(cfg, endpoint);
//   if (auto r = admission.refusal(join, {.forming = true, …})) ch.send(*r);
//   else if (auto d = admission.difference(join, roster.hosting_host())) abort the forming job;
//   else ch.send(msg::Joined{…, admission.note_for(join, roster.hosting_host())});
#pragma once
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <trainbox/launch/messages.h>
#include <trainbox/launch/run_config.h>

namespace trainbox::launch::rdzv {

// Where the job stands when a node joins.
struct JobStanding {
  bool forming = true;     // the first attempt's nodes are still joining
  bool admitting = false;  // running, or stopping for a restart: an elastic job admits at the next one
  int active = 0;          // members of the running attempt
  int remaining = 0;       // members not gone (the waiting ones included)
};

class Admission {
 public:
  // Both outlive the Admission (the server's own copies).
  Admission(const RunConfig& cfg, const std::string& endpoint) : cfg_(cfg), endpoint_(endpoint) {}

  // A refusal for `j` (the node alone is turned away), or nullopt when it may join.
  std::optional<msg::Refuse> refusal(const msg::Join& j, const JobStanding& job) const;
  // What differs between `j` and this job ("--nnodes differs between nodes: …", its fix), if anything.
  std::optional<std::pair<std::string, std::string>> difference(const msg::Join& j,
                                                                const std::string& hosting_host) const;
  // What differs between `j`'s worker command and this node's but may (paths, per-node keys):
  // one line, for the joining node and, once per kind of difference, for this one. "" = none.
  std::string note_for(const msg::Join& j, const std::string& hosting_host);

 private:
  const RunConfig& cfg_;
  const std::string& endpoint_;
  std::set<std::string> noted_kinds_;  // the kinds of worker-command differences this node has noted
};

}  // namespace trainbox::launch::rdzv
