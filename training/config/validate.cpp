#include "training/config/validate.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "training/config/config_yaml.h"
#include "training/platform/device.h"
#include "training/platform/memory.h"

namespace training {

namespace {

// checkpointing.blocks: auto's choice, so only with auto, each a block of the model, once.
template <class Fail>
void check_checkpointing(const CheckpointingOptions& c, const models::ResNetOptions& model,
                         Fail&& fail) {
  if (!c.blocks()) return;
  if (c.mode() != CheckpointMode::Auto) {
    fail(
        "checkpointing.blocks: is the choice of checkpointing.enabled: auto, and enabled is not "
        "auto; set blocks to null, or enabled to auto");
  }
  const std::string problem = blocks_problem(*c.blocks(), model);
  if (!problem.empty()) fail("checkpointing.blocks: " + problem);
}

// output.name a folder's name, output.dir a path, neither with a control character (a line break or
// tab in a folder's name breaks every line and command that names it). `judged(key)`: whether the
// key's value names a folder to make (not a record's own, ConfigRead).
template <class Judged, class Fail>
void check_output(const OutputConfig& output, Judged&& judged, Fail&& fail) {
  if (judged("output.name") &&
      (output.name.find('/') != std::string::npos || output.name == "." || output.name == ".."))
    fail("output.name: expected a folder name without '/', got '" + output.name + "'");
  if (judged("output.dir") && output.dir.empty())
    fail("output.dir: expected a folder path, got an empty string");
  for (const auto& [key, value] :
       {std::pair{"output.dir", &output.dir}, std::pair{"output.name", &output.name}}) {
    if (!judged(key)) continue;
    if (has_control_character(*value) || !is_utf8(*value)) {
      fail(std::string(key) +
           ": expected a folder name in UTF-8 without control characters (a line break, a tab)");
    }
    // Folders a listing shows as another's name: " run" and "run\u00a0" look like "run".
    if (blank_at_an_end(*value)) {
      fail(std::string(key) + ": expected a folder " +
           (value == &output.dir ? "path whose every part" : "name that") +
           " starts and ends with a visible character, got '" + blanks_shown(*value) + "'");
    }
  }
}

// An item of sweep.slurm.options that would change what sbatch itself does with the sweep's job
// array: why the sweep owns it, else "". sbatch (getopt) reads an abbreviated long option
// (`--arr=1-3`), a short one joined to its value (`-a1-3`) or to other short flags (`-vW`).
std::string owned_sbatch_option(const std::string& item) {
  static const std::vector<std::pair<std::string, std::string>> owned = {
      {"array", "the sweep submits its grid as the array (array index = trial id)"},
      {"wrap", "the sweep submits its own script (slurm/array.sh)"},
      {"test-only", "the sweep tries the options with it itself before it submits"},
      {"wait", "the sweep waits for the array itself and cancels it on a stop"},
      {"parsable", "the sweep reads the array's job id with it"},
      {"help", "sbatch would print its help and submit nothing"},
      {"usage", "sbatch would print its usage and submit nothing"},
      {"version", "sbatch would print its version and submit nothing"}};
  if (item == "--") return "'--' ends sbatch's options, and the sweep's script must follow them";
  if (item.rfind("--", 0) == 0) {
    const std::string name = item.substr(2, item.find_first_of("= \t", 2) - 2);
    for (const auto& [option, why] : owned) {
      if (!name.empty() && option.rfind(name, 0) == 0) {
        return "'" + item + "' is sbatch's --" + option + ", which is the sweep's own: " + why;
      }
    }
    return "";
  }
  if (item.size() < 2 || item[0] != '-') return "";
  static const std::string takes_value = "aAbBcCdDeFGiJkLmMnNopqStwx";  // sbatch's getopt string
  static const std::vector<std::pair<char, std::string>> short_owned = {
      {'a', "array"}, {'W', "wait"}, {'h', "help"}, {'V', "version"}};
  for (size_t i = 1; i < item.size(); ++i) {
    for (const auto& [letter, option] : short_owned) {
      if (item[i] != letter) continue;
      const auto found = std::find_if(owned.begin(), owned.end(),
                                      [&](const auto& o) { return o.first == option; });
      return "'" + item + "' is sbatch's -" + std::string(1, letter) + " (--" + option +
             "), which is the sweep's own: " + found->second;
    }
    if (takes_value.find(item[i]) != std::string::npos) break;  // the rest is its value
  }
  return "";
}

// sweep.launcher: slurm, and the keys it does not combine with.
template <class Fail>
void check_launcher(const SweepConfig& sweep, Fail&& fail) {
  for (const auto& item : sweep.slurm.options) {
    if (const std::string owned = owned_sbatch_option(item); !owned.empty()) {
      fail("sweep.slurm.options: " + owned + "; drop it");
    }
  }
  if (sweep.launcher == SweepLauncher::Slurm) {
    if (!sweep.devices.empty()) {
      fail(
          "sweep.devices: not with sweep.launcher: slurm, where each array task gets its GPU "
          "from Slurm (pass --gres=gpu:1 in sweep.slurm.options)");
    }
    if (sweep.find_max) {
      fail(
          "sweep.find_max: not with sweep.launcher: slurm (its search runs one trial after the "
          "other); sweep the batches as a grid, or use the local launcher");
    }
    if (sweep.time_budget > 0) {
      fail(
          "sweep.time_budget: not with sweep.launcher: slurm (the array's tasks are bounded by "
          "--time in sweep.slurm.options)");
    }
  }
}

// sweep.max_batch bounds the find-max search: with it on, at least the grid's largest batch.
template <class Fail>
void check_find_max(const SweepConfig& sweep, Fail&& fail) {
  const auto largest = std::max_element(sweep.batch_sizes.begin(), sweep.batch_sizes.end());
  if (!sweep.find_max || largest == sweep.batch_sizes.end() || *largest <= sweep.max_batch) return;
  const std::string batch = std::to_string(*largest);
  fail("sweep.max_batch: " + std::to_string(sweep.max_batch) + " is below the grid's batch " +
       batch +
       " (sweep.batch_sizes), and with sweep.find_max no batch above sweep.max_batch is "
       "searched; give a sweep.max_batch of at least " +
       batch + ", or a smaller sweep.batch_sizes");
}

}  // namespace

std::string blocks_problem(const std::vector<std::string>& blocks,
                           const models::ResNetOptions& model) {
  const auto names = models::block_names(model.depth());
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (std::find(names.begin(), names.end(), blocks[i]) == names.end()) {
      return "'" + blocks[i] + "' is not a block of " + arch_name(model) + " (" + names.front() +
             " ... " + names.back() + ")";
    }
    if (std::find(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(i), blocks[i]) !=
        blocks.begin() + static_cast<std::ptrdiff_t>(i)) {
      return "'" + blocks[i] + "' is listed twice; list each block once";
    }
  }
  return "";
}

std::string batch_norm_refusal(const Config& config, int64_t batch) {
  const int64_t image_size = config.data.image_size;
  if (batch >= models::smallest_trainable_batch(config.model, image_size)) return "";
  int64_t larger = image_size + 1;  // the smallest image size at which a batch of 1 trains
  while (larger < kMaxImageSize && models::smallest_trainable_batch(config.model, larger) > 1) {
    ++larger;
  }
  return std::to_string(batch) + " does not train: with model.stem " + stem_name(config.model) +
         " at data.image_size " + std::to_string(image_size) +
         ", layer4's feature map is 1x1, and a BatchNorm in training needs more than one value "
         "per channel (batch x height x width); use a batch of 2 or more, or data.image_size " +
         std::to_string(larger) + " or more";
}

void validate(const Config& c, const std::function<std::string(const std::string&)>& origin_for,
              ConfigRead read) {
  auto fail = [&](const std::string& message) {
    const std::string key = message.substr(0, message.find(':'));
    throw ConfigError(origin_for(key) + ": " + message);
  };
  if (!parse_device_spec(c.training.device)) {
    fail("training.device: expected auto, cpu, cuda or cuda:<index>, got '" + c.training.device +
         "'");
  }
  if (c.monitor.tensorboard && !tensorboard_built()) {
    fail(
        "monitor.tensorboard: this build has no TensorBoard writer (protobuf or Boost.CRC was "
        "not found at configure time); set it to false");
  }
  if (c.training.cuda_graph == CudaGraphMode::On) {
    const std::string obstacle = cuda_graph_obstacle(c);
    if (!obstacle.empty()) fail("training.cuda_graph: on " + obstacle);
  }
  check_checkpointing(c.checkpointing, c.model, fail);
  if (c.checkpointing.budget() > 0 && c.memory.limit > 0 &&
      c.checkpointing.budget() > c.memory.limit) {
    const auto [budget, limit] = format_bytes_apart(c.checkpointing.budget(), c.memory.limit);
    fail("checkpointing.budget: " + budget + " is more than memory.limit " + limit +
         "; a budget is what the step may use of the memory there is");
  }
  if (c.optimizer.nesterov() && c.optimizer.momentum() <= 0.0) {
    fail("optimizer.nesterov: true needs optimizer.momentum > 0 (set nesterov: false)");
  }
  if (c.schedule.kind() == ScheduleKind::OneCycle && c.schedule.warmup_epochs() > 0) {
    fail(
        "schedule.warmup_epochs: must be 0 with schedule.name onecycle, which warms up by "
        "itself (see schedule.pct_start)");
  }
  const auto& m = c.schedule.milestones();
  if (!std::is_sorted(m.begin(), m.end()) || std::adjacent_find(m.begin(), m.end()) != m.end()) {
    fail("schedule.milestones: expected strictly increasing epochs");
  }
  check_output(
      c.output,
      [&](const std::string& key) { return read == ConfigRead::New || c.flags.count(key) > 0; },
      fail);
  const auto& window = c.profiler.steps;
  if (window.size() != 2 || window[0] > window[1]) {
    fail("profiler.steps: expected [first, last] optimizer steps with first <= last, e.g. [5, 7]");
  }
  if (c.data.loader == LoaderKind::TorchData && c.data.device_resident) {
    fail(
        "data.device_resident: not with data.loader: torch_data, whose batches are stacked on "
        "the host; use data.loader: batched, or device_resident: false");
  }
  if (c.data.dataset.root().empty() && c.data.dataset.source() != data::Source::Synthetic) {
    fail("data.root: expected a folder path, got an empty string");
  }
  auto once_each = [&](const std::string& key, const auto& values) {
    if (const std::string repeat = config_yaml::first_repeat(values); !repeat.empty())
      fail(key + ": " + repeat);
  };
  once_each("training.accuracy_thresholds", c.training.accuracy_thresholds);
  once_each("sweep.batch_sizes", c.sweep.batch_sizes);
  once_each("sweep.precisions", c.sweep.precisions);
  once_each("sweep.checkpointing", c.sweep.checkpointing);
  once_each("sweep.memory_formats", c.sweep.memory_formats);
  once_each("sweep.accumulate_steps", c.sweep.accumulate_steps);
  once_each("sweep.predict_for", c.sweep.predict_for);
  once_each("sweep.devices", c.sweep.devices);
  once_each("sweep.slurm.options", c.sweep.slurm.options);
  check_launcher(c.sweep, fail);
  check_find_max(c.sweep, fail);
  if (const std::string refused = batch_norm_refusal(c, c.training.batch_size); !refused.empty()) {
    fail("training.batch_size: " + refused);
  }
  for (const int64_t batch : c.sweep.batch_sizes) {
    if (const std::string refused = batch_norm_refusal(c, batch); !refused.empty()) {
      fail("sweep.batch_sizes: " + refused);
    }
  }
}

}  // namespace training
