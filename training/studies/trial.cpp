#include "training/studies/trial.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>

#include "data/dataset.h"
#include "training/cards/cards.h"
#include "training/out_of_memory.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/parts/memory_format.h"
#include "training/parts/setup.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/distributed.h"
#include "training/platform/duration.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/network.h"
#include "training/platform/statistics.h"
#include "training/run/output_file.h"
#include "training/step/graphed_step.h"
#include "training/step/optim.h"
#include "training/step/step.h"

namespace training {

const char* status_name(TrialStatus status) {
  static const char* const names[] = {"ok", "oom", "error"};
  return names[static_cast<int>(status)];
}

nlohmann::ordered_json to_json(const TrialResult& r) {
  return {{"status", status_name(r.status)},
          {"message", r.message},
          {"peak_allocated_bytes", r.peak_allocated_bytes},
          {"peak_reserved_bytes", r.peak_reserved_bytes},
          {"steady_peak_allocated_bytes", optional_json(r.steady_peak_allocated_bytes)},
          {"steady_peak_reserved_bytes", optional_json(r.steady_peak_reserved_bytes)},
          {"median_step_seconds", optional_json(r.median_step_seconds)},
          {"images_per_second", optional_json(r.images_per_second)},
          {"steps", r.steps},
          {"replayed_steps", r.replayed_steps},
          {"outside_allocator_bytes", r.outside_allocator_bytes},
          {"recomputed_blocks", optional_json(r.recomputed_blocks)},
          {"predicted_peak_bytes",
           r.recomputed_blocks ? nlohmann::ordered_json(r.predicted_peak_bytes) : nullptr},
          {"host", r.host},
          {"job_id", r.job_id},
          {"array_index", r.array_index}};
}

TrialResult trial_from_json(const nlohmann::json& j) {
  TrialResult r;
  const auto status = read_as<std::string>(j, "status");
  if (status != "ok" && status != "oom" && status != "error") {
    throw std::invalid_argument("status: '" + status + "' is not ok, oom or error");
  }
  r.status = status == "ok"    ? TrialStatus::Ok
             : status == "oom" ? TrialStatus::OutOfMemory
                               : TrialStatus::Error;
  r.message = read_as<std::string>(j, "message");
  // No peak is larger than the largest card (cards.h): a sum of peaks cannot overflow.
  r.peak_allocated_bytes = read_at_least<int64_t>(j, "peak_allocated_bytes", 0, kLargestCard);
  r.peak_reserved_bytes = read_at_least<int64_t>(j, "peak_reserved_bytes", 0, kLargestCard);
  // The measured steps' figures: null where none completed, never for an ok trial.
  auto measured = [&](const char* key, auto low, auto high) {
    using T = decltype(low);
    if (!j.at(key).is_null()) return std::optional<T>(read_at_least<T>(j, key, low, high));
    if (r.status == TrialStatus::Ok) {
      throw std::out_of_range(std::string(key) + ": null, but an ok trial measured its steps");
    }
    return std::optional<T>();
  };
  const double no_end = std::numeric_limits<double>::max();
  r.steady_peak_allocated_bytes = measured("steady_peak_allocated_bytes", int64_t{0}, kLargestCard);
  r.steady_peak_reserved_bytes = measured("steady_peak_reserved_bytes", int64_t{0}, kLargestCard);
  r.median_step_seconds = measured("median_step_seconds", 0.0, no_end);
  r.images_per_second = measured("images_per_second", 0.0, no_end);
  // An ok trial measured at least one step; one that failed may have none.
  r.steps = read_at_least<int64_t>(j, "steps", r.status == TrialStatus::Ok ? 1 : 0);
  r.replayed_steps = read_at_least<int64_t>(j, "replayed_steps", 0, r.steps);
  r.outside_allocator_bytes = read_at_least<int64_t>(j, "outside_allocator_bytes", 0, kLargestCard);
  // A list for checkpointing auto; null (its predicted peak too) where auto chose nothing.
  if (!j.at("recomputed_blocks").is_null())
    r.recomputed_blocks = read_as<std::vector<std::string>>(j, "recomputed_blocks");
  if (!j.at("predicted_peak_bytes").is_null())
    r.predicted_peak_bytes = read_at_least<int64_t>(j, "predicted_peak_bytes", 0, kLargestCard);
  // Where it ran (absent from the sweeps written before issue 54).
  r.host = j.value("host", std::string());
  r.job_id = j.value("job_id", std::string());
  r.array_index = j.value("array_index", int64_t{-1});
  return r;
}

namespace {

// The samples of the run's training split: as the config gives them (synthetic data,
// data.train_limit), else counted in data.root; 0 where there is no data to count.
int64_t training_samples(const Config& config) {
  if (const int64_t known = train_images_at_most(config.data); known > 0) return known;
  try {
    return data::split_size(config.data.dataset, data::SplitName::Train);
  } catch (const data::DataError&) {
    return 0;
  }
}

// Synthetic images for the run's own loader, so that a trial holds on the device what training's
// steady steps hold and the largest batch that fits a trial also trains: enough batches that the
// queue stays full through `micro_batches`; with data.device_resident on CUDA, and on the CPU
// (whose epoch order the loader holds), at least the run's training split (one image repeated: a
// view, host data not counted).
data::Split trial_split(const Config& config, const torch::Device& device, int64_t resident,
                        int64_t micro_batches) {
  const int64_t batches = micro_batches + prefetch_for(config.data, device.is_cuda()) + 1;
  const int64_t drawn = std::max(config.training.batch_size * batches, resident);
  const int64_t size = std::max(drawn, device.is_cpu() ? training_samples(config) : 0);
  TrackingCpuAllocator::HostData host_data;
  data::Split split = data::make_synthetic(drawn, static_cast<uint64_t>(config.training.seed));
  split.labels.remainder_(config.model.num_classes());
  if (size > drawn) {
    split.images = split.images.narrow(0, 0, 1).expand(
        {size, split.images.size(1), split.images.size(2), split.images.size(3)});
    split.labels = split.labels.narrow(0, 0, 1).expand({size});
  }
  return split;
}

// The micro-batches a trial of `warmup` + `measure` steps draws, at most: a graphed trial's
// warm-up (measure_trial) and a one-step trial's included.
int64_t drawn_micro_batches(const Config& config, const torch::Device& device, int64_t warmup,
                            int64_t measure) {
  const bool may_graph = device.is_cuda() && config.training.cuda_graph != CudaGraphMode::Off;
  const int64_t steps =
      std::max({warmup, may_graph ? GraphedStep::kWarmupSteps + 1 : 0, int64_t{1}}) + measure;
  return steps * config.training.accumulate_steps;
}

// The test loader's split as training holds it with data.device_resident on CUDA (`size` images,
// never read); empty where `size` is 0.
data::Split held_test_split(int64_t size, const torch::Device& device) {
  if (size == 0) return {};
  return {torch::empty({size, data::kChannels, data::kImageSide, data::kImageSide},
                       torch::TensorOptions(torch::kUInt8).device(device)),
          torch::empty({size}, torch::TensorOptions(torch::kInt64).device(device))};
}

// sweep.data_parallel: the rank's reducer and its buckets, in a group of one, on loopback whatever
// the launch environment says (torchrun's store, GLOO_SOCKET_IFNAME). None otherwise.
std::unique_ptr<ProcessGroup> trial_group(const Config& config, const torch::Device& device) {
  if (!config.sweep.data_parallel) return nullptr;
  LaunchEnv one;
  one.master_port = free_loopback_port();
  DistributedOptions options = config.distributed;
  options.interface.clear();
  return join_group(one, options, device);
}

// The trial's peaks (the warm-up's and the measured steps', these only where one completed,
// `measured`) and what lies outside the allocator.
void record_memory(TrialResult& result, const torch::Device& device,
                   const MemoryStats& warmup_peaks, bool measured) {
  const MemoryStats memory = memory_stats(device);
  try {
    result.outside_allocator_bytes = memory_outside_allocator(device);
  } catch (const std::exception& e) {
    spdlog::warn("memory outside the allocator not measured: {}", error_line(e));
  }
  if (measured) {
    result.steady_peak_allocated_bytes = memory.peak_allocated;
    result.steady_peak_reserved_bytes = memory.peak_reserved;
  }
  result.peak_allocated_bytes = std::max(memory.peak_allocated, warmup_peaks.peak_allocated);
  result.peak_reserved_bytes = std::max(memory.peak_reserved, warmup_peaks.peak_reserved);
}

// The measured steps' median time and images/s (`images` a step); none where none completed.
void record_times(TrialResult& result, const std::vector<double>& step_seconds, int64_t images) {
  if (step_seconds.empty()) return;
  const double seconds = median(step_seconds);
  result.median_step_seconds = seconds;
  result.images_per_second = static_cast<double>(images) / seconds;
}

// checkpointing auto: this batch's choice under the sweep's budget less what the trial's loaders
// hold beside the step, as in training; the config with it, the blocks and prediction in `result`.
Config with_auto_blocks(const Config& config, const torch::Device& device, const data::Split& split,
                        int64_t test_size, TrialResult& result) {
  Decisions decisions;
  resolve_checkpointing(config, decisions, device, /*data_parallel=*/false, {},
                        config.checkpointing.mode() == CheckpointMode::Auto
                            ? held_beside_step(config, device, split, test_size)
                            : 0);
  if (auto chosen = auto_blocks(config, decisions)) {
    std::tie(result.recomputed_blocks, result.predicted_peak_bytes) = *std::move(chosen);
  }
  return decided(config, decisions);
}

// The host, and a Slurm array task's job and index, from the environment Slurm gives the task
// (both test nodes of one machine share its host name: Slurm's node name tells them apart).
void where_it_ran(TrialResult& result) {
  auto variable = [](const char* name) {
    const char* value = std::getenv(name);
    return std::string(value ? value : "");
  };
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  result.host = variable("SLURMD_NODENAME").empty() ? name : variable("SLURMD_NODENAME");
  result.job_id = variable("SLURM_ARRAY_JOB_ID");
  if (const std::string index = variable("SLURM_ARRAY_TASK_ID"); !index.empty()) {
    result.array_index = std::stoll(index);
  }
}

}  // namespace

data::SplitSizes resident_splits(const Config& config, const torch::Device& device) {
  if (!device.is_cuda() || !config.data.device_resident) return {};
  if (config.data.dataset.source() != data::Source::Synthetic) {  // a large folder takes seconds
    spdlog::info("data.device_resident: counting both splits in {} (held by each trial)",
                 config.data.dataset.root());
  }
  return data::split_sizes(config.data.dataset,
                           "data.device_resident: a trial on CUDA holds both splits, counted");
}

TrialResult measure_trial(const Config& given, int64_t warmup_steps, int64_t measure_steps) {
  Config config = given;
  config.memory.snapshot = false;  // a trial records no allocator history
  const torch::Device device = set_up_device(config);
  TrialResult result;
  std::vector<double> step_seconds;
  MemoryStats warmup_peaks;  // over the warm-up steps (the first step among them)
  try {
    const std::unique_ptr<ProcessGroup> group = trial_group(config, device);
    const data::SplitSizes resident = resident_splits(config, device);
    const data::Split split =
        trial_split(config, device, resident.train,
                    drawn_micro_batches(config, device, warmup_steps, measure_steps));
    config = with_auto_blocks(config, device, split, resident.test, result);
    StepParts parts = build_measured_step_parts(config, device, group.get());
    const auto averager = group ? group->gradient_averager(*parts.model) : nullptr;
    const StepOptions options = step_options(config)
                                    .averager(averager.get())
                                    .accumulate_steps(config.training.accumulate_steps);
    parts.model->train();
    // A graphed trial measures replays: its warm-up covers the graph's warm-up and capture.
    std::unique_ptr<GraphedStep> graphed;
    if (use_cuda_graph(config, device, /*data_parallel=*/group != nullptr)) {
      graphed = std::make_unique<GraphedStep>(
          parts, options, device,
          /*eager_if_capture_fails=*/config.training.cuda_graph == CudaGraphMode::Auto);
      warmup_steps = std::max(warmup_steps, GraphedStep::kWarmupSteps + 1);
    }
    // What fits is judged on a step that holds the momentum the first step makes.
    if (warmup_steps + measure_steps < 2) warmup_steps = 1;
    synchronize(device);
    reset_peak_memory(device);
    const auto loader = make_loader(split, config, device, /*train=*/true, /*group=*/nullptr);
    const data::Split test = held_test_split(resident.test, device);
    int64_t epoch = 1;
    loader->start_epoch(epoch);
    // The running sums training keeps on the device beside its steps.
    StepSums running{torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device)),
                     torch::zeros({}, torch::TensorOptions(torch::kInt64).device(device))};
    // A step is an optimizer step: training.accumulate_steps micro-batches from the loader.
    const int64_t micro_batches = config.training.accumulate_steps;
    for (int64_t step = 0; step < warmup_steps + measure_steps; ++step) {
      if (step == warmup_steps && warmup_steps > 0) {
        warmup_peaks = memory_stats(device);
        reset_peak_memory(device);  // the measured steps' own peak from here
      }
      // The step alone is timed; the loader prepares the next batches meanwhile, as in training.
      std::chrono::steady_clock::time_point start;
      std::vector<torch::Tensor> buffers_at_start;  // held through the step, as training does
      StepSums sums;
      for (int64_t micro = 0; micro < micro_batches; ++micro) {
        auto batch = data::next_batch_across_epochs(*loader, epoch);
        if (micro == 0) start = std::chrono::steady_clock::now();
        if (micro == 0 && micro_batches > 1 && !group)
          buffers_at_start = copy_buffers(*parts.model);
        sums.add(graphed ? graphed->run(batch->images, batch->labels)
                         : train_step(parts, batch->images, batch->labels, options, micro),
                 batch->labels);
      }
      running.loss_sum += sums.loss_sum;
      running.correct += sums.correct;
      synchronize(device);
      const double seconds = seconds_since(start);
      if (step >= warmup_steps) {
        step_seconds.push_back(seconds);
        if (graphed && graphed->last_run_replayed()) ++result.replayed_steps;
      }
      ++result.steps;
    }
    result.status = TrialStatus::Ok;
  } catch (const std::exception& e) {
    result.status = is_out_of_memory(e) ? TrialStatus::OutOfMemory : TrialStatus::Error;
    result.message = measured_error_line(config, e);
  }
  record_memory(result, device, warmup_peaks, /*measured=*/!step_seconds.empty());
  record_times(result, step_seconds, config.training.batch_size * config.training.accumulate_steps);
  return result;
}

int child_trial_main(const std::string& config_path, const std::string& result_path) {
  check_not_an_input(result_path, "--result", config_path, "--config");
  const Config config = load_config(config_path);
  TrialResult result = measure_trial(config, config.sweep.warmup_steps, config.sweep.measure_steps);
  where_it_ran(result);
  write_file_atomically(result_path, to_json(result).dump(2) + "\n");
  if (result.status == TrialStatus::Ok) return kExitOk;
  spdlog::error("{}", result.message);
  return result.status == TrialStatus::OutOfMemory ? kExitOutOfMemory : kExitInternalError;
}

}  // namespace training
