#include "training/out_of_memory.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <regex>

#include "models/resnet.h"
#include "training/parts/components.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"

namespace training {

namespace {

// The line around its remedies: where, the request, the peak against the limit; and whether the
// last checkpoint is intact.
struct LineParts {
  std::string head, intact;
  int64_t limit = 0;
};

LineParts line_parts(const Config& config, const torch::Device& device,
                     const OutOfMemoryWhere& where, const std::string& allocator_message) {
  const MemoryStats memory = memory_stats(device);
  const int64_t limit = config.memory.limit > 0 ? config.memory.limit : total_memory(device);
  // Both the CUDA caching allocator and ours say how much the failed request was.
  static const std::regex kRequest("[Tt]ried to allocate ([0-9.]+ [KMGT]?i?B)");
  std::smatch request;
  const std::string tried = std::regex_search(allocator_message, request, kRequest)
                                ? " (tried to allocate " + request[1].str() + ")"
                                : "";
  // The peak against the limit: never written alike where they differ.
  const auto [peak, limit_text] =
      format_bytes_apart(std::max(memory.peak_allocated, memory.peak_reserved), limit);
  return {"out of memory on " + device.str() + " " + where.text + tried + ": peak " + peak +
              ", limit " + limit_text +
              (config.memory.limit > 0 ? " (memory.limit)" : " (device memory)") + ". Remedies: ",
          where.checkpointed ? " The last checkpoint is intact." : "", limit};
}

std::string setup_remedies(const Config& config) {
  return "the model, its optimizer state" +
         std::string(config.data.device_resident ? " and the device-resident data" : "") +
         " must fit before the first step: more memory (memory.limit)" +
         (config.data.device_resident ? ", data.device_resident: false" : "") +
         " or a smaller model.arch.";
}

std::string evaluation_remedies(const Config& config, int64_t limit, bool one_image,
                                bool gradients) {
  // Where what the run holds leaves less than one image needs, no batch helps.
  if (std::string held = weights_alone_remedy(config, limit); !held.empty()) return held + ".";
  if (!one_image) {  // making the evaluation batch
    return "a smaller training.eval_batch_size (now " +
           std::to_string(config.training.eval_batch_size) +
           "; evaluation needs no gradients and its batch size does not change the result).";
  }
  // The gradients are freed before the evaluation, but a graph-captured step's (trainer.h).
  return "evaluation went down to one image per forward pass, beside what training holds (the "
         "weights" +
         (gradients ? std::string(", their gradients") : "") +
         (config.optimizer.momentum() > 0 ? std::string(", the optimizer's momentum") : "") +
         (config.training.ema_decay > 0 ? std::string(", the weight average") : "") +
         (config.training.precision != Precision::FP32
              ? std::string(", autocast's copies of the weights")
              : "") +
         "): more memory (memory.limit)" +
         (config.training.precision != Precision::FP32 ? ", training.precision: fp32" : "") +
         image_size_remedy(config) +
         (config.data.device_resident ? ", data.device_resident: false" : "") +
         " or a smaller model.arch.";
}

// Whether checkpointing is a remedy to consider: not on already, not with a captured step
// (training.cuda_graph: on refuses it), and not where it cannot fit (a lower bound).
bool checkpointing_can_help(const Config& config, int64_t limit) {
  return !config.checkpointing.enabled() && config.training.cuda_graph != CudaGraphMode::On &&
         every_block_recomputed_can_fit(config, limit);
}

// What the steps measured after out of memory showed (confirmed_out_of_memory): whether a smaller
// batch's plain step fits the limit, a smaller batch with every block recomputed, and the run's
// batch with every block recomputed (within the limit; within checkpointing auto's budget too);
// `said`: the smallest batch's figure, where none of them fits.
struct Measured {
  bool smaller = false, smaller_recomputed = false, recomputed = false, in_auto_budget = false;
  std::string said;
};

// A training step's remedies; `measured`, where given, decides the batch and checkpointing.
std::string training_remedies(const Config& config, int64_t limit, const Measured* measured) {
  // Where the weights, gradients and momentum leave less than one image needs, nothing helps.
  if (std::string held = weights_alone_remedy(config, limit); !held.empty()) return held + ".";
  const bool smaller = measured ? measured->smaller : smaller_batch_trains(config);
  Config at = config;
  if (!smaller)
    at.training.batch_size = models::smallest_trainable_batch(config.model, config.data.image_size);
  // No smaller batch than the smallest that trains (training.batch_size 1 is refused where
  // BatchNorm's last map is 1x1: it was advised, then refused).
  std::string remedies = step_remedies(at, limit);
  if (measured ? measured->recomputed : checkpointing_can_help(config, limit)) {
    remedies += measured && !measured->in_auto_budget ? ", checkpointing.enabled: true"
                                                      : ", checkpointing.enabled: auto or true";
  } else if (measured && measured->smaller_recomputed && !smaller) {
    remedies += ", a smaller training.batch_size with checkpointing.enabled: true";
  }
  if (config.data.device_resident) remedies += ", data.device_resident: false";
  const std::string text = remedies.empty() ? "more memory (memory.limit)" : remedies.substr(2);
  if (measured && !measured->said.empty()) {
    return text + (remedies.empty() ? "" : ", or more memory (memory.limit)") +
           "; no smaller batch or checkpointing fits: " + measured->said + ".";
  }
  // The sweep needs more than its flag to run (the run's config, its limit): named, not typed out;
  // where no smaller batch trains, it finds none.
  if (!smaller) return text + ".";
  return text + "; a sweep's --find-max finds the largest batch that fits (" + advised_program() +
         " sweep --help).";
}

std::string worded(const LineParts& line, const Config& config, const OutOfMemoryWhere& where) {
  switch (where.phase) {
    case OutOfMemoryWhere::Setup:
      return line.head + setup_remedies(config) + line.intact;
    case OutOfMemoryWhere::Evaluation:
      return line.head + evaluation_remedies(config, line.limit, where.one_image, where.gradients) +
             line.intact;
    case OutOfMemoryWhere::Training:
      break;
  }
  return line.head + training_remedies(config, line.limit, nullptr) + line.intact;
}

}  // namespace

std::string out_of_memory_message(const Config& config, const torch::Device& device,
                                  const OutOfMemoryWhere& where,
                                  const std::string& allocator_message) {
  return worded(line_parts(config, device, where, allocator_message), config, where);
}

void throw_out_of_memory(const Config& config, const torch::Device& device,
                         const OutOfMemoryWhere& where, const std::string& allocator_message) {
  const LineParts line = line_parts(config, device, where, allocator_message);
  const std::string message = worded(line, config, where);
  if (where.phase != OutOfMemoryWhere::Training ||
      !weights_alone_remedy(config, line.limit).empty() ||
      (!smaller_batch_trains(config) && !checkpointing_can_help(config, line.limit))) {
    throw OutOfMemory(message);
  }
  throw UnconfirmedOutOfMemory(message, line.head, line.intact, config, device, line.limit);
}

std::string confirmed_out_of_memory(const UnconfirmedOutOfMemory& e, const MeasureBlocks& measure) {
  const int64_t smallest =
      models::smallest_trainable_batch(e.config.model, e.config.data.image_size);
  const int64_t batch = e.config.training.batch_size;
  // A step with every block recomputed at `at` images, measured (nullopt: out of memory too).
  const auto measured_at = [&](int64_t at) -> std::optional<CheckpointChoice> {
    Config config = e.config;
    config.training.batch_size = at;
    try {
      return choose_blocks(measure ? measure(config, e.device) : measure_blocks(config, e.device),
                           e.limit);
    } catch (const std::exception& error) {
      if (!is_out_of_memory(error)) throw;
      return std::nullopt;
    }
  };
  const std::string step =
      "a step of " +
      (smallest == 1 ? std::string("one image") : std::to_string(smallest) + " images") +
      " with every block recomputed";
  Measured m;
  try {
    spdlog::info(
        "out of memory: measuring {} to tell whether a smaller batch or checkpointing fits", step);
    const auto small = measured_at(smallest);
    const bool small_recomputed_fits = small && small->smallest_peak <= e.limit;
    m.smaller = smallest < batch && small && small->plain_peak <= e.limit;
    m.smaller_recomputed = smallest < batch && small_recomputed_fits;
    // The run's own batch, where a smaller one recomputed fits (above it, no larger batch does).
    if (checkpointing_can_help(e.config, e.limit) && small_recomputed_fits) {
      const auto own = smallest == batch ? small : measured_at(batch);
      m.recomputed = own && own->smallest_peak <= e.limit;
      int64_t budget = 0;
      try {
        budget = checkpointing_budget(e.config, e.device).bytes;
      } catch (const std::exception&) {  // none (the CPU without memory.limit): auto is refused
      }
      m.in_auto_budget = m.recomputed && own->smallest_peak <= budget;
    }
    if (!small_recomputed_fits && small) {
      const auto [peak, limit] = format_bytes_apart(small->smallest_peak, e.limit);
      m.said = step + " peaks at " + peak + ", above the limit " + limit + " (measured)";
    } else if (!small) {
      m.said = step + " runs out of memory too (measured)";
    }
  } catch (const std::exception&) {  // a stop, or a failure other than out of memory
    return e.what();
  }
  return e.head + training_remedies(e.config, e.limit, &m) + e.intact;
}

std::string measured_error_line(const Config& config, const std::exception& error) {
  const bool limited = config.memory.limit > 0 && is_out_of_memory(error) &&
                       !dynamic_cast<const OutOfMemory*>(&error);  // one already worded
  return error_line(error) + (limited ? " (memory.limit)" : "");
}

}  // namespace training
