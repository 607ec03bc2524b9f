// trainbox/train/checkpoint_path.h — what a user may name wherever a checkpoint is taken
// (--resume, trainbox sample, trainbox export).
//
//   resolve_checkpoint("runs/x")                      → runs/x/checkpoints/step_N (newest that verifies)
//   resolve_checkpoint("runs/x/checkpoints/latest")   → runs/x/checkpoints/step_N (the one it names)
//   resolve_checkpoint("runs/x/checkpoints/step_40")  → as given
#pragma once
#include <string>
#include <vector>

namespace trainbox::train {

// A checkpoint dir (step_N) as it is; the `latest` pointer file, or the checkpoints/ dir that
// holds it, as the step_N it names; a run dir (it has checkpoints/) as CheckpointStore::latest()
// of it (with its notes). Throws DataError (exit 2) when a pointer or a run dir leads to no
// checkpoint. Anything else comes back as given, for check_resumable to name what is wrong.
std::string resolve_checkpoint(const std::string& path, std::vector<std::string>* notes = nullptr);
// Whether `path` is a run dir (has a checkpoints/ dir).
bool is_run_dir(const std::string& path);
// The run dir a checkpoint dir belongs to: <run_dir>/checkpoints/step_N as the kernel resolves
// it (links and ".." resolved, so never a folder above it by accident), relative to the
// working directory when it lies under it. Throws DataError (exit 2) when `checkpoint` does not
// exist, UsageError (exit 2) when it is not inside a run dir's checkpoints/ (pass --run-dir).
std::string run_dir_of_checkpoint(const std::string& checkpoint);

}  // namespace trainbox::train
