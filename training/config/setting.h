// A step's setting as the studies vary it (sweep's grid, memory's measurements, plan's ranks):
// precision, checkpointing, layout, accumulation; the rest comes from the study's config.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "training/config/config.h"

namespace training {

struct Setting {
  Precision precision = Precision::FP32;
  // auto: the blocks are chosen under the study's budget (parts/checkpoint_choice.h)
  CheckpointMode checkpointing = CheckpointMode::Off;
  c10::MemoryFormat memory_format = c10::MemoryFormat::Contiguous;
  int64_t accumulate_steps = 1;  // micro-batches per optimizer step

  // The tables' spelling: "fp32 / checkpointing off / contiguous", "... / 4 micro-batches".
  std::string name() const;
  // The flag's spelling (--settings, file names): "bf16+checkpointing+channels_last",
  // "+checkpointing=auto"; the accumulation is the config's.
  std::string label() const;
  static std::optional<Setting> parse(const std::string& label);  // nullopt: not a label

  // Its fields in sweep.json, memory_breakdown.json and plan.json: checkpointing false, true or
  // "auto". from_json throws std::invalid_argument naming the field.
  nlohmann::ordered_json json() const;
  static Setting from_json(const nlohmann::json& json);

  void apply_to(Config& config) const;  // the four keys set; checkpointing.blocks left to auto
  // The flags that make `train` run it at `batch`: every key set (a run left to decide its layout
  // could take the other one); the accumulation where above 1 or `accumulation_always`.
  std::string set_flags(int64_t batch, bool accumulation_always = false) const;

  // Why a card cannot predict it ("" where it can): auto's blocks depend on the budget it runs
  // under, which the CPU's recording does not have. What to predict instead is spelt as `train
  // memory --settings` takes it, or as `train sweep` (`sweep`) does.
  std::string unpredictable(bool sweep = false) const;

  bool operator==(const Setting& other) const {
    return precision == other.precision && checkpointing == other.checkpointing &&
           memory_format == other.memory_format && accumulate_steps == other.accumulate_steps;
  }
};

}  // namespace training
