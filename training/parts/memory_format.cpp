#include "training/parts/memory_format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <vector>

#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/platform/device.h"
#include "training/platform/duration.h"
#include "training/platform/heartbeat.h"
#include "training/platform/memory.h"
#include "training/platform/statistics.h"
#include "training/platform/stop_signal.h"
#include "training/step/step.h"

namespace training {

c10::MemoryFormat memory_format_for(const Config& config, const torch::Device& device) {
  if (config.training.memory_format) return *config.training.memory_format;
  return device.is_cuda() ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous;
}

namespace {

// What the timing step must fit, as the reason names it: with checkpointing auto the budget its
// blocks are chosen for (the step timed is its least, every block recomputed), else memory.limit;
// 0 bytes when nothing.
CheckpointBudget timing_budget(const Config& config) {
  const auto& c = config.checkpointing;
  if (c.mode() == CheckpointMode::Auto && !c.blocks() &&
      (c.budget() > 0 || config.memory.limit > 0)) {
    const CheckpointBudget budget = checkpointing_budget(config, torch::kCPU);
    return {budget.bytes,
            "checkpointing's budget " + format_bytes(budget.bytes) + " (" + budget.source + ")"};
  }
  return {config.memory.limit, "memory.limit " + format_bytes(config.memory.limit)};
}

// The images of the timing step: at most 8 (a few seconds on a CPU), but under a budget the
// run's own batch, weight average and all: a layout whose step fits the budget at 8 images may
// not at the run's batch, and only a step that fits is a candidate. Two micro-batches stand for
// any accumulation (the step's own memory and work are those of one micro-batch).
Config timing_config(const Config& config) {
  Config c = config;
  c.training.accumulate_steps = std::min<int64_t>(config.training.accumulate_steps, 2);
  if (timing_budget(config).bytes > 0) return c;
  c.training.batch_size = std::min<int64_t>(config.training.batch_size, 8);
  c.training.ema_decay = 0;
  return c;
}

// One layout's timing: its images/s, or the out-of-memory error of its step (the layout is no
// candidate). Any other error goes on.
struct Timed {
  double rate = 0;
  std::exception_ptr out_of_memory;
};

// While the layouts are timed under a budget: the budget as the allocator's limit (where below its
// own) and what the run holds beside its step allocated beside it, so that each step must fit.
class HeldWhileTimed {
 public:
  HeldWhileTimed(int64_t budget, int64_t beside_step, const torch::Device& device)
      : allocator_(TrackingCpuAllocator::instance()), before_(allocator_.limit()) {
    if (budget <= 0) return;
    if (beside_step > 0)
      beside_ = torch::empty({beside_step}, torch::TensorOptions(torch::kUInt8).device(device));
    if (before_ == 0 || budget < before_) allocator_.set_limit(budget);
  }
  ~HeldWhileTimed() { allocator_.set_limit(before_); }
  HeldWhileTimed(const HeldWhileTimed&) = delete;
  HeldWhileTimed& operator=(const HeldWhileTimed&) = delete;

 private:
  TrackingCpuAllocator& allocator_;
  int64_t before_;
  torch::Tensor beside_;
};

Timed time_layout(const MeasureRate& rate, const Config& config, const torch::Device& device) {
  try {
    return {rate(config, device), nullptr};
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    return {0, std::current_exception()};
  }
}

// The recomputation the timing step runs (measure_training_rate): another one is another step.
std::string timed_recomputation(const CheckpointingOptions& ck) {
  switch (ck.mode()) {
    case CheckpointMode::Off:
      return "no block recomputed";
    case CheckpointMode::On:
      return "recomputed by " + granularity_name(ck.granularity()) +
             (ck.granularity() == CheckpointGranularity::Segments
                  ? fmt::format(" ({})", ck.segments())
                  : "");
    case CheckpointMode::Auto:
      return ck.blocks() ? fmt::format("recomputed: [{}]", fmt::join(*ck.blocks(), ", "))
                         : "every block recomputed alone (checkpointing auto, to be chosen)";
  }
  return "";
}

}  // namespace

int64_t layout_timing_budget(const Config& config) {
  return timing_budget(config).bytes;
}

std::string layout_signature(const Config& config, const torch::Device& device,
                             int64_t beside_step) {
  // The step timed: a larger batch without a budget, or more micro-batches, is the same one.
  std::string signature = step_signature(timing_config(config), std::nullopt, device) + ", " +
                          timed_recomputation(config.checkpointing) +
                          fmt::format(", {} CPU threads", at::get_num_threads());
  if (config.memory.limit > 0) {
    signature += fmt::format(", under memory.limit {} ({} bytes)",
                             format_bytes(config.memory.limit), config.memory.limit);
  }
  if (const int64_t budget = timing_budget(config).bytes; budget > 0) {
    signature +=
        fmt::format(", its step within {} bytes with {} bytes held beside it", budget, beside_step);
  }
  return signature;
}

double measure_training_rate(const Config& config, const torch::Device& device) {
  Config c = config;
  // Checkpointing auto chooses its blocks in the layout chosen here: until then the step is timed
  // as auto's measurement takes it, every block recomputed alone (the plain step, which auto
  // exists to avoid, can run out under memory.limit where the run would not).
  if (c.checkpointing.mode() == CheckpointMode::Auto && !c.checkpointing.blocks()) {
    c.checkpointing.mode(CheckpointMode::On).granularity(CheckpointGranularity::Block);
  }
  StepParts parts = build_measured_step_parts(c, device);
  parts.model->train();
  const auto [images, labels] = synthetic_batch(c, device);
  const int64_t micro_batches = c.training.accumulate_steps > 1 ? 2 : 1;
  const StepOptions options = step_options(c).accumulate_steps(micro_batches);
  std::vector<double> seconds(2);  // steps 1 and 2; the first step warms up
  for (int step = 0; step < 3; ++step) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<torch::Tensor> buffers_at_start;  // held through the step, as training does
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      if (micro == 0 && micro_batches > 1) buffers_at_start = copy_buffers(*parts.model);
      train_step(parts, images, labels, options, micro);
    }
    synchronize(device);
    const double took = seconds_since(start);
    if (step > 0) seconds[step - 1] = took;
  }
  return static_cast<double>(c.training.batch_size * micro_batches) /
         std::max(median(seconds), 1e-12);
}

MemoryFormatChoice choose_memory_format(const Config& config, const torch::Device& device,
                                        bool data_parallel, const MeasureRate& measure,
                                        int64_t beside_step) {
  MemoryFormatChoice choice;
  choice.format = memory_format_for(config, device);
  if (config.training.memory_format) {
    choice.reason = "set in the config";
    return choice;
  }
  if (device.is_cuda()) {
    choice.reason = "auto: channels_last on CUDA (the layout of docs/gpu.md's measurements)";
    return choice;
  }
  if (config.training.precision == Precision::BF16 && !cpu_has_native_bf16()) {
    choice.reason = "auto: not timed, bf16 is emulated on this CPU (far slower in either layout)";
    return choice;
  }
  if (data_parallel) {
    choice.reason = "auto: not timed with data-parallel training (every rank must choose alike)";
    return choice;
  }
  const MeasureRate rate = measure ? measure : MeasureRate(measure_training_rate);
  Config c = timing_config(config);
  Heartbeat beat("memory_format auto: timing a few steps in each layout", 2, "layouts");
  test_stop_point("layout timing");  // tests: a stop while the layouts are timed
  const CheckpointBudget budget = timing_budget(config);
  const HeldWhileTimed held(budget.bytes, beside_step, device);
  c.training.memory_format = c10::MemoryFormat::Contiguous;
  const Timed contiguous = time_layout(rate, c, device);
  beat.advance(1);
  c.training.memory_format = c10::MemoryFormat::ChannelsLast;
  const Timed channels_last = time_layout(rate, c, device);
  // A layout whose step runs out of memory is no candidate; in both, the run cannot train (the
  // command words the error: the step ran out in each layout), but under checkpointing auto's
  // budget alone its choice goes on in the default layout and says what nothing fits means.
  if (contiguous.out_of_memory && channels_last.out_of_memory) {
    const auto& auto_blocks = config.checkpointing;
    if (auto_blocks.mode() != CheckpointMode::Auto || auto_blocks.blocks())
      std::rethrow_exception(channels_last.out_of_memory);
    choice.reason = "auto: neither layout's step fits " + budget.source + "; contiguous kept";
    return choice;
  }
  choice.contiguous_rate = contiguous.rate;
  choice.channels_last_rate = channels_last.rate;
  choice.timed = true;
  const std::string steps = fmt::format(
      "3 steps of {}{} images", c.training.accumulate_steps > 1 ? "2 micro-batches of " : "",
      c.training.batch_size);
  if (contiguous.out_of_memory || channels_last.out_of_memory) {
    const bool fits_contiguous = !contiguous.out_of_memory;
    choice.format =
        fits_contiguous ? c10::MemoryFormat::Contiguous : c10::MemoryFormat::ChannelsLast;
    choice.reason = fmt::format(
        "auto: {} ran out of memory in its timing step ({}), no candidate; {} timed at {:.1f} "
        "images/s over {}",
        fits_contiguous ? "channels_last" : "contiguous",
        budget.bytes > 0 ? budget.source : std::string("the device's memory"),
        memory_format_name(choice.format),
        fits_contiguous ? choice.contiguous_rate : choice.channels_last_rate, steps);
    return choice;
  }
  choice.format = choice.channels_last_rate > choice.contiguous_rate
                      ? c10::MemoryFormat::ChannelsLast
                      : c10::MemoryFormat::Contiguous;
  choice.reason = fmt::format(
      "auto: timed here over {}, contiguous {:.1f} images/s, channels_last "
      "{:.1f} images/s ({} {:.2f}x faster)",
      steps, choice.contiguous_rate, choice.channels_last_rate, memory_format_name(choice.format),
      std::max(choice.contiguous_rate, choice.channels_last_rate) /
          std::max(std::min(choice.contiguous_rate, choice.channels_last_rate), 1e-12));
  return choice;
}

MemoryFormatChoice decide_memory_format(const Config& config, Decisions& decisions,
                                        const torch::Device& device, bool data_parallel,
                                        const MeasureRate& measure, int64_t beside_step) {
  auto& recorded = decisions.layout;
  const std::string device_type = c10::DeviceTypeName(device.type(), true);
  const std::string step =
      config.training.memory_format ? "" : layout_signature(config, device, beside_step);
  std::string lapsed;
  if (config.training.memory_format) {
    recorded.reset();
  } else if (recorded) {
    if (recorded->device_type == device_type && recorded->chosen_for == step) {
      MemoryFormatChoice kept;
      kept.format = recorded->format;
      kept.reason =
          "auto: as this run decided before (its checkpoint's decisions), not timed again";
      return kept;
    }
    lapsed = "the recorded layout does not hold (it was chosen for " +
             (recorded->chosen_for.empty() ? recorded->device_type : recorded->chosen_for) +
             ", and this run is " + step + ")";
  }
  MemoryFormatChoice choice =
      choose_memory_format(config, device, data_parallel, measure, beside_step);
  choice.lapsed = lapsed;
  if (!config.training.memory_format) {
    recorded = LayoutDecision{choice.format, device_type, choice.reason, step};
  }
  return choice;
}

std::string memory_format_warning(const Config& config, const torch::Device& device) {
  if (!device.is_cpu() || config.training.precision != Precision::BF16 || !cpu_has_native_bf16() ||
      config.training.memory_format != c10::MemoryFormat::Contiguous) {
    return "";
  }
  return "training.memory_format: bf16 in the contiguous layout can be many times slower on a "
         "CPU than channels_last (18x at the torchvision stem on an AMX-BF16 CPU); "
         "training.memory_format: auto times both and keeps the faster";
}

}  // namespace training
