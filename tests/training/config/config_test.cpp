#include "training/config/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "test_support.h"
#include "training/config/config_yaml.h"
#include "training/config/validate.h"

namespace {

using training::Config;
using training::ConfigError;

std::string error_of(const std::string& yaml,
                     const std::vector<training::Override>& overrides = {}) {
  try {
    training::parse_config(yaml, "c.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Config, EmptyFileGivesDefaults) {
  const Config c = training::parse_config("", "c.yaml");
  EXPECT_EQ(c.model.depth(), 50);
  EXPECT_EQ(c.model.stem(), models::Stem::Cifar);
  EXPECT_EQ(c.training.device, "auto");
  EXPECT_EQ(c.schedule.kind(), training::ScheduleKind::Cosine);
  EXPECT_TRUE(c.checkpoint.enabled);
}

TEST(Config, ReadsEveryKindOfValue) {
  const Config c = training::parse_config(R"(
model: {arch: resnet18, stem: imagenet, num_classes: 7, zero_init_residual: true}
data: {source: synthetic, root: /x, train_limit: 100, augment: false, prefetch: 0}
training: {device: "cuda:1", epochs: 3, batch_size: 32, label_smoothing: 0.1, seed: 9}
optimizer: {lr: 0.2, nesterov: false, weight_decay: 1e-4}
schedule: {name: step, milestones: [2, 5], gamma: 0.5}
output: {dir: out, name: exp1}
)",
                                          "c.yaml");
  EXPECT_EQ(c.model.depth(), 18);
  EXPECT_EQ(c.model.stem(), models::Stem::ImageNet);
  EXPECT_EQ(c.model.num_classes(), 7);
  EXPECT_TRUE(c.model.zero_init_residual());
  EXPECT_EQ(c.data.dataset.source(), data::Source::Synthetic);
  EXPECT_EQ(c.data.dataset.train_limit(), 100);
  EXPECT_FALSE(c.data.augment);
  EXPECT_EQ(c.training.device, "cuda:1");
  EXPECT_DOUBLE_EQ(c.training.label_smoothing, 0.1);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay(), 1e-4);
  EXPECT_EQ(c.schedule.milestones(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(c.output.name, "exp1");
}

TEST(Config, OverridesApplyInOrderAndCreateSections) {
  const Config c = training::parse_config("training: {epochs: 3}", "c.yaml",
                                          {"training.epochs=5", "optimizer.lr=0.01",
                                           "schedule.milestones=[1, 2]", "training.epochs=6"});
  EXPECT_EQ(c.training.epochs, 6);
  EXPECT_DOUBLE_EQ(c.optimizer.lr(), 0.01);
  EXPECT_EQ(c.schedule.milestones().size(), 2u);
}

// An override changes one key, also where YAML aliases share the key's node: with
// `batch_size: &b 32`, `--set training.batch_size=16` changed eval_batch_size and
// sweep.batch_sizes[0] too (round 3).
TEST(Config, AnOverrideChangesOneKeyThroughYamlAliases) {
  const auto c = training::parse_config(
      "training: {batch_size: &b 32, eval_batch_size: *b}\nsweep: {batch_sizes: [*b, 64]}\n",
      "anchors.yaml", {"training.batch_size=16"});
  EXPECT_EQ(c.training.batch_size, 16);
  EXPECT_EQ(c.training.eval_batch_size, 32);
  EXPECT_EQ(c.sweep.batch_sizes, (std::vector<int64_t>{32, 64}));
}

// Round 4: the same through a section alias: yaml-cpp shares the section's node, and the override
// was written into it, so both sections changed.
TEST(Config, AnOverrideChangesOneSectionThroughAYamlSectionAlias) {
  const std::string yaml = "checkpoint: &c {enabled: true}\ncheckpointing: *c\n";
  auto c = training::parse_config(yaml, "anchors.yaml", {"checkpointing.enabled=false"});
  EXPECT_TRUE(c.checkpoint.enabled);
  EXPECT_EQ(c.checkpointing.mode(), training::CheckpointMode::Off);
  c = training::parse_config(yaml, "anchors.yaml", {"checkpoint.enabled=false"});
  EXPECT_FALSE(c.checkpoint.enabled);
  EXPECT_EQ(c.checkpointing.mode(), training::CheckpointMode::On);
  // Without an override both read the anchored section.
  c = training::parse_config(yaml, "anchors.yaml");
  EXPECT_TRUE(c.checkpoint.enabled);
  EXPECT_EQ(c.checkpointing.mode(), training::CheckpointMode::On);
}

TEST(Config, YamlRoundTripIsExact) {
  const Config c = training::parse_config(
      "optimizer: {lr: 0.1, weight_decay: 5.0e-4}\nschedule: {name: onecycle, pct_start: 0.3}\n"
      "data: {root: 'my data'}\ntraining: {label_smoothing: 0.1, precision: bf16}\n"
      "memory: {limit: 12GiB}\nsweep: {checkpointing: [off, on], predict_for: [24GiB, 1.5GB],"
      " memory_formats: [channels_last], precisions: [fp16, bf16]}",
      "c.yaml");
  const std::string yaml = training::to_yaml(c);
  const Config back = training::parse_config(yaml, "round-trip");
  EXPECT_EQ(training::to_yaml(back), yaml);
  EXPECT_DOUBLE_EQ(back.optimizer.weight_decay(), 5e-4);
  EXPECT_EQ(back.data.dataset.root(), "my data");
  EXPECT_NE(yaml.find("lr: 0.1\n"), std::string::npos) << yaml;
  EXPECT_EQ(back.memory.limit, int64_t{12} << 30);
  EXPECT_EQ(back.sweep.checkpointing,
            (std::vector<training::CheckpointMode>{training::CheckpointMode::Off,
                                                   training::CheckpointMode::On}));
  EXPECT_EQ(back.sweep.predict_for, (std::vector<int64_t>{int64_t{24} << 30, 1500000000}));
  EXPECT_NE(yaml.find("predict_for: [24GiB, 1500000000B]"), std::string::npos) << yaml;
  // Twelfth pass: `--predict-for 2` was 2 bytes; a card's size takes its unit, at most 1024TiB.
  EXPECT_EQ(error_of("sweep: {predict_for: [2000TiB]}")
                .find("c.yaml: sweep.predict_for: expected a list of sizes with their unit"),
            0u);
  EXPECT_EQ(error_of("sweep: {predict_for: [24]}"),
            "c.yaml: sweep.predict_for: '24' in the list has no unit; did you mean 24GiB or 24MiB "
            "or 24B?");
  EXPECT_EQ(back.sweep.precisions, (std::vector<training::Precision>{training::Precision::FP16,
                                                                     training::Precision::BF16}));
  EXPECT_EQ(back.training.precision, training::Precision::BF16);
  EXPECT_NE(yaml.find("limit: 12GiB\n"), std::string::npos) << yaml;
}

// A run's config.yaml is what the run was asked: train sweep's grid is not, and is left out; the
// text reads back to the same run with the sweep's defaults.
// sweep.max_batch bounds the find-max search only: below a grid batch without it, nothing to say.
TEST(Config, AMaxBatchBelowAGridBatchIsTakenWithoutFindMax) {
  EXPECT_EQ(error_of("sweep: {batch_sizes: [16], max_batch: 8}"), "no error");
  EXPECT_EQ(error_of("sweep: {batch_sizes: [8], find_max: true, max_batch: 8}"), "no error");
}

TEST(Config, ARunsYamlLeavesOutTheSweepsSection) {
  const Config c = training::parse_config(
      "training: {batch_size: 16}\nsweep: {batch_sizes: [8, 9], find_max: true}\n", "c.yaml");
  const std::string yaml = training::run_yaml(c);
  EXPECT_EQ(yaml.find("sweep"), std::string::npos) << yaml;
  EXPECT_NE(training::to_yaml(c).find("sweep:"), std::string::npos);
  const Config back = training::parse_config(yaml, "run");
  EXPECT_EQ(back.training.batch_size, 16);
  EXPECT_FALSE(back.sweep.find_max);
  EXPECT_EQ(training::run_yaml(back), yaml);
  Config without = c;
  without.sweep = training::SweepConfig{};
  EXPECT_EQ(training::to_yaml(back), training::to_yaml(without));
}

TEST(Config, KeysListEverySection) {
  const auto keys = training::config_keys();
  for (const char* key :
       {"model.arch", "data.train_limit", "training.max_steps", "optimizer.lr",
        "schedule.milestones", "checkpoint.enabled", "output.dir", "sweep.slurm.options"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
  // A sub-section is no key of its own; the name issue 54 shipped as is gone.
  for (const char* gone : {"sweep.slurm", "sweep.slurm_options", "slurm.options"}) {
    EXPECT_EQ(std::find(keys.begin(), keys.end(), gone), keys.end()) << gone;
  }
}

// A sub-section (sweep.slurm inside sweep) is read from a file and from --set, written by to_yaml
// as a mapping in its section, and read back to the same config.
TEST(Config, ASubSectionIsReadSetWrittenAndReadBack) {
  const std::vector<std::string> options = {"--partition=gpu", "--gres=gpu:1"};
  const Config file = training::parse_config(
      "sweep: {launcher: slurm, slurm: {options: [--partition=gpu, --gres=gpu:1]}}", "c.yaml");
  EXPECT_EQ(file.sweep.slurm.options, options);
  const std::string yaml = training::to_yaml(file);
  EXPECT_NE(yaml.find("  slurm:\n    options: [\"--partition=gpu\", \"--gres=gpu:1\"]\n"),
            std::string::npos)
      << yaml;
  const Config back = training::parse_config(yaml, "round-trip");
  EXPECT_EQ(back.sweep.slurm.options, options);
  EXPECT_EQ(training::to_yaml(back), yaml);
  // --set, into no section, into an empty one and over the file's value; the flag is named as
  // where the key was set.
  for (const std::string& base :
       {std::string(""), std::string("sweep: {find_max: false}"),
        std::string("sweep: {slurm: {options: [--qos=low]}}"), std::string("sweep: {slurm: }")}) {
    const Config set = training::parse_config(
        base, "c.yaml",
        {"sweep.launcher=slurm", "sweep.slurm.options=[--partition=gpu, --gres=gpu:1]"});
    EXPECT_EQ(set.sweep.slurm.options, options) << base;
    EXPECT_EQ(set.origin_of("sweep.slurm.options"), "--set sweep.slurm.options") << base;
    EXPECT_EQ(training::to_yaml(set), yaml) << base;
  }
  // A resume's edited keys are said as --set would set them, the sub-section's too.
  EXPECT_EQ(training::config_yaml::differing_assignments(training::to_yaml(Config{}), yaml),
            (std::vector<std::string>{"sweep.launcher=slurm",
                                      "sweep.slurm.options=[--partition=gpu, --gres=gpu:1]"}));
}

// An override below a section changes one key also where a YAML alias shares the sub-section's
// node (each mapping on the path gets a node of its own, as a section does).
TEST(Config, AnOverrideChangesOneKeyThroughASubSectionAlias) {
  YAML::Node root = YAML::Load("a: {s: &s {o: [1], p: 2}}\nb: {s: *s}\n");
  std::map<std::string, std::string> overridden;
  training::config_yaml::apply_override(root, {"a.s.o=[3]"}, overridden);
  EXPECT_EQ(root["a"]["s"]["o"][0].as<int>(), 3);
  EXPECT_EQ(root["a"]["s"]["p"].as<int>(), 2);
  EXPECT_EQ(root["b"]["s"]["o"][0].as<int>(), 1);
  EXPECT_EQ(overridden, (std::map<std::string, std::string>{{"a.s.o", "--set a.s.o"}}));
  training::config_yaml::apply_override(root, {"c.t.u=4"}, overridden);  // created on the way
  EXPECT_EQ(root["c"]["t"]["u"].as<int>(), 4);
  EXPECT_EQ(overridden.at("c"), "--set c");
  EXPECT_EQ(overridden.at("c.t"), "--set c.t");
}

TEST(Config, LoadsAFileAndNamesAMissingOne) {
  test_support::TempDir dir;
  std::ofstream(dir / "ok.yaml") << "training: {epochs: 2}\n";
  EXPECT_EQ(training::load_config((dir / "ok.yaml").string()).training.epochs, 2);
  try {
    training::load_config((dir / "nope.yaml").string());
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "nope.yaml").string() + ": cannot open config file");
  }
}

// Each bad config and the exact one-line message it must produce.
struct BadConfig {
  std::string name;
  std::string yaml;
  std::vector<training::Override> overrides;
  std::string message;
};

void PrintTo(const BadConfig& bad, std::ostream* out) {
  *out << bad.name;
}

class BadConfigs : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigs, ProduceTheirMessage) {
  const auto& bad = GetParam();
  EXPECT_EQ(error_of(bad.yaml, bad.overrides), bad.message);
}

INSTANTIATE_TEST_SUITE_P(
    Messages, BadConfigs,
    ::testing::Values(
        BadConfig{"UnknownKeySuggestsNearest",
                  "training: {epoch: 3}",
                  {},
                  "c.yaml: unknown key 'training.epoch' (did you mean 'training.epochs'?)"},
        BadConfig{"UnknownSection",
                  "modle: {arch: resnet18}",
                  {},
                  "c.yaml: unknown section 'modle' (did you mean 'model'?)"},
        BadConfig{"UnknownKeyListsValidOnes",
                  "training: {zzz: 1}",
                  {},
                  "c.yaml: unknown key 'training.zzz' (valid: device, epochs, max_steps, "
                  "batch_size, accumulate_steps, eval_batch_size, seed, label_smoothing, "
                  "log_every_steps, threads, "
                  "precision, memory_format, cudnn_benchmark, allow_tf32, eval_flip, "
                  "accuracy_thresholds, cuda_graph, ema_decay)"},
        BadConfig{"UnknownKeyOfASectionListsItsSubSectionsKeys",
                  "sweep: {zzz: 1}",
                  {},
                  "c.yaml: unknown key 'sweep.zzz' (valid: batch_sizes, precisions, "
                  "checkpointing, memory_formats, accumulate_steps, warmup_steps, measure_steps, "
                  "find_max, max_batch, predict_for, trial_timeout, time_budget, data_parallel, "
                  "launcher, slurm.options, devices)"},
        // Issue 54's spelling is the one key; the name it shipped as is an unknown key.
        BadConfig{"TheRetiredSlurmOptionsKeyPointsToTheSubSection",
                  "sweep: {launcher: slurm, slurm_options: [--partition=gpu]}",
                  {},
                  "c.yaml: unknown key 'sweep.slurm_options' (did you mean "
                  "'sweep.slurm.options'?)"},
        // Hostile pass 8: a find-max bound below a grid batch was taken, and the search that
        // never ran said "at least 8 (the search stops at sweep.max_batch, 4)".
        BadConfig{"AFindMaxBoundBelowAGridBatch",
                  "sweep: {batch_sizes: [2, 8], find_max: true}",
                  {"sweep.max_batch=4"},
                  "--set sweep.max_batch: sweep.max_batch: 4 is below the grid's batch 8 "
                  "(sweep.batch_sizes), and with sweep.find_max no batch above sweep.max_batch is "
                  "searched; give a sweep.max_batch of at least 8, or a smaller sweep.batch_sizes"},
        BadConfig{"AFindMaxBoundBelowAGridBatchInTheFile",
                  "sweep: {batch_sizes: [16], find_max: true, max_batch: 15}",
                  {},
                  "c.yaml: sweep.max_batch: 15 is below the grid's batch 16 (sweep.batch_sizes), "
                  "and with sweep.find_max no batch above sweep.max_batch is searched; give a "
                  "sweep.max_batch of at least 16, or a smaller sweep.batch_sizes"},
        BadConfig{"SetTheRetiredSlurmOptionsKey",
                  "",
                  {"sweep.slurm_options=[--partition=gpu]"},
                  "--set sweep.slurm_options: unknown key 'sweep.slurm_options' (did you mean "
                  "'sweep.slurm.options'?)"},
        BadConfig{"UnknownKeyInASubSection",
                  "sweep: {slurm: {option: [--partition=gpu]}}",
                  {},
                  "c.yaml: unknown key 'sweep.slurm.option' (did you mean "
                  "'sweep.slurm.options'?)"},
        BadConfig{"SetUnknownKeyInASubSection",
                  "",
                  {"sweep.slurm.partition=gpu"},
                  "--set sweep.slurm.partition: unknown key 'sweep.slurm.partition' (valid: "
                  "options)"},
        BadConfig{"SubSectionIsAList",
                  "sweep: {slurm: [--partition=gpu]}",
                  {},
                  "c.yaml: sweep.slurm: expected a mapping of keys, got a list"},
        BadConfig{"SetASubSectionToAList",
                  "",
                  {"sweep.slurm=[--partition=gpu]"},
                  "--set sweep.slurm: sweep.slurm: expected a mapping of keys, got a list"},
        BadConfig{"SubSectionKeyOfTheWrongType",
                  "sweep: {slurm: {options: --partition=gpu}}",
                  {},
                  "c.yaml: sweep.slurm.options: expected a list of strings, none of them blank, "
                  "got '--partition=gpu'"},
        BadConfig{"SetSubSectionKeyOfTheWrongType",
                  "sweep: {slurm: {options: []}}",
                  {"sweep.slurm.options={a: 1}"},
                  "--set sweep.slurm.options: sweep.slurm.options: expected a list of strings, "
                  "none of them blank, got a mapping"},
        BadConfig{"SetBelowAKeyThatIsNoSection",
                  "training: {epochs: 3}",
                  {"training.epochs.first=1"},
                  "--set training.epochs.first: 'training.epochs' is not a section"},
        BadConfig{"SetBelowAKeyThatIsNotThere",
                  "",
                  {"training.epochs.first=1"},
                  "--set training.epochs: training.epochs: expected an integer in [1, 100000], "
                  "got a mapping"},
        BadConfig{"SetWithAnEmptyPathPart",
                  "",
                  {"sweep..options=[]"},
                  "--set sweep..options=[]: expected section.key=value, e.g. training.epochs=2"},
        BadConfig{"SetWithATrailingDot",
                  "",
                  {"training.epochs.=3"},
                  "--set training.epochs.=3: expected section.key=value, e.g. training.epochs=2"},
        // BatchNorm in training needs more than one value per channel: a batch of 1 where
        // layer4's map is 1x1 does not train (LibTorch: "Expected more than 1 value per channel
        // when training"), refused where it is asked for.
        BadConfig{"ABatchOfOneWhereLayer4Is1x1DoesNotTrain",
                  "model: {stem: imagenet}\ntraining: {batch_size: 1}",
                  {},
                  "c.yaml: training.batch_size: 1 does not train: with model.stem imagenet at "
                  "data.image_size 32, layer4's feature map is 1x1, and a BatchNorm in training "
                  "needs more than one value per channel (batch x height x width); use a batch of "
                  "2 or more, or data.image_size 33 or more"},
        BadConfig{"ABatchOfOneSetByAFlagIsNamedWithIt",
                  "model: {stem: cifar}\ndata: {image_size: 8}",
                  {training::Override("training.batch_size=1", "--batch-size")},
                  "--batch-size: training.batch_size: 1 does not train: with model.stem cifar at "
                  "data.image_size 8, layer4's feature map is 1x1, and a BatchNorm in training "
                  "needs more than one value per channel (batch x height x width); use a batch of "
                  "2 or more, or data.image_size 9 or more"},
        BadConfig{"ASweepBatchOfOneWhereLayer4Is1x1",
                  "model: {stem: imagenet}",
                  {"sweep.batch_sizes=[1, 8]"},
                  "--set sweep.batch_sizes: sweep.batch_sizes: 1 does not train: with model.stem "
                  "imagenet at data.image_size 32, layer4's feature map is 1x1, and a BatchNorm in "
                  "training needs more than one value per channel (batch x height x width); use a "
                  "batch of 2 or more, or data.image_size 33 or more"},
        BadConfig{"NotAnInteger",
                  "training: {epochs: three}",
                  {},
                  "c.yaml: training.epochs: expected an integer in [1, 100000], got 'three'"},
        BadConfig{"BelowRange",
                  "training: {epochs: 0}",
                  {},
                  "c.yaml: training.epochs: expected an integer in [1, 100000], got 0"},
        BadConfig{"FractionForInteger",
                  "training: {batch_size: 2.5}",
                  {},
                  "c.yaml: training.batch_size: expected an integer in [1, 1048576], got '2.5'"},
        BadConfig{"ImageSizeZero",
                  "data: {image_size: 0}",
                  {},
                  "c.yaml: data.image_size: expected an integer in [8, 1024], got 0"},
        BadConfig{"ImageSizeNegative",
                  "",
                  {"data.image_size=-224"},
                  "--set data.image_size: data.image_size: expected an integer in [8, 1024], got "
                  "-224"},
        BadConfig{"ImageSizeFraction",
                  "data: {image_size: 224.5}",
                  {},
                  "c.yaml: data.image_size: expected an integer in [8, 1024], got '224.5'"},
        BadConfig{"ImageSizeAbsurd",
                  "data: {image_size: 100000}",
                  {},
                  "c.yaml: data.image_size: expected an integer in [8, 1024], got 100000"},
        BadConfig{"NegativeRate",
                  "optimizer: {lr: -1}",
                  {},
                  "c.yaml: optimizer.lr: expected a number in [1e-12, 1000], got -1"},
        BadConfig{"NanRate",
                  "optimizer: {lr: .nan}",
                  {},
                  "c.yaml: optimizer.lr: expected a number in [1e-12, 1000], got '.nan'"},
        BadConfig{"UnknownChoice",
                  "model: {arch: resnet51}",
                  {},
                  "c.yaml: model.arch: expected one of resnet18, resnet34, resnet50, resnet101, "
                  "resnet152, got 'resnet51'"},
        BadConfig{"NotABoolean",
                  "data: {augment: maybe}",
                  {},
                  "c.yaml: data.augment: expected true or false, got 'maybe'"},
        BadConfig{"SectionIsAList",
                  "model: [1, 2]",
                  {},
                  "c.yaml: model: expected a mapping of keys, got a list"},
        BadConfig{
            "ScalarForList",
            "schedule: {milestones: 3}",
            {},
            "c.yaml: schedule.milestones: expected a list of integers in [1, 100000], got '3'"},
        BadConfig{"MilestonesNotIncreasing",
                  "schedule: {milestones: [5, 2]}",
                  {},
                  "c.yaml: schedule.milestones: expected strictly increasing epochs"},
        BadConfig{"BadDevice",
                  "training: {device: gpu}",
                  {},
                  "c.yaml: training.device: expected auto, cpu, cuda or cuda:<index>, got 'gpu'"},
        BadConfig{"OneCycleWithWarmup",
                  "schedule: {name: onecycle, warmup_epochs: 1}",
                  {},
                  "c.yaml: schedule.warmup_epochs: must be 0 with schedule.name onecycle, which "
                  "warms up by itself (see schedule.pct_start)"},
        BadConfig{"NesterovWithoutMomentum",
                  "optimizer: {momentum: 0}",
                  {},
                  "c.yaml: optimizer.nesterov: true needs optimizer.momentum > 0 (set nesterov: "
                  "false)"},
        BadConfig{"NameWithSlash",
                  "output: {name: a/b}",
                  {},
                  "c.yaml: output.name: expected a folder name without '/', got 'a/b'"},
        BadConfig{"YamlSyntax",
                  "training: {epochs: [1\n",
                  {},
                  "c.yaml: YAML syntax error at line 2, column 1: end of sequence flow not found"},
        BadConfig{"TopLevelList",
                  "- a\n- b\n",
                  {},
                  "c.yaml: expected a mapping of sections (model, data, training, ...) at the "
                  "top level, got a list"},
        BadConfig{"SetWithoutValue",
                  "",
                  {"training.epochs"},
                  "--set training.epochs: expected key.path=value"},
        BadConfig{"SetWithoutSection",
                  "",
                  {"epochs=3"},
                  "--set epochs=3: expected section.key=value, e.g. training.epochs=2"},
        BadConfig{"SetUnknownKey",
                  "",
                  {"training.epoch=3"},
                  "--set training.epoch: unknown key 'training.epoch' (did you mean "
                  "'training.epochs'?)"},
        BadConfig{"SetOutOfRange",
                  "training: {epochs: 3}",
                  {"training.epochs=-2"},
                  "--set training.epochs: training.epochs: expected an integer in [1, 100000], "
                  "got -2"},
        BadConfig{"BadByteSize",
                  "memory: {limit: 12 apples}",
                  {},
                  "c.yaml: memory.limit: expected a size with its unit, like 12GiB, 512MiB or "
                  "1.5GB, got '12 apples'"},
        BadConfig{"EmptyGridList",
                  "sweep: {batch_sizes: []}",
                  {},
                  "c.yaml: sweep.batch_sizes: expected a non-empty list of integers in [1, "
                  "1048576], got an empty list"},
        BadConfig{"UnknownPrecision",
                  "training: {precision: fp8}",
                  {},
                  "c.yaml: training.precision: expected one of fp32, bf16, fp16, got 'fp8'"},
        BadConfig{"UnknownGranularity",
                  "checkpointing: {granularity: layer}",
                  {},
                  "c.yaml: checkpointing.granularity: expected one of block, stage, segments, got "
                  "'layer'"},
        BadConfig{"PrefetchNeitherAutoNorNumber",
                  "data: {prefetch: lots}",
                  {},
                  "c.yaml: data.prefetch: expected auto or an integer in [0, 64], got 'lots'"},
        BadConfig{"NegativeSimulatedDelay",
                  "data: {simulated_delay_ms: -5}",
                  {},
                  "c.yaml: data.simulated_delay_ms: expected a number in [0, 60000], got -5"},
        BadConfig{"UnknownBackend",
                  "distributed: {backend: mpi}",
                  {},
                  "c.yaml: distributed.backend: expected one of auto, gloo, nccl, got 'mpi'"},
        BadConfig{"NegativeSamplePeriod",
                  "monitor: {sample_period: -1}",
                  {},
                  "c.yaml: monitor.sample_period: expected a number in [0, 3600], got -1"},
        BadConfig{"ProfilerWindowBackwards",
                  "profiler: {steps: [9, 3]}",
                  {},
                  "c.yaml: profiler.steps: expected [first, last] optimizer steps with first <= "
                  "last, e.g. [5, 7]"},
        BadConfig{"SetInvalidYaml",
                  "",
                  {"model.arch=[resnet"},
                  "--set model.arch=[resnet: value is not valid YAML (end of sequence flow not "
                  "found)"},
        BadConfig{"TorchDataIsNotDeviceResident",
                  "data: {loader: torch_data, device_resident: true}",
                  {},
                  "c.yaml: data.device_resident: not with data.loader: torch_data, whose batches "
                  "are stacked on the host; use data.loader: batched, or device_resident: false"},
        BadConfig{"UnknownLoader",
                  "data: {loader: dali}",
                  {},
                  "c.yaml: data.loader: expected one of batched, torch_data, got 'dali'"},
        BadConfig{"DuplicateKey",
                  "training:\n  epochs: 3\n  batch_size: 64\n  epochs: 30\n",
                  {},
                  "c.yaml: duplicate key 'training.epochs' at lines 2 and 4 (YAML would keep the "
                  "first silently); keep one"},
        BadConfig{"DuplicateSection",
                  "model: {arch: resnet18}\ndata: {augment: false}\nmodel: {arch: resnet50}\n",
                  {},
                  "c.yaml: duplicate key 'model' at lines 1 and 3 (YAML would keep the first "
                  "silently); keep one"},
        BadConfig{"SetUnknownSectionNamesTheFlag",
                  "model: {arch: resnet18}",
                  {"foo.bar=1"},
                  "--set foo: unknown section 'foo' (valid: model, data, training, optimizer, "
                  "schedule, checkpointing, memory, monitor, profiler, checkpoint, output, sweep, "
                  "distributed)"},
        BadConfig{"ShorthandFlagIsNamed",
                  "training: {device: cpu}",
                  {training::Override("training.device=cdua", "--device")},
                  "--device: training.device: expected auto, cpu, cuda or cuda:<index>, got "
                  "'cdua'"},
        BadConfig{"ShorthandFlagWithBadYamlIsNamed",
                  "",
                  {training::Override("memory.limit=[1", "--memory-limit")},
                  "--memory-limit [1: value is not valid YAML (end of sequence flow not found)"},
        BadConfig{"SweepAxisListsEachValueOnce",
                  "sweep: {batch_sizes: [32, 64, 32]}",
                  {},
                  "c.yaml: sweep.batch_sizes: item 3 repeats item 1; list each value once"},
        BadConfig{"SweepAxisFromAFlagListsEachValueOnce",
                  "",
                  {training::Override("sweep.precisions=[bf16, bf16]", "--precisions")},
                  "--precisions: sweep.precisions: item 2 repeats item 1; list each value once"},
        BadConfig{"AccuracyThresholdsListEachValueOnce",
                  "",
                  {training::Override("training.accuracy_thresholds=[0.05,0.05]", "--set")},
                  "--set training.accuracy_thresholds: training.accuracy_thresholds: item 2 "
                  "repeats item 1; list each value once"},
        BadConfig{"AccuracyThresholdsWrittenTwoWaysAreOneValue",
                  "training: {accuracy_thresholds: [0.9, 0.93, 0.90]}",
                  {},
                  "c.yaml: training.accuracy_thresholds: item 3 repeats item 1; list each value "
                  "once"},
        BadConfig{"SlurmOptionsListEachValueOnce",
                  "sweep: {slurm: {options: [--partition=gpu, --partition=gpu]}}",
                  {},
                  "c.yaml: sweep.slurm.options: item 2 repeats item 1; list each value once"},
        BadConfig{"CudaGraphModeIsAChoice",
                  "training: {cuda_graph: yes}",
                  {},
                  "c.yaml: training.cuda_graph: expected one of off, on, auto, got 'yes'"},
        BadConfig{"EmaDecayBelowOne",
                  "training: {ema_decay: 1.0}",
                  {},
                  "c.yaml: training.ema_decay: expected a number in [0, 0.99999], got 1.0"},
        BadConfig{"CudaGraphRefusesFp16",
                  "training: {cuda_graph: on, precision: fp16}",
                  {},
                  "c.yaml: training.cuda_graph: on needs training.precision fp32 or bf16; fp16's "
                  "GradScaler decides on the host whether to skip a step, which a captured graph "
                  "cannot (auto runs fp16 eager)"},
        BadConfig{"CudaGraphNeedsTheFusedSgd",
                  "training: {cuda_graph: on}\noptimizer: {fused: false}",
                  {},
                  "c.yaml: training.cuda_graph: on needs optimizer.fused: true (the fused SGD "
                  "reads the learning rate from device memory, so the schedule goes on between "
                  "replays)"},
        BadConfig{"CudaGraphRefusesCheckpointing",
                  "checkpointing: {enabled: true}",
                  {"training.cuda_graph=on"},
                  "--set training.cuda_graph: training.cuda_graph: on is not combined with "
                  "checkpointing.enabled (the recomputation saves and restores the device's RNG "
                  "state on the host, which a capture forbids)"},
        BadConfig{"SetOfAKeyCheckedAcrossKeysIsNamed",
                  "optimizer: {nesterov: true}",
                  {"optimizer.momentum=0"},
                  "c.yaml: optimizer.nesterov: true needs optimizer.momentum > 0 (set nesterov: "
                  "false)"}),
    [](const ::testing::TestParamInfo<BadConfig>& info) { return info.param.name; });

}  // namespace

namespace {

// Where every BatchNorm sees more than one value per channel per image, a batch of 1 trains and is
// taken: the CIFAR stem at 32x32 (layer4 is 4x4), the ImageNet stem at 224 (7x7).
TEST(Config, ABatchOfOneIsTakenWhereItTrains) {
  EXPECT_EQ(training::parse_config("training: {batch_size: 1}", "c.yaml").training.batch_size, 1);
  EXPECT_EQ(
      training::parse_config(
          "model: {stem: imagenet}\ndata: {image_size: 224}\ntraining: {batch_size: 1}", "c.yaml")
          .training.batch_size,
      1);
  EXPECT_EQ(
      training::batch_norm_refusal(training::parse_config("model: {stem: imagenet}", "c.yaml"), 2),
      "");
}

TEST(Config, TheReferenceDocumentsEveryKey) {
  const std::string reference =
      test_support::read_text(std::string(PROJECT_SOURCE_DIR) + "/docs/reference.md");
  ASSERT_FALSE(reference.empty());
  for (const auto& key : training::config_keys()) {
    EXPECT_NE(reference.find("| `" + key + "` |"), std::string::npos)
        << key << " missing in docs/reference.md";
  }
}

TEST(Config, ADirectoryIsNotAConfig) {
  test_support::TempDir dir;
  try {
    training::load_config(dir.path().string());
    FAIL() << "a directory was read as a config";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.path().string() + ": is a directory, expected a YAML config file");
  }
}

// yaml-cpp alone reads "010" as YAML 1.1's octal 8: every integer is read as the decimal it shows.
TEST(Config, NumbersAreReadAsWritten) {
  const Config c = training::parse_config(
      "training: {epochs: 010, seed: 0123, batch_size: +64}\nschedule: {milestones: [08, 09]}\n",
      "c.yaml");
  EXPECT_EQ(c.training.epochs, 10);
  EXPECT_EQ(c.training.seed, 123);
  EXPECT_EQ(c.training.batch_size, 64);
  EXPECT_EQ(c.schedule.milestones(), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(training::parse_config("", "c.yaml", {"training.epochs=007"}).training.epochs, 7);
  for (const std::string text : {"0x10", "0o10", "1e3", "1.0", "99999999999999999999"}) {
    EXPECT_EQ(error_of("training: {epochs: " + text + "}"),
              "c.yaml: training.epochs: expected an integer in [1, 100000], got '" + text + "'");
  }
}

// A second document after '---' was silently ignored.
TEST(Config, ASecondYamlDocumentIsRefused) {
  EXPECT_EQ(error_of("training: {epochs: 3}\n---\ntraining: {epochs: 30}\n"),
            "c.yaml: holds 2 YAML documents (separated by '---'); a config is one document, so "
            "join them or keep one");
  EXPECT_EQ(training::parse_config("---\ntraining: {epochs: 3}\n", "c.yaml").training.epochs, 3);
}

// /dev/zero was read until memory ran out; a FIFO would block the read forever.
TEST(Config, OnlyARegularFileOfBoundedSizeIsRead) {
  for (const std::string device : {"/dev/zero", "/dev/null"}) {
    try {
      training::load_config(device);
      ADD_FAILURE() << device << " was read as a config";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), device +
                                           ": is not a regular file (a device, pipe or socket), "
                                           "expected a YAML config file");
    }
  }
  test_support::TempDir dir;
  std::ofstream(dir / "big.yaml") << "# " << std::string(2 << 20, 'x') << "\n";
  try {
    training::load_config((dir / "big.yaml").string());
    ADD_FAILURE() << "a 2 MiB file was read as a config";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "big.yaml").string() +
                                         ": is larger than 1 MiB, expected a YAML config file "
                                         "of a few KiB");
  }
}

TEST(Config, ShippedConfigsAreValid) {
  for (const char* name : {"resnet50_cifar10.yaml", "resnet50_cifar10_fast.yaml",
                           "resnet50_cifar10_224.yaml", "quick_cpu.yaml", "sweep_cpu.yaml"}) {
    EXPECT_NO_THROW(training::load_config(std::string(PROJECT_SOURCE_DIR) + "/configs/" + name))
        << name;
  }
}

// Where each key was set: the flag, else the file. A value checked later, where it is used (a
// KeyError), is said with it, as the config's own checks are.
TEST(Config, AKeyCheckedWhereItIsUsedIsSaidWithWhereItWasSet) {
  const auto config = training::parse_config(
      "training: {device: cpu}\n", "run.yaml",
      {training::Override("training.device=cuda:9", "--device"), "memory.limit=1GiB"});
  EXPECT_EQ(config.origin_of("training.device"), "--device");
  EXPECT_EQ(config.origin_of("memory.limit"), "--set memory.limit");
  EXPECT_EQ(config.origin_of("training.epochs"), "run.yaml");
  try {
    training::with_key_origins(config,
                               []() -> int { throw training::KeyError("training.device", "x"); });
    FAIL() << "expected a ConfigError";
  } catch (const training::ConfigError& e) {
    EXPECT_STREQ(e.what(), "--device: training.device: x");
  }
  EXPECT_EQ(training::with_key_origins(config, [] { return 7; }), 7);
}

}  // namespace

namespace {

TEST(Config, SplitItemsReadsACommaListOneWayAndRefusesAnEmptyItem) {
  using training::config_yaml::split_items;
  EXPECT_EQ(split_items("fp32", "--precisions"), std::vector<std::string>{"fp32"});
  EXPECT_EQ(split_items("fp32,bf16", "--precisions"), (std::vector<std::string>{"fp32", "bf16"}));
  // Spaces around an item are not part of it, for every list flag as for the YAML lists the grid's
  // flags become ("fp32, bf16" ran a sweep, and --settings refused it as "' bf16'").
  EXPECT_EQ(split_items(" fp32 ,\tbf16 ", "--settings"),
            (std::vector<std::string>{"fp32", "bf16"}));
  for (const std::string text : {"fp32,", ",fp32", "32,,64", "", "fp32, ,bf16", " "}) {
    try {
      split_items(text, "--precisions");
      ADD_FAILURE() << "'" << text << "' was read";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), "--precisions: '" + text +
                                           "' has an empty item; expected items separated by "
                                           "single commas, e.g. a,b");
    }
  }
}

}  // namespace

namespace {

// checkpoint (save the weights) and checkpointing (recompute activations) differ by three letters:
// an unknown key in either, or a bad value in checkpoint, says what the other one is for.
TEST(Config, TheNearNamesakesCheckpointAndCheckpointingPointToEachOther) {
  EXPECT_EQ(error_of("checkpoint: {blocks: [layer1.0]}\n"),
            "c.yaml: unknown key 'checkpoint.blocks' (valid: enabled); checkpoint writes "
            "checkpoint.pt to resume from; recomputing activations (gradient checkpointing) is "
            "the section checkpointing");
  EXPECT_EQ(error_of("checkpoint: {enabled: auto}\n"),
            "c.yaml: checkpoint.enabled: expected true or false, got 'auto'; checkpoint writes "
            "checkpoint.pt to resume from; recomputing activations (gradient checkpointing) is "
            "the section checkpointing");
  EXPECT_EQ(error_of("checkpointing: {every_epoch: 1}\n"),
            "c.yaml: unknown key 'checkpointing.every_epoch' (valid: enabled, granularity, "
            "segments, budget, headroom, blocks); checkpointing recomputes activations in "
            "backward; writing checkpoint.pt is checkpoint.enabled");
  // A bad value in checkpointing says only what is wrong with it.
  EXPECT_EQ(error_of("checkpointing: {headroom: 3}\n"),
            "c.yaml: checkpointing.headroom: expected a number in [0, 0.9] or a percentage up to "
            "90%, got 3");
}

// auto's refusal advises "checkpointing.headroom at most 5.0% (now 10%: ...)": typed back as
// printed, the share was refused ("expected a number in [0, 0.9], got '5.0%'").
TEST(Config, TheHeadroomIsTakenAsAPercentageAsTheProgramPrintsIt) {
  EXPECT_DOUBLE_EQ(training::parse_config("", "c.yaml", {"checkpointing.headroom=5.0%"})
                       .checkpointing.headroom(),
                   0.05);
  EXPECT_DOUBLE_EQ(
      training::parse_config("checkpointing: {headroom: 10%}\n", "c.yaml").checkpointing.headroom(),
      0.1);
  EXPECT_DOUBLE_EQ(
      training::parse_config("checkpointing: {headroom: 0.2}\n", "c.yaml").checkpointing.headroom(),
      0.2);
  for (const std::string text : {"95%", "-1%", "%", "5%%", "x%"}) {
    EXPECT_EQ(error_of("checkpointing: {headroom: '" + text + "'}\n"),
              "c.yaml: checkpointing.headroom: expected a number in [0, 0.9] or a percentage up to "
              "90%, got " +
                  (text == "95%" || text == "-1%" ? text : "'" + text + "'"));
  }
  EXPECT_EQ(error_of("training: {label_smoothing: 5%}\n")
                .rfind("c.yaml: training.label_smoothing: "
                       "expected a number in [0, ",
                       0),
            0u);
}

}  // namespace

namespace {

// A size of 0 was read as none: --memory-limit 0 trained without a limit, checkpointing.budget=0
// asked for memory.limit. It is refused, naming the key; none still says none.
TEST(Config, ASizeOfZeroIsRefusedNotReadAsNone) {
  EXPECT_EQ(error_of("memory: {limit: 0}\n"),
            "c.yaml: memory.limit: expected a size above 0, or none, got '0'");
  EXPECT_EQ(error_of("", {"checkpointing.budget=0B"}),
            "--set checkpointing.budget: checkpointing.budget: expected a size above 0, or none, "
            "got '0B'");
  EXPECT_EQ(error_of("", {training::Override("memory.limit=0.0GiB", "--memory-limit")}),
            "--memory-limit: memory.limit: expected a size above 0, or none, got '0.0GiB'");
  EXPECT_EQ(training::parse_config("memory: {limit: none}\n", "c.yaml").memory.limit, 0);
}

// Sixteenth pass: nothing where a size goes (--memory-limit ' ', --set memory.limit=, a config's
// `limit:` with no value) was read as none and trained without a limit. Refused as 0 is; only none
// says none.
TEST(Config, NothingWhereASizeGoesIsRefusedNotReadAsNone) {
  EXPECT_EQ(error_of("memory:\n  limit:\n"),
            "c.yaml: memory.limit: expected a size like 12GiB, or none, got nothing");
  EXPECT_EQ(error_of("", {training::Override("memory.limit= ", "--memory-limit")}),
            "--memory-limit: memory.limit: expected a size like 12GiB, or none, got nothing");
  EXPECT_EQ(error_of("", {"checkpointing.budget="}),
            "--set checkpointing.budget: checkpointing.budget: expected a size like 12GiB, or "
            "none, got nothing");
}

}  // namespace

namespace {

// Sixteenth pass: nothing where a name, a list of names or a path goes (`--set
// checkpointing.blocks=`, `output.name=`, `output.dir=' '`, `distributed.interface=~`) was taken as
// the default (null: auto measures; "": the date-time name) or as a folder named " ". Nothing is
// refused for every key, as it is where a size goes; a quoted "" and an explicit null are values.
TEST(Config, NothingWhereANameListOrPathGoesIsRefusedNotReadAsTheDefault) {
  EXPECT_EQ(error_of("", {"checkpointing.blocks="}),
            "--set checkpointing.blocks: checkpointing.blocks: expected a list of names or null, "
            "got nothing");
  // "" is offered where the key takes it (a hostile helper: it was offered where it is refused).
  const std::string named = "expected a string (\"\" for the date-time name), got nothing";
  EXPECT_EQ(error_of("", {"output.name="}), "--set output.name: output.name: " + named);
  EXPECT_EQ(error_of("", {"output.dir= "}),
            "--set output.dir: output.dir: expected a string, got nothing");
  EXPECT_EQ(error_of("", {"distributed.interface=~"}),
            "--set distributed.interface: distributed.interface: expected a string (\"\" to "
            "find it), got nothing");
  EXPECT_EQ(error_of("output:\n  name:\n"), "c.yaml: output.name: " + named);
  EXPECT_EQ(error_of("output:\n  name: !!null\n"), "c.yaml: output.name: " + named);
  EXPECT_EQ(error_of("", {training::Override("training.device= ", "--device")}),
            "--device: training.device: expected a string, got nothing");
  // A line break or tab in a folder's name broke every line and command naming it.
  EXPECT_EQ(error_of("output: {name: \"a\\nb\"}\n"),
            "c.yaml: output.name: expected a folder name in UTF-8 without control characters (a "
            "line break, a tab)");
  EXPECT_EQ(error_of("output: {dir: ' '}\n"),
            "c.yaml: output.dir: expected a string that is not only blanks, got ' '");
  EXPECT_EQ(error_of("sweep: {slurm: {options: ['--qos=low', ' ']}}\n"),
            "c.yaml: sweep.slurm.options: expected a list of strings, none of them blank, got ' ' "
            "in the list");
  EXPECT_EQ(
      error_of("", {"training.epochs="}),
      "--set training.epochs: training.epochs: expected an integer in [1, 100000], got nothing");
  // A comment or a line break after '=' is nothing too; a section a flag gives null would drop
  // the file's keys in it; a string tagged !!str is a string; blanks are any white space.
  EXPECT_EQ(error_of("", {"checkpointing.blocks=# all"}),
            "--set checkpointing.blocks: checkpointing.blocks: expected a list of names or null, "
            "got nothing");
  EXPECT_EQ(error_of("", {"checkpointing.blocks=\n"}),
            "--set checkpointing.blocks: checkpointing.blocks: expected a list of names or null, "
            "got nothing");
  EXPECT_EQ(error_of("sweep: {slurm: {options: [--qos=low]}}\n", {"sweep.slurm=~"}),
            "--set sweep.slurm: sweep.slurm: expected a mapping of keys, got nothing");
  EXPECT_EQ(training::parse_config("sweep:\n  slurm:\n", "c.yaml").sweep.slurm.options.size(), 0u);
  EXPECT_EQ(training::parse_config("output: {name: !!str \"\"}\n", "c.yaml").output.name, "");
  // Eighteenth pass: an empty `!!str` is "" from --set as in a file (it was nothing from --set).
  EXPECT_EQ(training::parse_config("output:\n  name: !!str\n", "c.yaml").output.name, "");
  EXPECT_EQ(
      training::parse_config("output: {name: x}\n", "c.yaml", {"output.name=!!str"}).output.name,
      "");
  EXPECT_EQ(error_of("output:\n  dir: !!str\n"),
            "c.yaml: output.dir: expected a folder path, got an empty string");
  EXPECT_EQ(error_of("", {"output.dir=!!str"}),
            "--set output.dir: output.dir: expected a folder path, got an empty string");
  // A name of only Unicode's white space (a no-break space, U+3000) shows as nothing too, and is
  // shown escaped.
  EXPECT_EQ(error_of("output: {name: \"\u00a0\u3000\"}\n"),
            "c.yaml: output.name: expected a string that is not only blanks, got "
            "'\\u00a0\\u3000'");
  EXPECT_EQ(error_of("", {"output.dir=\u200b"}),
            "--set output.dir: output.dir: expected a string, got nothing");
  // A --set value is one line: YAML joined "1\nGiB" into "1 GiB", which no other flag takes.
  EXPECT_EQ(error_of("", {"memory.limit=1\nGiB"}),
            "--set memory.limit=1\\nGiB: expected a value on one line");
  EXPECT_EQ(error_of("", {"checkpointing.budget=1\r\nGiB"}),
            "--set checkpointing.budget=1\\r\\nGiB: expected a value on one line");
  // Nineteenth pass: a folder's name that starts or ends with a blank shows as another's (" x",
  // "x\u00a0" as "x"): refused from --set as from a file, a leading U+FEFF too (yaml-cpp dropped
  // it from --set as a byte-order mark and took "x").
  // The invisible ones are shown escaped: the refused name shows why.
  for (const auto& [name, shown] :
       std::vector<std::pair<std::string, std::string>>{{" x", " x"},
                                                        {"x ", "x "},
                                                        {"x\u00a0", "x\\u00a0"},
                                                        {"\u3000x", "\\u3000x"},
                                                        {"\ufeffx", "\\ufeffx"},
                                                        {"x\u200b", "x\\u200b"}}) {
    const std::string said = " starts and ends with a visible character, got '";
    EXPECT_EQ(error_of("output: {name: \"" + name + "\"}\n"),
              "c.yaml: output.name: expected a folder name that" + said + shown + "'");
    EXPECT_EQ(error_of("", {"output.name=\"" + name + "\""}),
              "--set output.name: output.name: expected a folder name that" + said + shown + "'");
    EXPECT_EQ(error_of("", {"output.dir=\"runs/" + name + "\""}),
              "--set output.dir: output.dir: expected a folder path whose every part" + said +
                  "runs/" + shown + "'");
  }
  EXPECT_EQ(error_of("", {"output.name=\ufeffx"}),
            "--set output.name: output.name: expected a folder name that starts and ends with a "
            "visible character, got '\\ufeffx'");
  EXPECT_EQ(training::parse_config("", "c.yaml", {"output.name=a\u00a0b"}).output.name, "a\u00a0b");
  // `!!null` is null from --set as in a file; a duplicate key in a mapping --set gives is refused.
  EXPECT_FALSE(training::parse_config("checkpointing: {enabled: auto}\n", "c.yaml",
                                      {"checkpointing.blocks=!!null"})
                   .checkpointing.blocks()
                   .has_value());
  EXPECT_EQ(error_of("", {"sweep.slurm={options: [a], options: [b]}"}).substr(0, 68),
            "--set sweep.slurm={options: [a], options: [b]}: duplicate key 'sweep");
  EXPECT_EQ(error_of("", {"sweep.slurm={~: 1}"}),
            "--set sweep.slurm: expected a mapping of keys by name");
  // A folder's name with a C1 control character (NEL) or YAML's "\_" (read as a lone byte 0xA0).
  EXPECT_EQ(error_of("", {"output.name=a\u0085b"}),
            "--set output.name: output.name: expected a folder name in UTF-8 without control "
            "characters (a line break, a tab)");
  EXPECT_EQ(error_of("output: {name: \"\\_\"}\n"),
            "c.yaml: output.name: expected a string that is not only blanks, got '\\xa0'");
  // A mapping given to a section sets the keys it names and keeps the file's others
  // (`--set 'sweep.slurm={}'` dropped the file's options).
  const std::string slurm = "sweep: {slurm: {options: [--qos=low]}}\n";
  EXPECT_EQ(training::parse_config(slurm, "c.yaml", {"sweep.slurm={}"}).sweep.slurm.options,
            std::vector<std::string>{"--qos=low"});
  EXPECT_EQ(training::parse_config(slurm, "c.yaml", {"sweep.slurm={options: [-p, gpu]}"})
                .sweep.slurm.options,
            (std::vector<std::string>{"-p", "gpu"}));
  EXPECT_EQ(error_of(slurm, {"sweep.slurm={options: [' ']}"}),
            "--set sweep.slurm: sweep.slurm.options: expected a list of strings, none of them "
            "blank, got ' ' in the list");
  // A block form on one line is refused as a file refuses it after a key, saying the flow form.
  EXPECT_EQ(error_of(slurm, {"sweep.slurm=options: [a]"}),
            "--set sweep.slurm=options: [a]: value is not valid YAML (illegal map value; a mapping "
            "or list is written {key: value} or [a, b])");
  EXPECT_EQ(error_of("", {"sweep.slurm={partition: gpu}"}),
            "--set sweep.slurm: unknown key 'sweep.slurm.partition' (valid: options)");
  EXPECT_EQ(error_of("output: {dir: \"\\n\\t\"}\n"),
            "c.yaml: output.dir: expected a string that is not only blanks, got '\\n\\t'");
  // The values that say the default, as written.
  EXPECT_FALSE(training::parse_config("checkpointing: {enabled: auto, blocks: !!null}\n", "c.yaml")
                   .checkpointing.blocks()
                   .has_value());
  const Config quoted =
      training::parse_config("output: {name: \"\"}\ndistributed: {interface: ''}\n", "c.yaml",
                             {training::Override("checkpointing.blocks=null"),
                              training::Override("checkpointing.enabled=auto")});
  EXPECT_EQ(quoted.output.name, "");
  EXPECT_EQ(quoted.distributed.interface, "");
  EXPECT_FALSE(quoted.checkpointing.blocks().has_value());
  EXPECT_EQ(training::parse_config("checkpointing: {enabled: auto}\n", "c.yaml",
                                   {"checkpointing.blocks=[]"})
                .checkpointing.blocks()
                ->size(),
            0u);
}

}  // namespace

namespace {

// Nineteenth pass: white space around a number, a boolean or a choice (`--set
// 'training.precision=" bf16"'`, a file's `epochs: "2 "`) was refused where a flag's plain value
// and a size had it trimmed. One rule: only a string is taken as typed.
TEST(Config, WhiteSpaceAroundANumberABooleanOrAChoiceIsIgnoredAsAroundASize) {
  const Config c = training::parse_config(
      "training:\n  precision: \" bf16\"\n  epochs: \"2 \"\n  batch_size: \"\\t16\"\n"
      "  allow_tf32: \" false\"\n  cuda_graph: \" auto \"\n  max_steps: |\n    7\n"
      "optimizer: {lr: \" 0.5\"}\ncheckpointing: {enabled: \" auto\", headroom: \" 5%\"}\n"
      "profiler: {steps: [\" 1\", \"2 \"]}\nsweep: {precisions: [\" fp32\", \"bf16 \"]}\n",
      "c.yaml", {"model.arch=\" resnet18\"", "data.prefetch=\"auto \"", "memory.limit=\"none \""});
  EXPECT_EQ(c.training.precision, training::Precision::BF16);
  EXPECT_EQ(c.training.epochs, 2);
  EXPECT_EQ(c.training.batch_size, 16);
  EXPECT_FALSE(c.training.allow_tf32);
  EXPECT_EQ(c.training.max_steps, 7);
  EXPECT_DOUBLE_EQ(c.optimizer.lr(), 0.5);
  EXPECT_DOUBLE_EQ(c.checkpointing.headroom(), 0.05);
  EXPECT_EQ(c.profiler.steps, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(c.model.depth(), 18);
  EXPECT_EQ(c.data.prefetch, training::kAutoPrefetch);
  EXPECT_EQ(c.memory.limit, 0);
  EXPECT_EQ(c.checkpointing.mode(), training::CheckpointMode::Auto);
  EXPECT_EQ(c.training.cuda_graph, training::CudaGraphMode::Auto);
  EXPECT_EQ(c.sweep.precisions, (std::vector<training::Precision>{training::Precision::FP32,
                                                                  training::Precision::BF16}));
  // A share is a percentage too, with at most one space before its '%' (as before a size's unit);
  // a block's name is read as a choice is.
  const Config shares = training::parse_config(
      "monitor: {data_wait_threshold: \"20 %\", utilization_threshold: 50%}\n"
      "training: {accuracy_thresholds: [0.5, 90%]}\n"
      "checkpointing: {enabled: auto, blocks: [\" layer1.0\"]}\n",
      "c.yaml");
  EXPECT_DOUBLE_EQ(shares.monitor.data_wait_threshold, 0.2);
  EXPECT_DOUBLE_EQ(shares.monitor.utilization_threshold, 0.5);
  EXPECT_EQ(shares.training.accuracy_thresholds, (std::vector<double>{0.5, 0.9}));
  EXPECT_EQ(*shares.checkpointing.blocks(), std::vector<std::string>{"layer1.0"});
  // Refused as a share is: above its range, or with other white space before its '%'.
  EXPECT_EQ(error_of("training: {accuracy_thresholds: [0.5, 120%]}\n"),
            "c.yaml: training.accuracy_thresholds: expected a list of numbers in [0, 1] or "
            "percentages, got '120%' in the list");
  EXPECT_EQ(error_of("monitor: {data_wait_threshold: \"10  %\"}\n"),
            "c.yaml: monitor.data_wait_threshold: expected a number in [0, 1] or a percentage up "
            "to 100%, got '10  %'");
  EXPECT_NE(error_of("checkpointing: {headroom: \"10\\t%\"}\n").find("got '10\\t%'"),
            std::string::npos);
  for (const std::string bad : {"10  %", "10\u00a0%"}) {
    EXPECT_EQ(error_of("checkpointing: {headroom: \"" + bad + "\"}\n"),
              "c.yaml: checkpointing.headroom: expected a number in [0, 0.9] or a percentage up to "
              "90%, got '" +
                  bad + "'");
  }
  // Inside a value, white space is no part of any spelling.
  EXPECT_EQ(error_of("training: {precision: \"bf 16\"}\n"),
            "c.yaml: training.precision: expected one of fp32, bf16, fp16, got 'bf 16'");
  EXPECT_EQ(error_of("training: {epochs: \"2 0\"}\n"),
            "c.yaml: training.epochs: expected an integer in [1, 100000], got '2 0'");
  EXPECT_EQ(training::parse_config("training: {device: \" cpu\"}\n", "c.yaml").training.device,
            "cpu");
  // A string is taken as typed.
  EXPECT_EQ(training::parse_config("", "c.yaml", {"data.root=\" my data\""}).data.dataset.root(),
            " my data");
}

// A device's index is a number: its leading zeros are dropped as a number's are (epochs: 010 is
// 10), and the config written back names the device as PyTorch does.
TEST(Config, ADevicesIndexIsWrittenBackWithoutLeadingZerosAsANumberIs) {
  for (const auto& [given, read] :
       std::vector<std::pair<std::string, std::string>>{{"cuda:00", "cuda:0"},
                                                        {"cuda:01", "cuda:1"},
                                                        {"cuda:0012", "cuda:12"},
                                                        {"cuda:7", "cuda:7"},
                                                        {"cuda", "cuda"},
                                                        {"cpu", "cpu"}}) {
    const Config c = training::parse_config("training: {device: \"" + given + "\"}\n", "c.yaml");
    EXPECT_EQ(c.training.device, read) << given;
    EXPECT_NE(training::to_yaml(c).find("device: \"" + read + "\"\n"), std::string::npos) << given;
  }
  EXPECT_EQ(error_of("training: {device: \"cuda:12345\"}\n"),
            "c.yaml: training.device: expected auto, cpu, cuda or cuda:<index>, got 'cuda:12345'");
}

}  // namespace
