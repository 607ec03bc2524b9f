// trainbox/distributed/device.h — which device a worker trains on: "auto" / "cpu" / "cuda" /
// "cuda:N" to a torch::Device, from the worker's place on its node, with the errors users need
// (no GPU visible, index out of range), and the chosen GPU made current.
//
// Under a launcher a process knows its place on the node (LOCAL_RANK of LOCAL_WORLD_SIZE):
//   - "auto": one GPU per local rank (cuda:<local_rank>) when the node has at least as many
//     visible GPUs as local ranks; otherwise CPU for every rank, with a note that says why
//     (two ranks cannot share a GPU under NCCL, and a job that mixes CPU and GPU ranks
//     cannot form one process group). All ranks of a node decide alike, from the same counts.
//   - "cuda" (no index): cuda:<local_rank>; more ranks than GPUs is an error naming both counts.
//   - "cuda:N": that GPU, for every rank (a single-process job, or the user's explicit choice).
// A CUDA choice is also made the current device (c10::cuda::set_device), once, here: streams,
// events, graphs and NCCL then work on that GPU and no context is left on GPU 0.
// This is the data-parallel layer's decision (the process group's backend follows from it), so
// it lives here; train/device.h names it for the config key train.device.
//
//   auto env = WorkerEnv::from_environment();
//   DeviceChoice c = choose_device("auto", env.local_rank, env.local_world_size);
//   if (!c.note.empty()) progress.note(c.note);          // "device auto: 4 ranks per node, 1 GPU: CPU"
//   auto pg = ProcessGroup::init(env, {}, c.device);      // throws UsageError/ConfigError on bad input
#pragma once
#include <string>

#include <torch/types.h>

namespace trainbox::dist {

struct DeviceChoice {
  torch::Device device = torch::kCPU;
  std::string note;  // what "auto" did when it was not the obvious thing, else ""
};

// `origin` names where spec came from in the errors: a flag ("--device": "--device cuda but torch
// sees no CUDA GPU") or a config key ("train.device": "train.device = \"cuda\" but …").
DeviceChoice choose_device(const std::string& spec, int local_rank = 0, int local_world_size = 1,
                           const std::string& origin = "--device");

}  // namespace trainbox::dist
