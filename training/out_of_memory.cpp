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

std::string evaluation_remedies(const Config& config, int64_t limit, bool one_image) {
  // Where what the run holds leaves less than one image needs, no batch helps.
  if (std::string held = weights_alone_remedy(config, limit); !held.empty()) return held + ".";
  if (!one_image) {  // making the evaluation batch
    return "a smaller training.eval_batch_size (now " +
           std::to_string(config.training.eval_batch_size) +
           "; evaluation needs no gradients and its batch size does not change the result).";
  }
  return "evaluation went down to one image per forward pass, beside what training holds (the "
         "weights, their gradients" +
         (config.optimizer.momentum() > 0 ? std::string(", the optimizer's momentum") : "") +
         (config.training.ema_decay > 0 ? std::string(", the weight average") : "") +
         (config.training.precision != Precision::FP32
              ? std::string(", autocast's copies of the weights")
              : "") +
         "): more memory (memory.limit)" +
         (config.data.device_resident ? ", data.device_resident: false" : "") +
         " or a smaller model.arch.";
}

// A training step's remedies. `none_fits`: what a step measured at the smallest batch with every
// block recomputed showed, above the limit; then no smaller batch, checkpointing or --find-max.
std::string training_remedies(const Config& config, int64_t limit, const std::string& none_fits) {
  // Where the weights, gradients and momentum leave less than one image needs, nothing helps.
  if (std::string held = weights_alone_remedy(config, limit); !held.empty()) return held + ".";
  Config at = config;
  if (!none_fits.empty())
    at.training.batch_size = models::smallest_trainable_batch(config.model, config.data.image_size);
  // No smaller batch than the smallest that trains (training.batch_size 1 is refused where
  // BatchNorm's last map is 1x1: it was advised, then refused).
  std::string remedies = step_remedies(at, limit);
  // Not where it cannot fit, nor with a captured step (training.cuda_graph: on refuses it).
  if (none_fits.empty() && !config.checkpointing.enabled() &&
      config.training.cuda_graph != CudaGraphMode::On &&
      every_block_recomputed_can_fit(config, limit))
    remedies += ", checkpointing.enabled: auto or true";
  if (config.data.device_resident) remedies += ", data.device_resident: false";
  const std::string text = remedies.empty() ? "more memory (memory.limit)" : remedies.substr(2);
  if (!none_fits.empty()) {
    return text + (remedies.empty() ? "" : ", or more memory (memory.limit)") +
           "; no smaller batch or checkpointing fits: " + none_fits + ".";
  }
  // The sweep needs more than its flag to run (the run's config, its limit): named, not typed out;
  // where no smaller batch trains, it finds none.
  if (!smaller_batch_trains(config)) return text + ".";
  return text + "; a sweep's --find-max finds the largest batch that fits (" + advised_program() +
         " sweep --help).";
}

std::string worded(const LineParts& line, const Config& config, const OutOfMemoryWhere& where) {
  switch (where.phase) {
    case OutOfMemoryWhere::Setup:
      return line.head + setup_remedies(config) + line.intact;
    case OutOfMemoryWhere::Evaluation:
      return line.head + evaluation_remedies(config, line.limit, where.one_image) + line.intact;
    case OutOfMemoryWhere::Training:
      break;
  }
  return line.head + training_remedies(config, line.limit, "") + line.intact;
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
  if (where.phase != OutOfMemoryWhere::Training || !smaller_batch_trains(config) ||
      !weights_alone_remedy(config, line.limit).empty()) {
    throw OutOfMemory(message);
  }
  throw SmallerBatchOutOfMemory(message, line.head, line.intact, config, device, line.limit);
}

std::string confirmed_out_of_memory(const SmallerBatchOutOfMemory& e,
                                    const MeasureBlocks& measure) {
  Config smallest = e.config;
  smallest.training.batch_size =
      models::smallest_trainable_batch(e.config.model, e.config.data.image_size);
  const int64_t batch = smallest.training.batch_size;
  const std::string step =
      "a step of " + (batch == 1 ? std::string("one image") : std::to_string(batch) + " images") +
      " with every block recomputed";
  std::string none_fits;
  try {
    spdlog::info("out of memory: measuring {} to tell whether a smaller batch fits", step);
    const int64_t smallest_peak =
        choose_blocks(measure ? measure(smallest, e.device) : measure_blocks(smallest, e.device),
                      e.limit)
            .smallest_peak;
    if (smallest_peak <= e.limit) return e.what();
    const auto [peak, limit] = format_bytes_apart(smallest_peak, e.limit);
    none_fits = step + " peaks at " + peak + ", above the limit " + limit + " (measured)";
  } catch (const std::exception& measuring) {
    if (!is_out_of_memory(measuring)) return e.what();  // a stop: the line as it was
    none_fits = step + " runs out of memory too (measured)";
  }
  return e.head + training_remedies(e.config, e.limit, none_fits) + e.intact;
}

std::string measured_error_line(const Config& config, const std::exception& error) {
  const bool limited = config.memory.limit > 0 && is_out_of_memory(error) &&
                       !dynamic_cast<const OutOfMemory*>(&error);  // one already worded
  return error_line(error) + (limited ? " (memory.limit)" : "");
}

}  // namespace training
