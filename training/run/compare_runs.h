// `train compare RUN_DIR... [--output DIR]`: finished runs side by side, a column each (differing
// config keys, model, device, accuracy, time per epoch, images/s against the first run, memory
// peaks, wait for data) in compare.md and compare.json, with curves by scripts/plot_compare.py
// (accuracy.png, loss.png, memory.png). Runs of different models are compared and flagged.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "training/run/epoch_record.h"

namespace training {

struct ComparedRun {
  std::filesystem::path dir;
  std::string name;  // its column's heading: the folder's name, or its path where names repeat
  // Every key of config.yaml, "section.key" -> value, and what the run decided (decisions.json)
  // as "decided.training.memory_format", "decided.checkpointing.blocks" and ".predicted_peak".
  std::map<std::string, std::string> config;
  std::vector<EpochRecord> epochs;
  std::string stopped;  // where a run that has not reached its end stands (stopped_at); "" if none
};

// Reads a run directory (config.yaml and metrics.jsonl with at least one epoch); UserError naming
// the directory and what is missing.
ComparedRun read_compared_run(const std::filesystem::path& dir);

// The keys whose values differ between the runs (output.* left out: it names the run only).
std::vector<std::string> differing_keys(const std::vector<ComparedRun>& runs);

std::string compare_markdown(const std::vector<ComparedRun>& runs);

struct CompareRequest {
  std::vector<std::string> run_dirs;
  std::string output_dir;  // default: runs/<date>-<time>-compare
};

// Refuses no run, a directory that holds no run, and an output directory that already
// holds a comparison (UserError: exit 2); writes compare.md, compare.json and the plots (a missing
// Python only costs the plots, said once). Returns the output directory.
std::filesystem::path compare_command(const CompareRequest& request);

}  // namespace training
