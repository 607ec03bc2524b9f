// trainbox/util/fatal_origin.h — who a fatal line comes from, in a job that spans nodes.
//
// A multi-node log is read out of order (nccl-tests puts the host in every error line for that
// reason), so report_error() (util/errors.h) and the CLI's "internal error" line start with
// "trainbox: error [node1 rank 3]: " instead of "trainbox: error: " when the job spans nodes.
// A job spans nodes when its launcher says so: GROUP_WORLD_SIZE > 1 (trainbox run and torchrun
// set it to the node count) or SLURM_NNODES > 1, read from the environment at each call; and in
// the launcher of such a job itself, after set_job_spans_nodes(true) (its rendezvous errors).
//
//   std::fputs((fatal_line_start("trainbox", "internal error") + what + "\n").c_str(), stderr);
#pragma once
#include <string>

namespace trainbox {

// "<host> rank <R>" (gethostname; RANK, the global rank), the host alone without RANK (a launcher
// itself), or "" in a single-node job.
std::string fatal_origin();
// The launcher of a job of several nodes says so before its rendezvous (thread-safe).
void set_job_spans_nodes(bool spans);
// The start of a fatal line: "trainbox: error: ", or "trainbox: error [node1 rank 3]: ".
std::string fatal_line_start(const char* program = "trainbox", const char* kind = "error");

}  // namespace trainbox
