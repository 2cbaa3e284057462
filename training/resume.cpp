#include "training/resume.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>

#include "training/config/config_yaml.h"
#include "training/loop/trainer.h"
#include "training/out_of_memory.h"
#include "training/parts/memory_format.h"
#include "training/platform/atomic_file.h"
#include "training/platform/dir_lock.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/run/checkpoint_io.h"
#include "training/run/output_dir.h"

namespace training {

namespace fs = std::filesystem;

namespace {

// The epochs a run directory recorded: the rows of metrics.jsonl (or of metrics.csv).
int64_t recorded_row_count(const fs::path& run_dir) {
  int64_t epochs = 0;
  for (const auto& [name, header] :
       {std::pair<const char*, int64_t>{"metrics.jsonl", 0}, {"metrics.csv", 1}}) {
    std::ifstream in(run_dir / name);
    int64_t lines = 0;
    for (std::string line; std::getline(in, line);) lines += line.empty() ? 0 : 1;
    epochs = std::max(epochs, lines - header);
  }
  return epochs;
}

// A resume's overrides: the keys of the run's config.yaml edited by hand (where it differs from
// the checkpoint's copy; the same rules as --set apply, and the file is named in messages), then
// the flags'. config.yaml is rewritten from the effective config: an edit is never lost silently.
std::vector<Override> with_hand_edits(const fs::path& config_yaml, const std::string& stored,
                                      const std::string& origin,
                                      const std::vector<Override>& overrides) {
  std::error_code ec;
  if (!fs::is_regular_file(config_yaml, ec)) return overrides;
  // A run's keys only: the sweep section is no input of a run.
  const std::string edited = run_yaml(load_config(config_yaml.string(), {}, ConfigRead::Record));
  const auto edits = config_yaml::differing_assignments(
      run_yaml(parse_config(stored, origin, {}, ConfigRead::Record)), edited);
  if (edits.empty()) return overrides;
  spdlog::info(
      "{}: differs from the config {} holds; its edits are taken as --set would take them: {}",
      config_yaml.string(), origin, config_yaml::join(edits, ", "));
  std::vector<Override> all;
  for (const auto& edit : edits) all.emplace_back(edit, config_yaml.string());
  all.insert(all.end(), overrides.begin(), overrides.end());
  return all;
}

// The checkpoint's decisions; an edit of decisions.json (their record) is said, not taken.
Decisions stored_decisions(const ResumeTarget& resume, const RunInputs& stored, Config& config) {
  Decisions recorded;
  if (!stored.decisions_json.empty()) {
    const std::string origin = resume.checkpoint.string() + " (stored decisions)";
    try {
      recorded = parse_decisions(stored.decisions_json, origin);
      check_decisions(recorded, config, origin);
    } catch (const UserError& e) {
      // Damaged (a hand-made checkpoint): not needed where the resume sets what they decide.
      const std::string still_auto = undecided_keys(config);
      if (!still_auto.empty()) {
        throw UserError(std::string(e.what()) + "; to resume without them, set " + still_auto +
                        " (--set), which they decide");
      }
      spdlog::warn("{}; not used: this resume sets what they decide", e.what());
      recorded = {};
    }
  }
  std::error_code ec;
  const fs::path file = resume.run_dir / "decisions.json";
  if (fs::is_regular_file(file, ec)) {
    const std::string text = read_whole_file(file);
    bool same = false;
    try {
      same = decisions_json(parse_decisions(text, file.string())) == decisions_json(recorded);
    } catch (const std::exception&) {
    }
    if (!same) {
      spdlog::warn(
          "{}: differs from the decisions {} holds, which this resume keeps where they hold; "
          "the file is a record and is rewritten (to decide otherwise, set "
          "training.memory_format or checkpointing.blocks)",
          file.string(), resume.checkpoint.string());
    }
  }
  return recorded;
}

// Why a resumed run refuses another folder, and the new run that would take it (`flags`).
std::string continues_in_its_own_folder(const fs::path& run, const std::string& flags) {
  return "a resumed run continues in its own directory (" + run.string() +
         "); drop it, or train a new run from its config: --config " +
         shell_word((run / "config.yaml").string()) + flags;
}

// A resumed run continues in its own folder: output.dir or output.name other than the run's
// recorded ones (from --set, --config or an edit of its config.yaml) would record another there.
void refuse_another_output(const Config& config, const std::string& recorded_yaml,
                           const fs::path& run) {
  const Config recorded =
      parse_config(recorded_yaml, "the run's recorded config", {}, ConfigRead::Record);
  const OutputConfig &now = config.output, &was = recorded.output;
  if (now.dir == was.dir && now.name == was.name) return;
  const std::string key = now.dir != was.dir ? "output.dir" : "output.name";
  const std::string& value = now.dir != was.dir ? now.dir : now.name;
  const std::string& before = now.dir != was.dir ? was.dir : was.name;
  std::string again;  // the keys that differ, as a new run from the run's config takes them
  // Each value as YAML reads it back ("runs #2" quoted, an empty name as "").
  const auto set = [](const std::string& key, const std::string& value) {
    return " --set " + shell_word(key + "=" + config_yaml::flow_text(YAML::Node(value)));
  };
  if (now.dir != was.dir) again += set("output.dir", now.dir);
  if (now.name != was.name) again += set("output.name", now.name);
  with_key_origins(config, [&] {
    throw KeyError(key, "'" + value + "', where the run recorded '" + before +
                            "': " + continues_in_its_own_folder(run, again));
  });
}

}  // namespace

ResumeTarget resume_target(const std::string& resume) {
  if (resume.empty()) return {};
  std::error_code ec;
  const fs::path path(resume);
  const bool run_dir = fs::is_directory(path, ec) && path.extension() != ".pt";
  if (run_dir && !held_outputs(path).kind) {
    check_output_format(path, OutputKind::Run,
                        "; --resume takes a run's folder, or a checkpoint file");
  }
  if (run_dir) check_is_run(path);
  const fs::path checkpoint = path / "checkpoint.pt";
  if (run_dir && fs::symlink_status(checkpoint, ec).type() == fs::file_type::not_found &&
      fs::exists(path / "config.yaml", ec)) {
    if (const int64_t epochs = recorded_row_count(path); epochs > 0) {
      throw UserError(checkpoint.string() + ": missing, but the run recorded " +
                      std::to_string(epochs) +
                      " epoch(s) (metrics.jsonl / metrics.csv): starting it again would replace "
                      "them; put its "
                      "checkpoint back, or train a new run from its config (--config " +
                      shell_word((path / "config.yaml").string()) + " --output-dir NEW)");
    }
    return {path, {}};
  }
  const HeldOutputs held = run_dir ? held_outputs(path) : HeldOutputs{};
  if (run_dir && held.kind == OutputKind::Run && held.never_started &&
      fs::symlink_status(checkpoint, ec).type() == fs::file_type::not_found) {
    // The folder claim_output_dir (output_dir.h) takes again: a run that never started.
    throw UserError(path.string() +
                    ": stopped before it wrote its config.yaml (no checkpoint.pt either): "
                    "nothing to resume; start it again with --config FILE --output-dir " +
                    shell_word(path.string()));
  }
  const fs::path found = find_checkpoint(path);
  // A checkpoint named from inside its run ("checkpoint.pt") is in this folder.
  const fs::path run = found.has_parent_path() ? found.parent_path() : ".";
  check_is_run(run);
  return {run, found};
}

std::unique_ptr<ResumedRunLog> resumed_run_log(const ResumeTarget& resume) {
  if (resume.run_dir.empty() || locked_by_another_process(resume.run_dir)) return nullptr;
  if (const auto launch = launch_env_from_environment(); launch && launch->rank != 0) {
    return nullptr;
  }
  return std::make_unique<ResumedRunLog>(resume.run_dir / "train.log");
}

void refuse_another_folder(const TrainRequest& request, const ResumeTarget& resume) {
  if (resume.run_dir.empty() || request.output_dir.empty()) return;
  const fs::path& run = resume.run_dir;
  std::error_code ec;  // its own folder: a new run there would be refused as well
  if (fs::equivalent(run, request.output_dir, ec)) {
    throw UserError("--output-dir " + request.output_dir +
                    ": a resumed run continues in its own directory (" + run.string() +
                    "); drop --output-dir");
  }
  throw UserError(
      "--output-dir " + request.output_dir + ": " +
      continues_in_its_own_folder(run, " --output-dir " + shell_word(request.output_dir)));
}

Config effective_config(const TrainRequest& request, const ResumeTarget& resume,
                        Decisions& recorded) {
  recorded = {};
  const auto& overrides = request.overrides;
  if (resume.run_dir.empty() && request.config_path.empty()) {
    throw UserError("no config: pass --config FILE (or --resume RUN to continue a run)");
  }
  if (resume.checkpoint.empty()) {
    if (!request.config_path.empty()) return load_config(request.config_path, overrides);
    return load_config((resume.run_dir / "config.yaml").string(), overrides, ConfigRead::Record);
  }
  const RunInputs stored = checkpoint_inputs(resume.checkpoint);
  Config config;
  if (!request.config_path.empty()) {  // --resume with --config: that file instead
    // A resume from a checkpoint continues in the run's own folder: the file's output.* name no
    // folder to make (refuse_another_output refuses others than the recorded ones).
    config = load_config(request.config_path, overrides, ConfigRead::Record);
  } else {
    const std::string origin = resume.checkpoint.string() + " (stored config)";
    config = parse_config(
        stored.config_yaml, origin,
        with_hand_edits(resume.run_dir / "config.yaml", stored.config_yaml, origin, overrides),
        ConfigRead::Record);
  }
  refuse_another_output(config, stored.config_yaml, resume.run_dir);
  // Without checkpoints a resume leaves the run's checkpoint.pt behind the epochs it trains: its
  // report called the finished run stopped, and a later resume trained them again.
  if (!config.checkpoint.enabled && !resume.run_dir.empty()) {
    with_key_origins(config, [&] {
      throw KeyError("checkpoint.enabled",
                     "false on a resume would leave " + resume.checkpoint.string() +
                         " behind the epochs it trains (a later resume trains them again): "
                         "resume with checkpoints, or train a new run without them");
    });
  }
  recorded = stored_decisions(resume, stored, config);
  return config;
}

bool nothing_left_to_train(const TrainState& position, const Config& asked) {
  const int64_t max_steps = asked.training.max_steps;
  return position.epoch >= asked.training.epochs || (max_steps > 0 && position.step >= max_steps);
}

MemoryFormatChoice kept_decisions(const Config& asked, const Decisions& decisions) {
  MemoryFormatChoice kept;
  kept.format = decided(asked, decisions).training.memory_format.value_or(kept.format);
  kept.reason = asked.training.memory_format ? "as configured"
                                             : "auto: as this run decided, nothing left to train";
  return kept;
}

void load_resumed(const ResumeTarget& resume, const Config& config, const torch::Device& device,
                  Trainer& trainer, bool trained) {
  if (resume.checkpoint.empty()) {
    if (resume.run_dir.empty()) return;
    spdlog::info(
        "{} has no checkpoint yet (it stopped before its first one): starting the run again from "
        "its config",
        resume.run_dir.string());
    return;
  }
  auto loading = [&] {
    return OutOfMemoryWhere{OutOfMemoryWhere::Setup, "while loading " + resume.checkpoint.string()};
  };
  out_of_memory_is_exit_3(config, device, loading, [&] { trainer.resume(resume.checkpoint); });
  if (trained) {  // said once the run is known to be one that can be continued
    spdlog::info(
        "nothing is left to train: its recorded decisions are kept (nothing was measured) and its "
        "config.yaml and decisions.json are not rewritten");
    // Lifted before the model was built (train_command.cpp): nothing runs under it.
    if (config.memory.limit > 0) {
      spdlog::info("memory: memory.limit {} is not applied: nothing is left to train",
                   format_bytes(config.memory.limit));
    }
  }
}

}  // namespace training
