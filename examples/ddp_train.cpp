// ddp_train — the classic PyTorch DDP example (ToyModel, mp.spawn) as a user's own C++
// program on libtrainbox. Run it with any launcher:
//   trainbox run --standalone --nproc-per-node 2 -- ./ddp_train
//   torchrun --no-python --nproc-per-node 2 ./ddp_train
// Each rank trains its own copy; DDP keeps them identical by averaging gradients.
#include <cstdio>

#include <torch/torch.h>

#include <trainbox/distributed/ddp.h>
#include <trainbox/distributed/device.h>
#include <trainbox/distributed/process_group.h>
#include <trainbox/distributed/worker_env.h>
#include <trainbox/train/process_setup.h>
#include <trainbox/util/errors.h>

struct ToyModelImpl : torch::nn::Module {
  ToyModelImpl()
      : net1(register_module("net1", torch::nn::Linear(10, 10))),
        net2(register_module("net2", torch::nn::Linear(10, 5))) {}
  torch::Tensor forward(torch::Tensor x) { return net2(torch::relu(net1(x))); }
  torch::nn::Linear net1, net2;
};
TORCH_MODULE(ToyModel);

int main() {
  try {
    // NCCL's blocking wait and network interface, as trainbox's own programs set them (optional).
    trainbox::train::configure_process({.keep_large_allocations = false});
    auto env = trainbox::dist::WorkerEnv::from_environment();  // RANK, WORLD_SIZE, … from the launcher
    // One GPU per rank when there are enough, else CPU for all (and the GPU made current).
    auto choice = trainbox::dist::choose_device("auto", env.local_rank, env.local_world_size);
    if (!choice.note.empty() && env.rank == 0) std::fprintf(stderr, "%s\n", choice.note.c_str());
    torch::Device device = choice.device;
    auto pg = trainbox::dist::ProcessGroup::init(env, {}, device);  // NCCL on GPUs, Gloo on CPU

    torch::manual_seed(env.rank);  // different initial weights on purpose: DDP broadcasts rank 0's
    ToyModel model;
    model->to(device);
    trainbox::dist::DistributedDataParallel ddp(model.ptr(), pg);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.001));  // LibTorch's own optimizer

    for (int step = 0; step < 10; ++step) {
      opt.zero_grad();
      auto out = model->forward(torch::randn({20, 10}, device));
      auto loss = torch::mse_loss(out, torch::randn({20, 5}, device));
      loss.backward();  // gradients are averaged across ranks here
      opt.step();
      if (step == 9) std::printf("rank %d: step %d loss %.4f\n", pg->rank(), step, loss.item<float>());
    }
    // Every rank ends with the same weights.
    auto w = model->net1->weight.detach().clone();
    auto hi = w.clone(), lo = -w;
    pg->allreduce_op(hi, c10d::ReduceOp::MAX);
    pg->allreduce_op(lo, c10d::ReduceOp::MAX);
    bool same = hi.equal(-lo);
    std::printf("rank %d: weights identical across %d ranks: %s\n", pg->rank(), pg->size(), same ? "yes" : "NO");
    pg->barrier();
    return same ? 0 : 1;
  } catch (const trainbox::Error& e) {
    return trainbox::report_error(e, "ddp_train");
  }
}
