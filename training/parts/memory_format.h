// training.memory_format: auto. The fastest layout depends on the machine and the model (on one
// CPU, bf16 at the torchvision stem ran 18x slower contiguous than channels_last, while fp32 at
// the CIFAR stem ran 2x faster channels_last), so auto is decided for each run, before anything
// is built, the way cuDNN's benchmark mode decides algorithms: by timing.
//   - CUDA: channels_last, not timed (docs/gpu.md's H200 figures were taken channels_last).
//   - CPU: both layouts timed over a few steps (measure_training_rate), the faster kept and both
//     rates logged; not timed where bf16 is emulated or with data-parallel training.
// The choice is the run's decision (decisions.json, the checkpoint): a resume of the same step
// (layout_signature) keeps it untimed. train sweep and train plan keep explicit layouts.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "training/config/config.h"
#include "training/config/decisions.h"

namespace training {

// The layout `config` trains in on `device` without timing anything: the explicit one, or auto's
// untimed default (channels_last on CUDA, contiguous on the CPU). What components use when they
// are built from a config that still says auto (tests, studies).
c10::MemoryFormat memory_format_for(const Config& config, const torch::Device& device);

struct MemoryFormatChoice {
  c10::MemoryFormat format = c10::MemoryFormat::Contiguous;
  bool timed = false;          // both layouts were timed (the rates below are set)
  double contiguous_rate = 0;  // training images/s
  double channels_last_rate = 0;
  std::string reason;  // why it is this layout, for the log
  // Where a recorded layout no longer holds, why ("the recorded layout does not hold (it was
  // timed for ..., and this run is ...)"), said before the reason as checkpointing's is.
  std::string lapsed;
};

// The bytes each layout's timing step must fit on the CPU: with checkpointing auto choosing its
// blocks the budget they are chosen for, else memory.limit; 0 when there is none.
int64_t layout_timing_budget(const Config& config);

// What a recorded layout was chosen for, its chosen_for: the step, and what its timing depended
// on beyond it (the CPU threads; memory.limit in bytes and the `beside_step` bytes held with the
// step, under which a layout whose step does not fit is none).
std::string layout_signature(const Config& config, const torch::Device& device,
                             int64_t beside_step = 0);

// Images/s of a few training steps of `config` (its training.memory_format set) on `device`.
using MeasureRate = std::function<double(const Config& config, const torch::Device& device)>;

// The layout for this run (see the top of this file); `measure` replaces the timing in tests.
// `beside_step`: bytes the run holds on the device beside its step (held_beside_step), held while
// each layout is timed under memory.limit.
MemoryFormatChoice choose_memory_format(const Config& config, const torch::Device& device,
                                        bool data_parallel, const MeasureRate& measure = {},
                                        int64_t beside_step = 0);

// training.memory_format: auto's decision, in `decisions.layout`: the recorded one where it holds
// (a resume), else choose_memory_format's (none when the config sets the layout).
MemoryFormatChoice decide_memory_format(const Config& config, Decisions& decisions,
                                        const torch::Device& device, bool data_parallel,
                                        const MeasureRate& measure = {}, int64_t beside_step = 0);

// The default timing: 1 warm-up and 2 timed steps on a synthetic batch (at most 8 images and no
// weight average, or under a budget the run's own), each step a micro-batch after one when
// accumulating (the first's gradients and BatchNorm copy held, as training does); the median
// step's images/s.
double measure_training_rate(const Config& config, const torch::Device& device);

// One line when an explicit layout is known to be far slower than the other on this machine:
// bf16 contiguous on a CPU with native bf16 (the 18x case); empty otherwise.
std::string memory_format_warning(const Config& config, const torch::Device& device);

}  // namespace training
