// src/train/cuda_debug.h — fault injection on the GPU (CUDA builds only, TRAINBOX_WITH_CUDA):
// a kernel that spins for ~10 minutes on the current stream, so the next collective of this
// rank cannot start and NCCL's watchdog times it out (debug.stall_phase = "gpu_collective";
// scripts/gpu-check.sh checks that the flight recorder then dumps).
#pragma once

namespace trainbox::train {

void enqueue_gpu_hang();

}  // namespace trainbox::train
