#include "training/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "training/config/config_writer.h"
#include "training/config/config_yaml.h"
#include "training/config/validate.h"
#include "training/platform/device.h"
#include "training/platform/memory.h"

namespace training {
namespace {

using config_yaml::choice_text;
using config_yaml::Choices;
using config_yaml::kMaxInt;

const Choices<int64_t> kArchs = {
    {"resnet18", 18}, {"resnet34", 34}, {"resnet50", 50}, {"resnet101", 101}, {"resnet152", 152}};
const Choices<models::Stem> kStems = {{"cifar", models::Stem::Cifar},
                                      {"imagenet", models::Stem::ImageNet}};
const Choices<data::Source> kSources = {{"auto", data::Source::Auto},
                                        {"binary", data::Source::Binary},
                                        {"images", data::Source::Images},
                                        {"synthetic", data::Source::Synthetic}};
const Choices<Precision> kPrecisions = {
    {"fp32", Precision::FP32}, {"bf16", Precision::BF16}, {"fp16", Precision::FP16}};
const Choices<c10::MemoryFormat> kMemoryFormats = {
    {"contiguous", c10::MemoryFormat::Contiguous},
    {"channels_last", c10::MemoryFormat::ChannelsLast}};
const Choices<std::optional<c10::MemoryFormat>> kMemoryFormatModes = {
    {"auto", std::nullopt},
    {"contiguous", c10::MemoryFormat::Contiguous},
    {"channels_last", c10::MemoryFormat::ChannelsLast}};
const Choices<LoaderKind> kLoaders = {{"batched", LoaderKind::Batched},
                                      {"torch_data", LoaderKind::TorchData}};
const Choices<CudaGraphMode> kCudaGraphModes = {
    {"off", CudaGraphMode::Off}, {"on", CudaGraphMode::On}, {"auto", CudaGraphMode::Auto}};
const Choices<SweepLauncher> kLaunchers = {{"local", SweepLauncher::Local},
                                           {"slurm", SweepLauncher::Slurm}};
const Choices<CheckpointGranularity> kGranularities = {
    {"block", CheckpointGranularity::Block},
    {"stage", CheckpointGranularity::Stage},
    {"segments", CheckpointGranularity::Segments}};
const Choices<DistributedBackend> kBackends = {{"auto", DistributedBackend::Auto},
                                               {"gloo", DistributedBackend::Gloo},
                                               {"nccl", DistributedBackend::Nccl}};
const Choices<ScheduleKind> kSchedules = {{"constant", ScheduleKind::Constant},
                                          {"cosine", ScheduleKind::Cosine},
                                          {"onecycle", ScheduleKind::OneCycle},
                                          {"step", ScheduleKind::Step}};

// The schema: every section and key, its type and its allowed values, listed once. Reading,
// writing and listing keys all walk this. It is longer than 80 lines because it is one table, one
// line per key; split, the table would be harder to read and to extend.
template <class V>
void walk(V& v, Config& c) {  // NOLINT(readability-function-size): one table, see above
  v.section("model", [&] {
    v.choice("arch", c.model.depth(), kArchs);
    v.choice("stem", c.model.stem(), kStems);
    v.integer("num_classes", c.model.num_classes(), 1, 100000);
    v.boolean("zero_init_residual", c.model.zero_init_residual());
  });
  v.section("data", [&] {
    v.choice("source", c.data.dataset.source(), kSources);
    v.text("root", c.data.dataset.root());
    v.integer("train_limit", c.data.dataset.train_limit(), 0, kMaxInt);
    v.integer("test_limit", c.data.dataset.test_limit(), 0, kMaxInt);
    v.integer("synthetic_train_size", c.data.dataset.synthetic_train_size(), 1, 10000000);
    v.integer("synthetic_test_size", c.data.dataset.synthetic_test_size(), 1, 10000000);
    v.boolean("augment", c.data.augment);
    v.boolean("device_resident", c.data.device_resident);
    v.integer_or_auto("prefetch", c.data.prefetch, 0, 64);
    v.real("simulated_delay_ms", c.data.simulated_delay_ms, 0.0, 60000.0);
    v.choice("loader", c.data.loader, kLoaders);
    v.integer("workers", c.data.workers, 0, 64);
    v.integer("image_size", c.data.image_size, kMinImageSize, kMaxImageSize);
  });
  v.section("training", [&] {
    v.word("device", c.training.device);
    v.integer("epochs", c.training.epochs, 1, 100000);
    v.integer("max_steps", c.training.max_steps, 0, kMaxInt);
    v.integer("batch_size", c.training.batch_size, 1, kMaxBatchSize);
    v.integer("accumulate_steps", c.training.accumulate_steps, 1, kMaxAccumulateSteps);
    v.integer("eval_batch_size", c.training.eval_batch_size, 1, kMaxBatchSize);
    v.integer("seed", c.training.seed, 0, kMaxInt);
    v.real("label_smoothing", c.training.label_smoothing, 0.0, 0.99);
    v.integer("log_every_steps", c.training.log_every_steps, 1, 1000000);
    v.integer("threads", c.training.threads, 0, kMaxThreads);
    v.choice("precision", c.training.precision, kPrecisions);
    v.choice("memory_format", c.training.memory_format, kMemoryFormatModes);
    v.boolean("cudnn_benchmark", c.training.cudnn_benchmark);
    v.boolean("allow_tf32", c.training.allow_tf32);
    v.boolean("eval_flip", c.training.eval_flip);
    v.reals("accuracy_thresholds", c.training.accuracy_thresholds, 0.0, 1.0, /*percent=*/true);
    v.choice("cuda_graph", c.training.cuda_graph, kCudaGraphModes);
    v.real("ema_decay", c.training.ema_decay, 0.0, 0.99999);
  });
  v.section("optimizer", [&] {
    v.real("lr", c.optimizer.lr(), 1e-12, 1e3);
    v.real("momentum", c.optimizer.momentum(), 0.0, 0.999999);
    v.boolean("nesterov", c.optimizer.nesterov());
    v.real("weight_decay", c.optimizer.weight_decay(), 0.0, 1.0);
    v.boolean("decay_norm_and_bias", c.optimizer.decay_norm_and_bias());
    v.boolean("fused", c.optimizer.fused());
  });
  v.section("schedule", [&] {
    v.choice("name", c.schedule.kind(), kSchedules);
    v.real("warmup_epochs", c.schedule.warmup_epochs(), 0.0, 100000.0);
    v.real("warmup_start_factor", c.schedule.warmup_start_factor(), 0.0, 1.0);
    v.real("min_lr_factor", c.schedule.min_lr_factor(), 0.0, 1.0);
    v.integers("milestones", c.schedule.milestones(), 1, 100000);
    v.real("gamma", c.schedule.gamma(), 1e-6, 1.0);
    v.real("pct_start", c.schedule.pct_start(), 0.01, 0.99);
    v.real("div_factor", c.schedule.div_factor(), 1.0, 1e6);
    v.real("final_div_factor", c.schedule.final_div_factor(), 1.0, 1e9);
  });
  v.section("checkpointing", [&] {
    v.hint(
        "checkpointing recomputes activations in backward; writing checkpoint.pt is "
        "checkpoint.enabled",
        /*for_values=*/false);
    v.boolean_or_auto("enabled", c.checkpointing.mode(), CheckpointMode::Off, CheckpointMode::On,
                      CheckpointMode::Auto);
    v.choice("granularity", c.checkpointing.granularity(), kGranularities);
    v.integer("segments", c.checkpointing.segments(), 1, 1000);
    v.bytes("budget", c.checkpointing.budget());
    v.real("headroom", c.checkpointing.headroom(), 0.0, 0.9, /*percent=*/true);
    v.optional_texts("blocks", c.checkpointing.blocks());
  });
  v.section("memory", [&] {
    v.bytes("limit", c.memory.limit);
    v.boolean("snapshot", c.memory.snapshot);
    v.integer("snapshot_max_entries", c.memory.snapshot_max_entries, 1, kMaxInt);
  });
  v.section("monitor", [&] {
    v.real("sample_period", c.monitor.sample_period, 0.0, 3600.0);
    v.real("data_wait_threshold", c.monitor.data_wait_threshold, 0.0, 1.0, /*percent=*/true);
    v.real("utilization_threshold", c.monitor.utilization_threshold, 0.0, 1.0, /*percent=*/true);
    v.boolean("tensorboard", c.monitor.tensorboard);
  });
  v.section("profiler", [&] {
    v.boolean("enabled", c.profiler.enabled);
    v.integers("steps", c.profiler.steps, 1, kMaxInt, /*non_empty=*/true);
    v.integer("top", c.profiler.top, 1, 1000);
    v.boolean("record_shapes", c.profiler.record_shapes);
  });
  v.section("checkpoint", [&] {
    v.hint(
        "checkpoint writes checkpoint.pt to resume from; recomputing activations (gradient "
        "checkpointing) is the section checkpointing",
        /*for_values=*/true);
    v.boolean("enabled", c.checkpoint.enabled);
  });
  v.section("output", [&] {
    v.text("dir", c.output.dir);
    v.text("name", c.output.name, "\"\" for the date-time name");
  });
  v.section("sweep", [&] {
    v.integers("batch_sizes", c.sweep.batch_sizes, 1, kMaxBatchSize, /*non_empty=*/true);
    v.choices("precisions", c.sweep.precisions, kPrecisions);
    v.booleans_or_auto("checkpointing", c.sweep.checkpointing, CheckpointMode::Off,
                       CheckpointMode::On, CheckpointMode::Auto);
    v.choices("memory_formats", c.sweep.memory_formats, kMemoryFormats);
    v.integers("accumulate_steps", c.sweep.accumulate_steps, 1, kMaxAccumulateSteps,
               /*non_empty=*/true);
    v.integer("warmup_steps", c.sweep.warmup_steps, 0, 1000);
    v.integer("measure_steps", c.sweep.measure_steps, 1, 10000);
    v.boolean("find_max", c.sweep.find_max);
    v.integer("max_batch", c.sweep.max_batch, 1, kMaxBatchSize);
    v.byte_sizes("predict_for", c.sweep.predict_for);
    v.integer("trial_timeout", c.sweep.trial_timeout, 1, 7 * 86400);
    v.integer("time_budget", c.sweep.time_budget, 0, kMaxTimeBudget);
    v.boolean("data_parallel", c.sweep.data_parallel);
    v.choice("launcher", c.sweep.launcher, kLaunchers);
    v.section("slurm", [&] { v.texts("options", c.sweep.slurm.options); });
    v.integers("devices", c.sweep.devices, 0, 1023);
  });
  v.section("distributed", [&] {
    v.choice("backend", c.distributed.backend, kBackends);
    v.integer("bucket_mb", c.distributed.bucket_mb, 1, 1024);
    v.integer("timeout_seconds", c.distributed.timeout_seconds, 1, 86400);
    v.text("interface", c.distributed.interface, "\"\" to find it");
  });
}

std::string yaml_without(const Config& config, std::vector<std::string> omitted) {
  config_yaml::Writer writer(std::move(omitted));
  Config copy = config;  // walk() takes a mutable Config; the writer only reads it
  walk(writer, copy);
  return writer.str();
}

}  // namespace

static_assert(kAutoPrefetch == config_yaml::kAuto, "data.prefetch's auto is the reader's auto");

Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<Override>& overrides, ConfigRead read) {
  YAML::Node root;
  try {
    const auto documents = YAML::LoadAll(yaml_text);
    if (documents.size() > 1) {
      throw ConfigError(origin + ": holds " + std::to_string(documents.size()) +
                        " YAML documents (separated by '---'); a config is one document, "
                        "so join them or keep one");
    }
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::ParserException& e) {
    throw ConfigError(origin + ": YAML syntax error at line " + std::to_string(e.mark.line + 1) +
                      ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (root.IsDefined() && !root.IsNull() && !root.IsMap()) {
    throw ConfigError(origin +
                      ": expected a mapping of sections (model, data, training, ...) "
                      "at the top level, got " +
                      config_yaml::describe(root));
  }
  config_yaml::check_duplicate_keys(root, origin, "");
  std::map<std::string, std::string> overridden;
  for (const auto& override : overrides) config_yaml::apply_override(root, override, overridden);

  Config config;
  config_yaml::Reader reader(root, origin, overridden, read == ConfigRead::Record);
  walk(reader, config);
  reader.check_sections();
  config.training.device = device_spec_text(config.training.device);  // "cuda:01" is cuda:1
  config.origin = origin;
  config.flags = std::move(overridden);
  validate(
      config, [&](const std::string& key) { return config.origin_of(key); }, read);
  return config;
}

std::string Config::origin_of(const std::string& key) const {
  const auto found = flags.find(key);
  return found != flags.end() ? found->second : origin;
}

std::string Config::origin_of(const std::vector<std::string>& keys) const {
  for (const auto& key : keys) {
    if (const auto found = flags.find(key); found != flags.end()) return found->second;
  }
  return origin;
}

Config load_config(const std::string& path, const std::vector<Override>& overrides,
                   ConfigRead read) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status)) {
    throw ConfigError(path + ": is a directory, expected a YAML config file");
  }
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw ConfigError(path + ": is not a regular file (a device, pipe or socket), expected a " +
                      "YAML config file");
  }
  // A config is a few KiB; a bound keeps a wrong path (a disk image) from filling memory.
  if (std::filesystem::is_regular_file(status) && std::filesystem::file_size(path, ec) > kMiB) {
    throw ConfigError(path + ": is larger than 1 MiB, expected a YAML config file of a few KiB");
  }
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open config file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path, overrides, read);
}

int64_t effective_batch_size(const Config& config, int64_t ranks) {
  return config.training.batch_size * config.training.accumulate_steps * ranks;
}

std::string batch_description(const Config& config, int64_t ranks) {
  const int64_t n = config.training.accumulate_steps;
  if (n == 1 && ranks == 1) return std::to_string(config.training.batch_size);
  return std::to_string(config.training.batch_size) +
         (n > 1 ? " x " + std::to_string(n) + " micro-batches" : "") +
         (ranks > 1 ? " x " + std::to_string(ranks) + " ranks" : "") + " = " +
         std::to_string(effective_batch_size(config, ranks)) + " per optimizer step";
}

std::string cuda_graph_obstacle(const Config& config) {
  if (config.training.precision == Precision::FP16) {
    return "needs training.precision fp32 or bf16; fp16's GradScaler decides on the host whether "
           "to skip a step, which a captured graph cannot (auto runs fp16 eager)";
  }
  if (!config.optimizer.fused()) {
    return "needs optimizer.fused: true (the fused SGD reads the learning rate from device "
           "memory, so the schedule goes on between replays)";
  }
  if (config.training.accumulate_steps > 1) {
    return "is not combined with training.accumulate_steps > 1 (a captured step is one whole "
           "optimizer step; auto runs accumulation eager)";
  }
  if (config.checkpointing.enabled()) {
    return "is not combined with checkpointing.enabled (the recomputation saves and restores the "
           "device's RNG state on the host, which a capture forbids)";
  }
  return "";
}

std::string to_yaml(const Config& config) {
  return yaml_without(config, {});
}

std::string run_yaml(const Config& config) {
  return yaml_without(config, {"sweep"});
}

std::vector<std::string> config_keys() {
  config_yaml::Reader reader(YAML::Node(), "keys", {});  // an empty document: defaults everywhere
  Config config;
  walk(reader, config);
  return reader.keys();
}

int64_t prefetch_for(const DataConfig& data, bool cuda) {
  return data.prefetch != kAutoPrefetch ? data.prefetch : (cuda ? 2 : 0);
}

std::string memory_format_name(c10::MemoryFormat format) {
  return choice_text(kMemoryFormats, format);
}

std::string memory_format_name(const std::optional<c10::MemoryFormat>& format) {
  return choice_text(kMemoryFormatModes, format);
}

namespace {
template <typename E>
std::optional<E> named(const Choices<E>& choices, const std::string& name) {
  for (const auto& [text, value] : choices) {
    if (text == name) return value;
  }
  return std::nullopt;
}
}  // namespace

std::optional<Precision> precision_named(const std::string& name) {
  return named(kPrecisions, name);
}

std::optional<c10::MemoryFormat> memory_format_named(const std::string& name) {
  return named(kMemoryFormats, name);
}

std::string source_name(data::Source source) {
  return choice_text(kSources, source);
}

std::string granularity_name(CheckpointGranularity granularity) {
  return choice_text(kGranularities, granularity);
}

std::string checkpointing_setting_name(CheckpointMode mode) {
  return mode == CheckpointMode::Off ? "off" : mode == CheckpointMode::On ? "on" : "auto";
}

std::string schedule_name(ScheduleKind kind) {
  return choice_text(kSchedules, kind);
}

std::string arch_name(const models::ResNetOptions& model) {
  return choice_text(kArchs, model.depth());
}

std::string stem_name(const models::ResNetOptions& model) {
  return choice_text(kStems, model.stem());
}

}  // namespace training
