#include "training/out_of_memory.h"

#include <algorithm>
#include <regex>

#include "models/resnet.h"
#include "training/parts/components.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"

namespace training {

std::string out_of_memory_message(const Config& config, const torch::Device& device,
                                  const OutOfMemoryWhere& where,
                                  const std::string& allocator_message) {
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
  std::string message = "out of memory on " + device.str() + " " + where.text + tried + ": peak " +
                        peak + ", limit " + limit_text +
                        (config.memory.limit > 0 ? " (memory.limit)" : " (device memory)") +
                        ". Remedies: ";
  const std::string intact = where.checkpointed ? " The last checkpoint is intact." : "";
  switch (where.phase) {
    case OutOfMemoryWhere::Setup:
      return message + "the model, its optimizer state" +
             (config.data.device_resident ? " and the device-resident data" : "") +
             " must fit before the first step: more memory (memory.limit)" +
             (config.data.device_resident ? ", data.device_resident: false" : "") +
             " or a smaller model.arch." + intact;
    case OutOfMemoryWhere::Evaluation:
      // Where what the run holds leaves less than one image needs, no batch helps.
      if (std::string held = weights_alone_remedy(config, limit); !held.empty())
        return message + held + "." + intact;
      if (!where.one_image) {  // making the evaluation batch
        return message + "a smaller training.eval_batch_size (now " +
               std::to_string(config.training.eval_batch_size) +
               "; evaluation needs no gradients and its batch size does not change the result)." +
               intact;
      }
      return message +
             "evaluation went down to one image per forward pass, beside what training holds (the "
             "weights, their gradients" +
             (config.optimizer.momentum() > 0 ? std::string(", the optimizer's momentum") : "") +
             (config.training.ema_decay > 0 ? std::string(", the weight average") : "") +
             (config.training.precision != Precision::FP32
                  ? std::string(", autocast's copies of the weights")
                  : "") +
             "): more memory (memory.limit)" +
             (config.data.device_resident ? ", data.device_resident: false" : "") +
             " or a smaller model.arch." + intact;
    case OutOfMemoryWhere::Training:
      break;
  }
  // Where the weights, gradients and momentum leave less than one image needs, nothing else helps.
  if (std::string held = weights_alone_remedy(config, limit); !held.empty())
    return message + held + "." + intact;
  // No smaller batch than the smallest that trains (training.batch_size 1 is refused where
  // BatchNorm's last map is 1x1: it was advised, then refused).
  std::string remedies = step_remedies(config, limit);
  // Not where it cannot fit, nor with a captured step (training.cuda_graph: on refuses it).
  if (!config.checkpointing.enabled() && config.training.cuda_graph != CudaGraphMode::On &&
      every_block_recomputed_can_fit(config, limit))
    remedies += ", checkpointing.enabled: auto or true";
  if (config.data.device_resident) remedies += ", data.device_resident: false";
  message += remedies.empty() ? "more memory (memory.limit)" : remedies.substr(2);
  // The sweep needs more than its flag to run (the run's config, its limit): named, not typed out;
  // where no smaller batch trains, it finds none.
  if (!smaller_batch_trains(config)) return message + "." + intact;
  return message + "; a sweep's --find-max finds the largest batch that fits (" +
         advised_program() + " sweep --help)." + intact;
}

std::string measured_error_line(const Config& config, const std::exception& error) {
  const bool limited = config.memory.limit > 0 && is_out_of_memory(error) &&
                       !dynamic_cast<const OutOfMemory*>(&error);  // one already worded
  return error_line(error) + (limited ? " (memory.limit)" : "");
}

}  // namespace training
