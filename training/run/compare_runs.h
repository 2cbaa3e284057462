// `train compare RUN_DIR... [--output DIR]`: finished runs side by side, one column per run (one
// run alone is a table of one column): the config keys whose values differ between the runs, the
// model, device, accuracy (final and best), time per epoch, images/s and its ratio to the first
// run, memory peaks and the wait for data; written as compare.md and compare.json, with overlaid
// curves drawn by scripts/plot_compare.py (accuracy.png: test accuracy per epoch and against wall
// time; loss.png: test loss likewise; memory.png: peak allocated and reserved per epoch). Runs of
// different models are compared all the same and flagged.
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
