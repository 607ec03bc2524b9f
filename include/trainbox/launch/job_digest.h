// trainbox/launch/job_digest.h — what the nodes of a c10d job must agree on about the worker
// command, and what each node may set its own way (docs/distributed.md, "What the nodes must
// agree on").
//
// Each launcher sends a digest of its worker command with its join; the rendezvous compares it
// with its own. Refused (exit 2, the item named): another program (`trainbox train` against
// `python3`), another Python script (by its contents: the code is the math; its path may
// differ), and for `trainbox train` workers any config key that changes the math or the ranks'
// sequence of collectives (train/config_rules.h, key_may_differ_between_nodes()), as the worker
// will resolve it (config file, --set, the run dir's config.toml). Reported in one line, and not
// refused: the arguments (--run-dir runs/job-$HOSTNAME, per-host log names, $SLURM_NODEID), the
// per-node config keys (data.path, data.workers, …) and the contents of other files the command
// names: trainbox cannot tell a learning rate from a log path in a format it does not read.
//
//   RunArgs a; a.worker_keys = read_train_keys;            // the CLI's reader for `trainbox train`
//   std::string mine = job_digest(command, a.worker_keys);  // travels in msg::Join::config
//   JobDigestComparison c = compare_job_digests(theirs, mine);
//   if (c.refused) refuse(c.refused->what + " differs …", c.refused->fix);
//   else if (!c.noted.empty()) note(…);                    // one line, both values named
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainbox::launch {

// A worker's config as trainbox resolves it, key by key ({"optim.lr", "0.001"}): `shared` must
// be equal on every node, `per_node` may differ.
struct WorkerKeys {
  std::vector<std::pair<std::string, std::string>> shared, per_node;
};
// The config of a worker command trainbox understands (`trainbox train …`), or nullopt: another
// command, or a config that does not resolve (the worker then says why, once it runs).
using WorkerKeysReader = std::function<std::optional<WorkerKeys>(const std::vector<std::string>& command)>;

// The digest of a worker command (JSON text): its program, script contents, config keys,
// arguments and the contents of the small files it names.
std::string job_digest(const std::vector<std::string>& command, const WorkerKeysReader& keys = {});

// One item that differs: what it is ("optim.lr", "--run-dir", "the worker program"), each
// node's value as a reader wants it ("optim.lr = 0.01", "--run-dir runs/job-a"), and the fix
// (a refusal's; for a noted item, what a restart would need, if anything).
struct DigestItemDiff {
  std::string what, theirs, ours, fix;
};
struct JobDigestComparison {
  std::optional<DigestItemDiff> refused;  // the first item that must match and does not
  std::vector<DigestItemDiff> noted;      // what may differ and does, in the digest's order
};
// `theirs` (a joining node's digest) against `ours` (the hosting node's).
JobDigestComparison compare_job_digests(const std::string& theirs, const std::string& ours);

}  // namespace trainbox::launch
