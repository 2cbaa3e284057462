// `train plan`: without --from, its small sweep first; then the plan made (plan.cpp) and printed
// (plan_report.cpp); --target-batch checked against what the sweep measures (or will).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>

#include "training/cards/card_prediction.h"
#include "training/parts/memory_format.h"
#include "training/parts/setup.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/platform/stop_signal.h"
#include "training/run/output_dir.h"
#include "training/run/run_dir.h"
#include "training/studies/plan.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// The small sweep `train plan` runs without --from; returns its directory (empty when stopped).
fs::path run_small_sweep(const PlanRequest& request) {
  const Config config = load_config(request.config_path, request.overrides);
  const torch::Device device = with_key_origins(config, [&] { return training_device(config); });
  if (request.card) held_data(config);  // data.device_resident's data missing: refused first
  // A target batch no batch of the grid can make, or more than the training images: refused too.
  if (request.target_batch > 0) {
    check_target_batch(request.target_batch, config.sweep.batch_sizes,
                       train_images_at_most(config.data), "the small sweep will measure");
  }
  const std::string precisions = has_fast_bf16(device) ? "[fp32, bf16]" : "[fp32]";
  SweepRequest sweep;
  sweep.config_path = request.config_path;
  const std::string plan = "train plan";  // what error messages name for these
  sweep.overrides = {
      {"sweep.precisions=" + precisions, plan},
      {"sweep.checkpointing=[false, true]", plan},
      {"sweep.memory_formats=[" + memory_format_name(memory_format_for(config, device)) + "]",
       plan},
      {"sweep.warmup_steps=1", plan},
      {"sweep.measure_steps=2", plan},
      {"sweep.find_max=false", plan},
      {"sweep.time_budget=" + std::to_string(request.budget_seconds), "--budget"}};
  // The user's own --set last: they may change the grid.
  sweep.overrides.insert(sweep.overrides.end(), request.overrides.begin(), request.overrides.end());
  // What no setting of its grid can do, refused before it (a --target-batch is checked above).
  const Config grid = load_config(request.config_path, sweep.overrides);
  // A card whose allocator gets less than the weights, gradients and momentum (its headroom, what
  // lies outside the allocator: given, or, where the sweep will not measure it, assumed as
  // make_plan assumes it): refused first.
  if (request.overhead || !device.is_cuda()) {
    refuse_no_room(
        request.card, request.memory, request.headroom,
        request.overhead.value_or(request.card ? beside_tensors(*request.card).outside_allocator
                                               : kOutsideAllocatorBytes),
        &grid);
  }
  const auto& [batches, steps] = std::tie(grid.sweep.batch_sizes, grid.sweep.accumulate_steps);
  const std::string measured = "setting the small sweep will measure",
                    flag = request.card ? "--card" : "--memory";
  if (request.target_batch == 0) {
    refuse_too_few_images(*std::min_element(batches.begin(), batches.end()) *
                              *std::min_element(steps.begin(), steps.end()),
                          train_images_at_most(grid.data), flag, measured);
  }
  if (const std::string why = request.card ? request.card->unsupported(grid.sweep.precisions) : "";
      !why.empty()) {
    throw UserError("--card: no " + measured + " can run on " + request.card->name + " (" +
                    format_bytes(request.card->memory_bytes) + "): " + why);
  }
  const OutputFolder out =
      output_folder(request.output_dir, config, "plan-" + arch_name(config.model), false);
  sweep.output_dir = out.path.string();
  sweep.executable = request.executable;
  // The sweep's own checks too, before the line that announces it.
  check_output_dir(sweep.output_dir, OutputKind::Sweep, out.named_by);
  with_key_origins(grid, [&] { check_sweep(grid, device); });
  spdlog::info(
      "plan: no --from, so a small sweep runs first in {}: precisions {}, checkpointing off and "
      "on, batch sizes from sweep.batch_sizes, 1 warm-up + 2 measured steps per trial; no trial "
      "starts after {} s (--budget)",
      sweep.output_dir, precisions, request.budget_seconds);
  if (run_sweep(sweep) != kExitOk) return {};
  install_exit_on_stop();  // the plan after its sweep: a stop ends it at once, the sweep kept
  return sweep.output_dir;
}

}  // namespace

void check_target_batch(int64_t target, std::vector<int64_t> batches, int64_t train_images,
                        const std::string& measured) {
  if (train_images > 0 && target > train_images) {
    throw UserError("--target-batch: " + std::to_string(target) +
                    " images a step are more than the " + std::to_string(train_images) +
                    " training images of the sweep's config, which train refuses; give at most " +
                    std::to_string(train_images));
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  int64_t too_many = 0;  // a batch that divides the target, in more than the most steps
  for (const int64_t b : batches) {
    if (target % b != 0) continue;
    if (target / b <= kMaxAccumulateSteps) return;
    too_many = b;
  }
  if (too_many > 0) {
    throw UserError("--target-batch: " + std::to_string(target) + " needs more than " +
                    std::to_string(kMaxAccumulateSteps) +
                    " micro-batches per step (training.accumulate_steps' most) from every batch " +
                    measured + " that divides it (the largest is " + std::to_string(too_many) +
                    "); give a smaller target or sweep larger batches");
  }
  std::string list;
  for (const int64_t b : batches) list += (list.empty() ? "" : ", ") + std::to_string(b);
  throw UserError("--target-batch: " + std::to_string(target) + " is not a multiple of any batch " +
                  measured + " (" + list +
                  "); give a target one of them divides, or sweep micro-batches that divide it "
                  "(--batch-sizes)");
}

int plan_command(const PlanRequest& request) {
  fs::path sweep_dir = request.from;
  if (request.from.empty()) {
    sweep_dir = run_small_sweep(request);
    if (sweep_dir.empty()) return kExitStopped;
  }
  const Plan plan = make_plan(sweep_dir, request.memory, request.headroom, request.overhead,
                              request.card, request.target_batch);
  if (!request.json.empty()) write_file_atomically(request.json, plan_json(plan).dump(2) + "\n");
  std::cout << plan_table(plan)
            << "\nrecommended: " << recommended_flags(plan, plan.candidates.at(*plan.chosen))
            << std::endl;
  return kExitOk;
}

}  // namespace training
