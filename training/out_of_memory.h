// Out of memory, worded at the command boundary: the one line naming the keys that set the memory
// (memory.limit, training.batch_size, ...) and its phase's remedies. Lower layers throw the fact;
// studies record it as a result (TrialStatus::OutOfMemory).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "training/config/config.h"
#include "training/parts/checkpoint_choice.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"

namespace training {

// Where out of memory happened ("in epoch 2 after 40 steps") and its phase, for the remedies.
struct OutOfMemoryWhere {
  enum Phase { Setup, Training, Evaluation } phase;
  std::string text;
  bool checkpointed = true;  // a checkpoint of the run exists (said to be intact)
  bool one_image = false;    // Evaluation: its forward passes were down to one image
  bool gradients = false;    // Evaluation: the step's gradients held beside it (a captured step's)
};

// Out of memory's one line: where, the peak reached, the limit, and the phase's remedies.
std::string out_of_memory_message(const Config& config, const torch::Device& device,
                                  const OutOfMemoryWhere& where,
                                  const std::string& allocator_message);

// Out of memory in a training step whose remedies name a smaller batch or checkpointing: whether
// they fit is told only by steps measured once the run's weights and optimizer state are freed (a
// convolution's weight-gradient scratch, batch-independent, may not fit at any batch). what(): the
// line unmeasured; `head` and `intact` its parts around the remedies.
class UnconfirmedOutOfMemory : public OutOfMemory {
 public:
  UnconfirmedOutOfMemory(const std::string& line, std::string head, std::string intact,
                         Config config, torch::Device device, int64_t limit)
      : OutOfMemory(line),
        head(std::move(head)),
        intact(std::move(intact)),
        config(std::move(config)),
        device(device),
        limit(limit) {}
  std::string head, intact;
  Config config;
  torch::Device device;
  int64_t limit;
};

// The line of `e` once measured (`measure`: measure_blocks, or a test's stand-in): a step at the
// smallest batch that trains, every block recomputed (its plain peak predicted from it), and where
// that fits and checkpointing is a remedy, the run's batch recomputed. Offered: a smaller batch
// (and --find-max) where its plain step fits; checkpointing where the run's batch recomputed fits
// (auto too where within auto's budget); else a smaller batch with checkpointing where that fits;
// where none fits, the measured figure is said. A failure to measure other than out of memory (a
// second signal's stop) leaves e.what().
std::string confirmed_out_of_memory(const UnconfirmedOutOfMemory& e,
                                    const MeasureBlocks& measure = {});

// The one line a study records for an error of a step it measured (a sweep trial, `train
// memory`): the error's first line; out of memory under memory.limit says that key.
std::string measured_error_line(const Config& config, const std::exception& error);

// Throws out_of_memory_message's line: UnconfirmedOutOfMemory where it offers a smaller batch.
[[noreturn]] void throw_out_of_memory(const Config& config, const torch::Device& device,
                                      const OutOfMemoryWhere& where,
                                      const std::string& allocator_message);

// Runs `body`, turning out of memory (is_out_of_memory) into OutOfMemory with its one line.
template <class Body>
auto out_of_memory_is_exit_3(const Config& config, const torch::Device& device,
                             const std::function<OutOfMemoryWhere()>& where, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e) || dynamic_cast<const OutOfMemory*>(&e)) throw;
    throw_out_of_memory(config, device, where(), e.what());
  }
}

}  // namespace training
