// One trial per GPU: a sweep's trials shared out among the GPUs of sweep.devices, each GPU
// running one trial at a time (its own worker thread), never two on one GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace training {

// Runs work(job, device) for every job in [0, jobs), in order, each on the first of `devices` free;
// when a job throws, no further job starts, the running ones finish, and the first exception is
// rethrown here.
void run_on_devices(const std::vector<int64_t>& devices, size_t jobs,
                    const std::function<void(size_t job, int64_t device)>& work);

// The child environment that gives a trial GPU `device` alone: {"CUDA_VISIBLE_DEVICES=N"}.
std::vector<std::string> one_gpu_environment(int64_t device);

}  // namespace training
