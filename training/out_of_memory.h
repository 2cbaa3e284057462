// Out of memory, worded at the command boundary: the one line naming the keys that set the memory
// (memory.limit, training.batch_size, ...) and its phase's remedies. Lower layers throw the fact;
// studies record it as a result (TrialStatus::OutOfMemory).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "training/config/config.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"

namespace training {

// Where out of memory happened ("in epoch 2 after 40 steps") and its phase, for the remedies.
struct OutOfMemoryWhere {
  enum Phase { Setup, Training, Evaluation } phase;
  std::string text;
  bool checkpointed = true;  // a checkpoint of the run exists (said to be intact)
  bool one_image = false;    // Evaluation: its forward passes were down to one image
};

// Out of memory's one line: where, the peak reached, the limit, and the phase's remedies.
std::string out_of_memory_message(const Config& config, const torch::Device& device,
                                  const OutOfMemoryWhere& where,
                                  const std::string& allocator_message);

// The one line a study records for an error of a step it measured (a sweep trial, `train
// memory`): the error's first line; out of memory under memory.limit says that key.
std::string measured_error_line(const Config& config, const std::exception& error);

// Runs `body`, turning out of memory (is_out_of_memory) into OutOfMemory with its one line.
template <class Body>
auto out_of_memory_is_exit_3(const Config& config, const torch::Device& device,
                             const std::function<OutOfMemoryWhere()>& where, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e) || dynamic_cast<const OutOfMemory*>(&e)) throw;
    throw OutOfMemory(out_of_memory_message(config, device, where(), e.what()));
  }
}

}  // namespace training
