// Out of memory, worded at the command boundary: the one place an out-of-memory error of a
// command that trains becomes its one-line message, with the keys that set the memory it ran out
// of (memory.limit, training.batch_size, ...) and the remedies for its phase. Lower layers throw
// the fact (c10's OutOfMemoryError, platform/errors.h's OutOfMemory); studies that measure
// record it as a result (TrialStatus::OutOfMemory).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "training/config/config.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"

namespace training {

// Where an out-of-memory error happened: "in epoch 2 after 40 steps", and which phase, which
// decides the remedies.
struct OutOfMemoryWhere {
  enum Phase { Setup, Training, Evaluation } phase;
  std::string text;
  bool checkpointed = true;  // a checkpoint of the run exists (said to be intact)
  bool one_image = false;    // Evaluation: its forward passes were down to one image
};

// One line for an out-of-memory error: where it happened, the peak reached, the limit, and the
// remedies for that phase.
std::string out_of_memory_message(const Config& config, const torch::Device& device,
                                  const OutOfMemoryWhere& where,
                                  const std::string& allocator_message);

// The one line a study records for an error of a step it measured (a sweep trial, `train
// memory`): the error's first line; out of memory under memory.limit says that key.
std::string measured_error_line(const Config& config, const std::exception& error);

// Runs `body`; an out-of-memory error inside it (device.h's is_out_of_memory) becomes
// OutOfMemory with its one-line message.
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
