#include "training/train_command.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <optional>

#include "training/config/config.h"
#include "training/config/config_yaml.h"
#include "training/config/decisions.h"
#include "training/error_exit.h"
#include "training/loop/trainer.h"
#include "training/out_of_memory.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/parts/memory_format.h"
#include "training/parts/run_data.h"
#include "training/parts/setup.h"
#include "training/platform/device.h"
#include "training/platform/distributed.h"
#include "training/platform/duration.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/platform/stop_signal.h"
#include "training/resume.h"
#include "training/run/checkpoint_io.h"
#include "training/run/output_dir.h"
#include "training/run/run_dir.h"
#include "training/run/run_report.h"
#include "training/step/optim.h"

namespace training {
namespace fs = std::filesystem;

namespace {

// The model's parameters, counted; what they hold before any activation (weights, their
// gradients, SGD momentum buffers) in the log.
int64_t log_model_memory(torch::nn::Module& model, const Config& config) {
  int64_t count = 0, bytes = 0;
  for (const auto& p : model.parameters()) {
    count += p.numel();
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  const int64_t momentum = config.optimizer.momentum() > 0 ? bytes : 0;
  spdlog::trace(
      "memory: parameters {0}, gradients {0}, optimizer state {1} (momentum), {2} in all "
      "before activations",
      format_bytes(bytes), format_bytes(momentum), format_bytes(2 * bytes + momentum));
  return count;
}

// Opens rank 0's run directory into `run` (new, or resumed in place; never moved: it holds a lock
// and a log sink); other ranks name it, where they know it, for the commands they advise.
void open_run(const OutputFolder& folder, const ResumeTarget& resume, const ProcessGroup* group,
              Trainer& trainer, std::optional<RunDirectory>& run) {
  const bool in_place = !resume.run_dir.empty();  // a resume has no --output-dir (train_command)
  if (group && !group->is_main()) {  // a dated name is rank 0's to choose: its log names it
    trainer.name_run(in_place                    ? resume.run_dir
                     : folder.dated_what.empty() ? folder.path
                                                 : fs::path());
    return;
  }
  run.emplace(in_place ? resume.run_dir : folder.to_claim(), in_place, folder.named_by);
  spdlog::info(
      "run directory: {} (config.yaml holds the config as asked, decisions.json what auto "
      "decided, train.log everything said)",
      run->path().string());
}

// The start-up summary (device, data, model, precision, layout, batch, epochs); the config and the
// memory arithmetic at trace level, in train.log only.
void log_start(const Config& config, const RunInputs& inputs, const torch::Device& device,
               const LoadedData& data, Trainer& trainer, const MemoryFormatChoice& layout,
               bool resuming, bool trained) {
  spdlog::info("device {}, LibTorch {}", describe_device(device), TORCH_VERSION);
  warn_if_bf16_is_emulated(device, config.training.precision);
  spdlog::trace("config as asked:\n{}decisions: {}", inputs.config_yaml, inputs.decisions_json);
  spdlog::info("data: {} from {}: {} train / {} test images, decoded in {:.1f} s",
               source_description(data.source), data.root, trainer.train_size(),
               trainer.test_size(), data.seconds);
  spdlog::info(
      "model: {} ({} stem, {} classes, {} parameters){}, {} {}, batch {}: {} epochs of {} steps "
      "({})",
      arch_name(config.model), stem_name(config.model), config.model.num_classes(),
      log_model_memory(*trainer.model(), config), resized_text(config.data.image_size),
      precision_name(config.training.precision), memory_format_name(config.training.memory_format),
      batch_description(config, trainer.world_size()), config.training.epochs,
      trainer.steps_per_epoch(),
      // A resume's steps depend on those its checkpoint has done: said once it is read.
      resuming ? std::string("the steps planned follow from the checkpoint")
               : std::to_string(trainer.total_steps()) + " steps planned");
  if (!layout.lapsed.empty()) spdlog::info("memory format auto: {}: decided again", layout.lapsed);
  spdlog::info("memory format {}: {}", memory_format_name(layout.format), layout.reason);
  const std::string slow_layout = memory_format_warning(config, device);
  if (!slow_layout.empty()) spdlog::warn("{}", slow_layout);
  if (config.memory.limit > 0 && !trained) {  // a run with nothing left to train: lifted
    spdlog::info(
        "memory: limited to {} on {} (memory.limit; the decoded dataset is host data "
        "and is not counted)",
        format_bytes(config.memory.limit), device.str());
  }
}

// checkpointing auto verified: the training peak the run measured beside the prediction.
void log_checkpointing_outcome(const Config& config, const Decisions& decisions,
                               const RunDirectory& run) {
  // The last epoch trained under this choice (a resume may have chosen again since).
  const auto& d = decisions.checkpointing;
  const auto measured = d ? peak_under(*d, run.epochs()) : std::nullopt;
  bool exceeded = false;
  const std::string outcome =
      measured ? checkpointing_outcome(d, *measured, &exceeded, budget_named(config)) : "";
  if (!outcome.empty())
    spdlog::log(exceeded ? spdlog::level::warn : spdlog::level::info, "checkpointing auto: {}",
                outcome);
}

// trainer.fit(), with out of memory as exit 3 and a failed collective as exit 4.
FitEnd fit(const Config& config, const torch::Device& device, Trainer& trainer,
           const ProcessGroup* group) {
  auto position = [&] {
    const bool evaluating = trainer.evaluating();
    return OutOfMemoryWhere{
        evaluating ? OutOfMemoryWhere::Evaluation : OutOfMemoryWhere::Training,
        fmt::format("{} epoch {} after {} steps", evaluating ? "in the evaluation of" : "in",
                    trainer.state().epoch + 1, trainer.state().step),
        trainer.checkpoint_exists(), trainer.evaluating_one_image(), trainer.keeps_gradients()};
  };
  try {
    return out_of_memory_is_exit_3(config, device, position, [&] { return trainer.fit(); });
  } catch (const std::exception& e) {
    if (!group || dynamic_cast<const UserError*>(&e) || dynamic_cast<const OutOfMemory*>(&e) ||
        dynamic_cast<const CannotWrite*>(&e)) {
      throw;
    }
    // A collective failed: a peer died, hung past the timeout, the network broke (Gloo, NCCL).
    throw DistributedError(
        "rank " + std::to_string(group->rank()) + ": lost contact with the other ranks in epoch " +
        std::to_string(trainer.state().epoch + 1) + " after " +
        std::to_string(trainer.state().step) + " steps (" + group->describe_peers(e.what()) + ": " +
        error_line(e) + "); " +
        (trainer.checkpoint_missing()
             ? "no checkpoint was written: start the run again"
             : "the last checkpoint is intact: --resume continues from it") +
        " once every host is back (a peer slower than distributed.timeout_seconds counts as "
        "lost)");
  }
}

// The run's end: checkpointing's outcome, the report, the last line and the exit code.
int finish(const Config& config, const Decisions& decisions, FitEnd end, const Trainer& trainer,
           std::optional<RunDirectory>& run, std::chrono::steady_clock::time_point start,
           int64_t first_step) {
  const bool has_epochs = run && !run->epochs().empty();
  if (has_epochs) log_checkpointing_outcome(config, decisions, *run);
  if (has_epochs) spdlog::info("report: {}", write_report(run->path()).string());
  if (end == FitEnd::Stopped) return kExitStopped;
  if (end == FitEnd::Diverged) return kExitDiverged;
  if (stop_requested()) {
    // After the last epoch's training (its evaluation, the checkpoint, the report's plots): the
    // training is kept, and the stop is said as any other.
    spdlog::warn("stopped by signal after the last epoch's training (its results are recorded){}",
                 run ? ": " + advised_program() + " --resume " + shell_word(run->path().string()) +
                           " finishes what was left (the report and its plots)"
                     : std::string());
    return kExitStopped;
  }
  // The seconds are this process's: a resume says how many of the steps it trained.
  const int64_t now = trainer.state().step - first_step;
  const std::string resumed =
      first_step > 0 ? fmt::format(" ({} of them by this resume)", now) : "";
  spdlog::info("done: {} epochs, {} steps{} in {:.1f} s{}", trainer.state().epoch,
               trainer.state().step, resumed, seconds_since(start),
               has_epochs ? fmt::format("; final test accuracy {:.2f}%",
                                        100.0 * run->epochs().back().test_acc)
                          : "");
  return kExitOk;
}

// Refuses what needs no measurement before the autos measure: the labels, the batch, the
// profiler's window, a resumed checkpoint's model and position, rank 0's run folder (a new one's,
// or the resumed one's lock and metrics). Returns a resumed run's optimizer steps and whether it
// has nothing left to train.
struct Position {
  int64_t step = 0;
  bool trained = false;
};
Position check_before_measuring(const ResumeTarget& resume, const OutputFolder& folder,
                                const Config& asked, const torch::Device& device,
                                const LoadedData& data, const std::optional<LaunchEnv>& launch) {
  const int64_t ranks = launch ? launch->world_size : 1;
  const bool writes = !launch || launch->rank == 0;
  check_labels(data.train, "training", asked.model.num_classes());
  check_labels(data.test, "test", asked.model.num_classes());
  // training.cuda_graph: on where it cannot run (no CUDA device, ...): not after timing layouts.
  if (asked.training.cuda_graph == CudaGraphMode::On) use_cuda_graph(asked, device, ranks > 1);
  if (resume.checkpoint.empty()) {
    Trainer::check_steps(asked, data.train.size(), ranks);
    if (writes && resume.run_dir.empty())
      check_output_dir(folder.path, OutputKind::Run, folder.named_by);
    if (writes && !resume.run_dir.empty()) check_run_to_resume(resume.run_dir, 0, asked);
    refuse_what_no_batch_fits(asked, device);  // the weights alone above the limit or budget
    return {};
  }
  // Its model and optimizer state against the config's (UserError naming the file), on a model
  // built to compare with (host data, not the run's); then its position (check_resumable).
  TrackingCpuAllocator::HostData host_data;
  models::ResNet model(asked.model);
  const auto optimizer = make_sgd(*model, asked.optimizer);
  const TrainState position = check_checkpoint_model(resume.checkpoint, *model, *optimizer);
  Trainer::check_resumable(resume.checkpoint, position, asked, run_yaml(asked), ranks);
  Trainer::check_steps(asked, data.train.size(), ranks, &position);
  if (writes) check_run_to_resume(resume.run_dir, position.epoch, asked);
  const bool trained = nothing_left_to_train(position, asked);
  if (!trained) refuse_what_no_batch_fits(asked, device);  // the weights alone, no budget
  // Nothing runs under memory.limit then: the model and the checkpoint's tensors are read
  // without it (under it a finished run ran out of memory reading them; load_resumed says so).
  if (trained) set_memory_limit(device, 0);
  return {position.step, trained};
}

// Where out of memory happened before the first step, for its line (a fresh run has no
// checkpoint to call intact).
std::function<OutOfMemoryWhere()> oom_where(const ResumeTarget& resume,
                                            OutOfMemoryWhere::Phase phase, const char* doing) {
  return [phase, doing, intact = !resume.checkpoint.empty()] {
    return OutOfMemoryWhere{phase, doing, intact};
  };
}

// A rank's start-up before its peers are joined: what it can refuse by itself, then the autos
// become this run's decisions (decisions.json, the checkpoint; a resume keeps those that hold):
// the layout, then checkpointing's blocks.
struct Started {
  LoadedData data;
  OutputFolder folder;
  Position position;
  MemoryFormatChoice layout;
  std::optional<CheckpointChoice> checkpointing;
};
Started start_up(const TrainRequest& request, const ResumeTarget& resume, const Config& asked,
                 Decisions& decisions, const torch::Device& device,
                 const std::optional<LaunchEnv>& launch) {
  const bool data_parallel = launch && launch->world_size > 1;
  Started s{load_data(asked),
            output_folder(request.output_dir, asked, arch_name(asked.model), true),
            {},
            {},
            {}};
  s.position = check_before_measuring(resume, s.folder, asked, device, s.data, launch);
  const auto timing =
      oom_where(resume, OutOfMemoryWhere::Training,  // neither layout fits
                "in the training step timed in each layout (training.memory_format: "
                "auto): in contiguous and in channels_last");
  s.layout = out_of_memory_is_exit_3(asked, device, timing, [&] {
    if (s.position.trained) return kept_decisions(asked, decisions);
    // Under a budget, each layout is timed with what the run holds beside its step.
    const int64_t beside =
        !asked.training.memory_format && device.is_cpu() && layout_timing_budget(asked) > 0
            ? held_beside_step(asked, device, s.data.train, s.data.test.size())
            : 0;
    return decide_memory_format(asked, decisions, device, data_parallel, {}, beside);
  });
  const auto building =
      oom_where(resume, OutOfMemoryWhere::Setup, "while building the model and its data");
  s.checkpointing = out_of_memory_is_exit_3(asked, device, building, [&] {
    if (s.position.trained) return std::optional<CheckpointChoice>();
    const Config laid_out = decided(asked, {decisions.layout, std::nullopt});
    const bool choosing = laid_out.checkpointing.mode() == CheckpointMode::Auto;
    auto made = resolve_checkpointing(
        laid_out, decisions, device, data_parallel, {},
        choosing ? held_beside_step(laid_out, device, s.data.train, s.data.test.size()) : 0);
    if (made) decisions.checkpointing->from_step = s.position.step;  // chosen now
    return made;
  });
  return s;
}

// The run from the config asked and the decisions recorded: set up, decide, train, report.
int train(const TrainRequest& request, const ResumeTarget& resume, const Config& asked,
          Decisions decisions, bool& joined) {
  const auto launch = launch_env_from_environment();
  // Everything that can be refused is checked, and everything that can run out of memory before
  // the first step is built, before the run directory (named once: `folder`) is claimed.
  const torch::Device device = set_up_device(asked, DeviceUse::Step, launch);
  Started started = start_up(request, resume, asked, decisions, device, launch);
  const auto building =
      oom_where(resume, OutOfMemoryWhere::Setup, "while building the model and its data");
  LoadedData& data = started.data;
  const Position& position = started.position;
  const RunInputs inputs{run_yaml(asked), decisions_json(decisions)};
  const Config config = decided(asked, decisions);
  // The peers are joined once what this rank can refuse by itself has been checked; one that
  // cannot start tells them instead (train_command). The join tells them what it refuses before
  // it meets them (its interface, its backend) itself.
  joined = true;
  std::unique_ptr<ProcessGroup> group;
  if (launch && launch->world_size > 1) group = join_group(*launch, config.distributed, device);
  Trainer trainer = out_of_memory_is_exit_3(config, device, building, [&] {
    return Trainer(config, device, std::move(data.train), std::move(data.test), group.get());
  });
  // A resume's config.yaml and decisions.json are rewritten with its first checkpoint: a resume
  // that ends before one (out of memory, a failed step) leaves the run's record as it was, and
  // one with nothing left to train never rewrites them.
  trainer.record_inputs(inputs,
                        /*with_checkpoint=*/!resume.checkpoint.empty() && !position.trained);
  std::optional<RunDirectory> run;
  open_run(started.folder, resume, group.get(), trainer, run);
  if (group) {
    spdlog::info(
        "rank {} of {} ({}, local rank {}, rendezvous {}:{}; {}); only rank 0 writes the run "
        "directory",
        group->rank(), group->world_size(), group->backend_name(), launch->local_rank,
        launch->master_addr, launch->master_port, group->network_description());
  }
  log_start(config, inputs, device, data, trainer, started.layout, !resume.checkpoint.empty(),
            position.trained);
  log_checkpointing_choice(config, decisions, started.checkpointing);
  load_resumed(resume, config, device, trainer, position.trained);
  if (run) {
    if (resume.checkpoint.empty()) run->write_inputs(inputs);
    trainer.write_to(*run);
    if (!resume.run_dir.empty())
      run->keep_epochs_through(trainer.state().epoch, trainer.state().step);
  }

  test_stop_point("start-up");
  install_stop_handlers();
  const auto start = std::chrono::steady_clock::now();
  const FitEnd end = fit(config, device, trainer, group.get());
  return finish(config, decisions, end, trainer, run, start, position.step);
}

}  // namespace

int train_command(const TrainRequest& request) {
  const auto launch = launch_env_from_environment();
  bool joined = false;  // a data-parallel rank's group
  auto timeout = std::chrono::seconds(DistributedOptions{}.timeout_seconds);
  try {
    const ResumeTarget resume = resume_target(request.resume);
    refuse_another_folder(request, resume);
    const auto resumed_log = resumed_run_log(resume);  // a stop's or an error's line goes there
    Decisions recorded;
    const Config config = effective_config(request, resume, recorded);
    timeout = std::chrono::seconds(config.distributed.timeout_seconds);
    if (request.print_config) return std::cout << to_yaml(config), kExitOk;
    return with_key_origins(config, [&] {
      try {
        return train(request, resume, config, recorded, joined);
      } catch (const UnconfirmedOutOfMemory& e) {  // the run's weights and state freed by now
        const ClosedRunLog log;  // the measuring line and a stop's in the run's train.log too
        throw OutOfMemory(confirmed_out_of_memory(e));
      }
    });
  } catch (const std::exception& e) {
    // A rank that cannot start tells its peers why, so that they do not wait for it.
    if (launch && launch->world_size > 1 && !joined) {
      const ErrorExit exit = error_exit(e);
      spdlog::info("rank {} cannot start; it tells the other ranks why ({} s at most)",
                   launch->rank, kTellPeersWithin.count());
      tell_peers_this_rank_cannot_start(*launch, timeout, exit.code, one_line(exit.line));
    }
    throw;
  }
}

}  // namespace training
