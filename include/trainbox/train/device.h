// trainbox/train/device.h — "auto" / "cpu" / "cuda" / "cuda:N" to a torch::Device, with the
// errors users need (no GPU visible, index out of range), and the chosen GPU made current.
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
//
//   DeviceChoice c = choose_device(cfg.train.device, env.local_rank, env.local_world_size);
//   if (!c.note.empty()) progress.note(c.note);          // "device auto: 4 ranks per node, 1 GPU: CPU"
//   torch::Device d = c.device;                           // throws UsageError/ConfigError on bad input
#pragma once
#include <string>

#include <torch/types.h>

namespace trainbox::train {

struct DeviceChoice {
  torch::Device device = torch::kCPU;
  std::string note;  // what "auto" did when it was not the obvious thing, else ""
};

DeviceChoice choose_device(const std::string& spec, int local_rank = 0, int local_world_size = 1);

}  // namespace trainbox::train
