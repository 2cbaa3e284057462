#include "training/studies/memory_report.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <sstream>

#include "training/cards/alloc_conf.h"
#include "training/cards/card_prediction.h"
#include "training/cards/card_snapshot.h"
#include "training/config/config_yaml.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/components.h"
#include "training/parts/memory_format.h"
#include "training/parts/setup.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/dir_lock.h"
#include "training/platform/errors.h"
#include "training/platform/json_rows.h"
#include "training/platform/memory.h"
#include "training/platform/process.h"
#include "training/run/output_dir.h"
#include "training/run/run_dir.h"
#include "training/step/graphed_step.h"

namespace training {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::vector<Setting> memory_settings(const std::optional<std::string>& requested,
                                     const Config& config, const torch::Device& device) {
  std::vector<Setting> cells;
  if (requested) {  // given, even as '': an empty list is refused, never the defaults
    if (requested->empty()) throw UserError("--settings: expected at least one setting, e.g. fp32");
    for (const auto& item : config_yaml::split_items(*requested, "--settings")) {
      const auto cell = Setting::parse(item);
      if (!cell) {
        throw UserError("--settings: '" + item +
                        "' is not a setting; expected a precision (fp32, bf16, fp16) with "
                        "optional +checkpointing (or +checkpointing=auto) and +channels_last, "
                        "e.g. bf16+checkpointing");
      }
      if (cell->precision == Precision::BF16) check_bf16_supported(device, "--settings");
      cells.push_back(*cell);
    }
    // A repeated setting is refused, never merged.
    if (const std::string repeat = config_yaml::first_repeat(cells); !repeat.empty())
      throw UserError("--settings: '" + *requested + "': " + repeat);
    return cells;
  }
  const bool bf16 = has_fast_bf16(device);  // memory_study says so, once nothing is refused
  for (auto checkpointing : {CheckpointMode::Off, CheckpointMode::On}) {
    for (auto precision : {Precision::FP32, Precision::BF16}) {
      if (precision == Precision::BF16 && !bf16) continue;
      cells.push_back({precision, checkpointing, memory_format_for(config, device)});
    }
  }
  return cells;
}

namespace {

// What checkpointing auto recomputed in a breakdown, and the peak it predicted (none when the
// blocks were given by hand).
std::string auto_choice_text(const StepBreakdown& b) {
  if (!b.recomputed_blocks) return "made no choice";
  return (b.recomputed_blocks->empty()
              ? std::string("recomputes no block")
              : "recomputes " + config_yaml::join(*b.recomputed_blocks, ", ")) +
         (b.predicted_peak_bytes > 0
              ? " (predicted peak " + format_bytes(b.predicted_peak_bytes) + ")"
              : std::string(" (given by checkpointing.blocks)"));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text;
  for (int64_t size : shape) text += (text.empty() ? "" : "×") + std::to_string(size);
  return text;
}

const MemoryRow* find_row(const StepBreakdown& b, const std::string& name) {
  const auto row =
      std::find_if(b.rows.begin(), b.rows.end(), [&](const auto& r) { return r.name == name; });
  return row == b.rows.end() ? nullptr : &*row;
}

ordered_json breakdown_json(const StepBreakdown& b) {
  ordered_json rows = ordered_json::array();
  for (const auto& row : b.rows) {
    rows.push_back({{"name", row.name},
                    {"group", group_name(row.group)},
                    {"stage", row.stage},
                    {"shape", row.shape},
                    {"bytes", row.bytes},
                    {"at_peak", row.at_peak}});
  }
  ordered_json json = {{"setting", b.setting.label()}};
  json.update(b.setting.json());
  // Blocks only where auto chose them (else null); a step that did not run to its end measured no
  // peak: its figures are null, not 0.
  const bool measured = b.status == TrialStatus::Ok;
  auto figure = [&](const ordered_json& value) { return measured ? value : ordered_json(nullptr); };
  const ordered_json predicted =
      b.recomputed_blocks ? ordered_json(b.predicted_peak_bytes) : nullptr;
  json.update(ordered_json{{"recomputed_blocks", optional_json(b.recomputed_blocks)},
                           {"predicted_peak_bytes", predicted},
                           {"batch_size", b.batch_size},
                           {"status", status_name(b.status)},
                           {"message", b.message},
                           {"peak_phase", figure(phase_name(b.peak_phase))},
                           {"measured_peak_bytes", figure(b.measured_peak_bytes)},
                           {"itemized_peak_bytes", figure(b.itemized_peak_bytes)},
                           {"reserved_bytes", figure(b.reserved_bytes)},
                           {"unexplained_bytes", figure(b.unexplained_bytes())},
                           {"rows", rows}});
  return json;
}

ordered_json timeline_json(const StepBreakdown& b) {
  ordered_json points = ordered_json::array(), marks = ordered_json::array();
  for (const auto& p : b.timeline) points.push_back({p.event, p.bytes});
  for (const auto& m : b.marks) marks.push_back({m.event, m.label});
  return {{"setting", b.setting.label()},
          {"events", b.timeline_events},
          {"points", points},
          {"marks", marks}};
}

fs::path study_directory(const MemoryRequest& request, const Config& config,
                         std::unique_ptr<DirectoryLock>& lock) {
  const OutputFolder out =
      output_folder(request.output_dir, config, "memory-" + arch_name(config.model), false);
  lock = claim_output_dir(out.path, OutputKind::MemoryStudy, out.named_by);
  return out.path;
}

// "32", or with accumulation "32 (the last of 4 micro-batches of an optimizer step, the
// gradients of the 3 before held)".
std::string accumulation_text(const Config& config) {
  const int64_t n = config.training.accumulate_steps;
  return std::to_string(config.training.batch_size) +
         (n > 1 ? fmt::format(" (the last of {} micro-batches of an optimizer step, the gradients "
                              "of the {} before held)",
                              n, n - 1)
                : "");
}

// The card to predict on, checked before anything runs (its allocator's options, the settings it
// can predict, the data held beside the step); one process, as train memory measures.
std::optional<CardPredictor> card_request(const MemoryRequest& request, const Config& config,
                                          const std::vector<Setting>& cells) {
  if (request.card.empty()) return std::nullopt;
  const Card card = find_card(request.card);
  const AllocatorOptions options = alloc_conf_from_environment();
  for (const auto& cell : cells) {
    if (const std::string why = cell.unpredictable(); !why.empty()) {
      throw UserError("--card: " + cell.label() + ": " + why);
    }
  }
  Config one_process = config;
  one_process.sweep.data_parallel = false;
  return CardPredictor(one_process, card, options);
}

// One setting on the card at the config's batch: logged, its fields merged into the setting's
// JSON, and with a `snapshot` file (not empty) its allocator written there.
void predict_setting(CardPredictor& predictor, int64_t batch, const Setting& cell,
                     ordered_json& setting,
                     std::vector<std::pair<std::string, CardPrediction>>& predictions,
                     const fs::path& snapshot) {
  AllocatorSnapshot drawn;
  CardPrediction p;
  try {
    p = predictor.predict(cell, batch, snapshot.empty() ? nullptr : &drawn);
    spdlog::info("{}", prediction_line(cell.label(), p));
    setting.update(prediction_json(p));
    predictions.emplace_back(cell.label(), p);
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::warn("{} on {}: no prediction: {}", cell.label(), predictor.card().name, error_line(e));
    setting["card_prediction_error"] = error_line(e);
    return;
  }
  if (!snapshot.empty()) write_card_snapshot(snapshot, drawn, p, cell.label());
}

// Says how one setting's measurement went and writes its allocator snapshot; returns its exit code.
int report_breakdown(const StepBreakdown& b, const Setting& cell, const fs::path& dir) {
  int exit_code = kExitOk;
  if (b.status == TrialStatus::Ok) {
    spdlog::info("{}: peak {} MiB in {} ({} MiB itemized, {} MiB unexplained)", cell.label(),
                 mib_text(b.measured_peak_bytes), phase_name(b.peak_phase),
                 mib_text(b.itemized_peak_bytes), mib_text(b.unexplained_bytes()));
    if (cell.checkpointing == CheckpointMode::Auto) {
      spdlog::info("{}: {}", cell.label(), auto_choice_text(b));
    }
  } else {
    spdlog::warn("{}: {}: {}", cell.label(), status_name(b.status), b.message);
    exit_code = b.status == TrialStatus::OutOfMemory ? kExitOutOfMemory : kExitInternalError;
  }
  if (!b.snapshot.empty()) {
    const fs::path file = dir / ("memory_snapshot-" + cell.label() + ".pickle");
    write_file_atomically(file, b.snapshot);
    spdlog::info("allocator history: {} (open it at https://pytorch.org/memory_viz)",
                 file.string());
  }
  return exit_code;
}

// What the settings cannot do here: auto without a budget (blocks given by hand need none), a limit
// below what one holds whatever the batch, --card-only without a card, a card's accumulation.
void refuse_settings(const MemoryRequest& request, const Config& config,
                     const torch::Device& device, const std::vector<Setting>& settings, bool card) {
  const std::string missing =
      config.checkpointing.blocks() ? std::string() : missing_budget(config, device);
  for (const auto& setting : settings) {  // each asked for: one no batch fits is refused
    if (setting.checkpointing == CheckpointMode::Auto && !missing.empty()) {
      throw UserError("--settings: " + setting.label() + " " + missing);
    }
    Config at = config;
    setting.apply_to(at);
    if (!request.card_only) refuse_what_no_batch_fits(at, device, "--settings fp32");
  }
  if (request.card_only && !card) throw UserError("--card-only: give the card with --card");
  if (request.snapshot) check_snapshot_files(*request.snapshot, card, settings, request.output_dir);
}

// The study's first lines, once nothing is refused (a refusal is its one line): the default
// settings that leave bf16 out, and the step measured.
void log_study_start(const MemoryRequest& request, const Config& config,
                     const torch::Device& device, size_t settings) {
  if (!request.settings && !has_fast_bf16(device)) {
    spdlog::warn(
        "bf16 settings left out: {} has no native bf16 (on such CPUs it is emulated, "
        "~300x slower); ask for them with --settings",
        device.str());
  }
  spdlog::info("memory: one step of {} ({} stem){}, batch {}, on {}, {} setting(s)",
               arch_name(config.model), stem_name(config.model),
               resized_text(config.data.image_size), accumulation_text(config),
               describe_device(device), settings);
}

// The study itself, from its config.
int memory_study(const MemoryRequest& request, const Config& config) {
  // Everything refused is refused before the study's folder exists.
  const torch::Device device = set_up_device(config, DeviceUse::Study);
  // training.cuda_graph: on is refused where it cannot run, as train, sweep and plan refuse it;
  // on CUDA the study measures the eager step, whose memory the captured one holds too.
  if (config.training.cuda_graph == CudaGraphMode::On) use_cuda_graph(config, device, false);
  auto settings = memory_settings(request.settings, config, device);
  // Each setting at the config's training.accumulate_steps (its card prediction too).
  for (auto& setting : settings) setting.accumulate_steps = config.training.accumulate_steps;
  auto card = card_request(request, config, settings);  // refuses auto with --card, first
  refuse_settings(request, config, device, settings, card.has_value());
  std::unique_ptr<DirectoryLock> lock;
  const fs::path dir = study_directory(request, config, lock);
  write_file_atomically(dir / "config.yaml", to_yaml(config));
  log_study_start(request, config, device, settings.size());

  std::vector<StepBreakdown> breakdowns;
  std::vector<std::pair<std::string, CardPrediction>> predictions;
  ordered_json settings_json = ordered_json::array(), timelines = ordered_json::array();
  int exit_code = kExitOk;
  auto snapshot_of = [&](const Setting& cell) {
    return request.snapshot ? snapshot_file(*request.snapshot, cell, settings.size()) : fs::path();
  };
  for (const auto& cell : settings) {
    if (request.card_only) {
      settings_json.push_back({{"setting", cell.label()}});
      settings_json.back().update(cell.json());
      settings_json.back()["batch_size"] = config.training.batch_size;
      predict_setting(*card, config.training.batch_size, cell, settings_json.back(), predictions,
                      snapshot_of(cell));
      continue;
    }
    breakdowns.push_back(measure_breakdown(config, cell));
    const auto& b = breakdowns.back();
    exit_code = std::max(exit_code, report_breakdown(b, cell, dir));
    settings_json.push_back(breakdown_json(b));
    if (card) {  // the card's own recording: a step out of this machine's memory is predicted too
      predict_setting(*card, config.training.batch_size, cell, settings_json.back(), predictions,
                      snapshot_of(cell));
    }
    timelines.push_back(timeline_json(b));
  }
  const ordered_json facts = {
      {"arch", arch_name(config.model)},
      {"stem", stem_name(config.model)},
      {"image_size", config.data.image_size},
      {"device", device.str()},
      {"device_description", describe_device(device)},
      {"batch_size", config.training.batch_size},
      {"accumulate_steps", config.training.accumulate_steps},
      {"memory_limit_bytes",
       config.memory.limit > 0 ? ordered_json(config.memory.limit) : ordered_json(nullptr)},
      {"settings", settings_json}};
  write_file_atomically(dir / "memory_breakdown.json", facts.dump(2) + "\n");
  if (!request.card_only) {
    write_file_atomically(dir / "memory_timeline.json",
                          ordered_json{{"settings", timelines}}.dump() + "\n");
  }
  const std::string table = (request.card_only ? "" : breakdown_markdown(breakdowns) + "\n") +
                            prediction_markdown(predictions);
  write_file_atomically(
      dir / "memory_breakdown.md",
      fmt::format("# Memory of one training step: {} ({} stem){}, batch {}, {}\n\n{}\n",
                  arch_name(config.model), stem_name(config.model),
                  resized_text(config.data.image_size), accumulation_text(config),
                  describe_device(device), table));
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) spdlog::info("{}", line);
  if (!request.card_only) {
    const std::string problem =
        run_python_script("plot_memory.py", {dir.string()}, dir / "plot.log");
    if (!problem.empty()) spdlog::warn("plots skipped: {}; the tables are complete", problem);
  }
  mark_finished(dir, OutputKind::MemoryStudy);
  spdlog::info("memory study written to {}", dir.string());
  return exit_code;
}

}  // namespace

std::string breakdown_markdown(const std::vector<StepBreakdown>& breakdowns) {
  std::vector<const MemoryRow*> order;  // every row name once, in first-seen order
  for (const auto& b : breakdowns) {
    for (const auto& row : b.rows) {
      const bool seen = std::any_of(order.begin(), order.end(),
                                    [&](const MemoryRow* r) { return r->name == row.name; });
      if (!seen) order.push_back(&row);
    }
  }
  std::ostringstream md;
  md << "| MiB | output shape |";
  for (const auto& b : breakdowns) md << " " << b.setting.label() << " |";
  md << "\n|---|---|";
  for (size_t i = 0; i < breakdowns.size(); ++i) md << "---:|";
  md << "\n";
  for (const MemoryRow* named : order) {
    md << "| " << named->name << " | " << shape_text(named->shape) << " |";
    for (const auto& b : breakdowns) {
      const MemoryRow* row = find_row(b, named->name);
      if (row)
        md << " " << (row->at_peak ? mib_text(row->bytes) : "(" + mib_text(row->bytes) + ")");
      md << " |";
    }
    md << "\n";
  }
  auto line = [&](const std::string& label, auto cell) {
    md << "| " << label << " | |";
    for (const auto& b : breakdowns)
      md << " " << (b.status == TrialStatus::Ok ? cell(b) : "") << " |";
    md << "\n";
  };
  line("**itemized peak**", [](const StepBreakdown& b) {
    return "**" + mib_text(b.itemized_peak_bytes) + "** (" + phase_name(b.peak_phase) + ")";
  });
  line("**measured peak**",
       [](const StepBreakdown& b) { return "**" + mib_text(b.measured_peak_bytes) + "**"; });
  line("unexplained", [](const StepBreakdown& b) {
    const double share = b.measured_peak_bytes > 0
                             ? 100.0 * static_cast<double>(b.unexplained_bytes()) /
                                   static_cast<double>(b.measured_peak_bytes)
                             : 0.0;
    return fmt::format("{} ({:.1f}%)", mib_text(b.unexplained_bytes()), share);
  });
  for (const auto& b : breakdowns) {
    if (b.status == TrialStatus::Ok && b.setting.checkpointing == CheckpointMode::Auto) {
      md << "\n" << b.setting.label() << ": " << auto_choice_text(b) << ".\n";
    }
    if (b.status != TrialStatus::Ok) {
      md << "\n"
         << b.setting.label() << ": " << status_name(b.status) << ": " << markdown_text(b.message)
         << "\n";
    }
  }
  return md.str();
}

int memory_command(const MemoryRequest& request) {
  const Config config = load_config(request.config_path, request.overrides);
  return with_key_origins(config, [&] {
    if (request.card_only && config.memory.snapshot) {  // (set_up_device refuses it on the CPU)
      throw KeyError("memory.snapshot",
                     "true records a measured step's allocator history, and --card-only measures "
                     "none; drop it (the card's predicted history: --snapshot FILE)");
    }
    return memory_study(request, config);
  });
}

}  // namespace training
