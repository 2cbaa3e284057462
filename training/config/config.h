// The one typed configuration of a run (YAML file -> --set overrides -> Config); config.cpp holds
// the schema, validated in one place, config_yaml.h the YAML machinery it drives.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "models/resnet.h"
#include "training/config/config_input.h"
#include "training/platform/distributed.h"
#include "training/platform/errors.h"
#include "training/platform/tensorboard.h"
#include "training/step/amp.h"
#include "training/step/optim.h"
#include "training/step/recompute.h"
#include "training/step/schedule.h"

namespace training {

inline constexpr int64_t kAutoPrefetch = -1;

// Which loader feeds the trainer: the project's batched loader (data/loader.h), or LibTorch's
// torch::data loader over the same dataset (data/torch_data.h).
enum class LoaderKind { Batched, TorchData };

// The largest training.threads and sweep.time_budget (7 days), also bench's and plan's flags'.
inline constexpr int64_t kMaxThreads = 4096;
inline constexpr int64_t kMaxTimeBudget = 7 * 86400;

// The side of CIFAR-10's images as stored (every reader refuses another size).
inline constexpr int64_t kStoredImageSize = 32;
// data.image_size's bounds: 8 keeps a feature map in every stage; 1024 is 20x ResNet-50's 224.
inline constexpr int64_t kMinImageSize = 8, kMaxImageSize = 1024;

// " at 224x224" where the images are resized, "" at the stored size: after the model or batch.
inline std::string resized_text(int64_t image_size) {
  if (image_size == kStoredImageSize) return "";
  return " at " + std::to_string(image_size) + "x" + std::to_string(image_size);
}

struct DataConfig {
  data::DataOptions dataset;     // source, root, limits, synthetic sizes
  bool augment = true;           // random crop (4-pixel padding) + horizontal flip when training
  bool device_resident = false;  // keep both uint8 splits on the training device
  // Batches prepared ahead by a background thread (0 = inline). kAutoPrefetch: 2 on CUDA, 0 on
  // the CPU, whose cores the step keeps busy and where the thread's OpenMP team makes libgomp
  // throttle its spin-waiting (measured: a quarter of the step rate lost on 2 cores).
  int64_t prefetch = kAutoPrefetch;
  double simulated_delay_ms = 0;  // extra time to prepare each training batch (pipeline studies)
  LoaderKind loader = LoaderKind::Batched;
  int64_t workers = 0;  // torch_data: LibTorch's worker threads (0: batches made in next())
  // The side images are resized to after augmentation, on the device (bilinear; 224 is where
  // ImageNet-style ResNet-50 recipes train CIFAR-10); every step and study follows it.
  int64_t image_size = kStoredImageSize;
};

// training.cuda_graph: the training step captured once in a CUDA graph and replayed
// (training/step/graphed_step.h). Auto: on for CUDA with fp32 or bf16 when training alone.
enum class CudaGraphMode { Off, On, Auto };

// sweep.launcher: trials as child processes here, or as one Slurm job array (sweep_slurm.h).
enum class SweepLauncher { Local, Slurm };

// sweep.slurm: the Slurm launcher's own keys, a section inside sweep.
struct SlurmConfig {
  // sbatch's options for the job array, as given (e.g. --partition=gpu, --gres=gpu:1).
  std::vector<std::string> options = {};
};

// The largest training.accumulate_steps (and sweep.accumulate_steps item) the config takes.
inline constexpr int64_t kMaxAccumulateSteps = int64_t{1} << 16;
// The largest batch a config takes (training.batch_size, eval_batch_size, sweep batches).
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 20;

struct TrainingConfig {
  std::string device = "auto";  // auto | cpu | cuda | cuda:<index>
  int64_t epochs = 30;
  int64_t max_steps = 0;     // stop after this many optimizer steps (0 = run all epochs)
  int64_t batch_size = 128;  // images per micro-batch (per rank when data-parallel)
  // Micro-batches per optimizer step (what steps, the schedule, max_steps and EMA count); an
  // epoch's last incomplete group is dropped.
  int64_t accumulate_steps = 1;  // at most kMaxAccumulateSteps
  int64_t eval_batch_size = 500;
  int64_t seed = 0;
  double label_smoothing = 0.0;
  int64_t log_every_steps = 50;  // progress line / running-loss read-back interval
  int64_t threads = 0;           // CPU intra-op threads (0 = LibTorch's default), up to kMaxThreads
  Precision precision = Precision::FP32;  // autocast dtype; fp16 adds the GradScaler
  // Of weights and inputs; empty = auto, chosen for the device before the run is built
  // (memory_format.h: channels_last on CUDA, the faster of the two measured on the CPU).
  std::optional<c10::MemoryFormat> memory_format;
  bool cudnn_benchmark = true;  // CUDA: let cuDNN time its algorithms once per shape
  bool allow_tf32 = true;       // CUDA (Ampere+): TF32 tensor cores for fp32 matmul/convolution
  // Evaluation averages each test image's logits with its mirror's (twice the forward passes).
  bool eval_flip = false;
  // Test accuracies whose first crossing is logged with the wall time (time to accuracy).
  std::vector<double> accuracy_thresholds = {0.90, 0.93, 0.94, 0.95};
  CudaGraphMode cuda_graph = CudaGraphMode::Off;
  double ema_decay = 0.0;  // evaluate the weights' moving average (0 = off; step/ema.h)
};

struct MemoryConfig {
  int64_t limit = 0;  // bytes; allocations beyond it fail like a real out-of-memory (0 = none)
  // CUDA: record the caching allocator's history over profiler.steps and write
  // memory_snapshot.pickle (pytorch.org/memory_viz); refused on the CPU.
  bool snapshot = false;
  int64_t snapshot_max_entries = 100000;  // allocator events kept (the newest)
};

// The batch-size sweep grid (train sweep): every combination of the four lists is a cell.
struct SweepConfig {
  std::vector<int64_t> batch_sizes = {32, 64, 128};
  std::vector<Precision> precisions = {Precision::FP32};
  std::vector<CheckpointMode> checkpointing = {CheckpointMode::Off};
  std::vector<c10::MemoryFormat> memory_formats = {c10::MemoryFormat::Contiguous};
  // Micro-batches per optimizer step (training.accumulate_steps) to measure: a trial's batch is
  // then the micro-batch, its step the optimizer step, its peak with the accumulated gradients.
  std::vector<int64_t> accumulate_steps = {1};
  int64_t warmup_steps = 2;               // steps per trial before measuring
  int64_t measure_steps = 5;              // measured steps per trial (median step time)
  bool find_max = false;                  // also search the largest batch that fits, per cell
  int64_t max_batch = 65536;              // find_max stops doubling here
  std::vector<int64_t> predict_for = {};  // card sizes (bytes) to predict the max batch for
  int64_t trial_timeout = 1800;           // seconds before a trial is killed
  // Seconds after which no new trial starts (0 = none, at most kMaxTimeBudget); with a budget the
  // grid runs batch by batch across the settings, so every setting gets its small batches first.
  int64_t time_budget = 0;
  // Each trial holds what one rank of a data-parallel run holds: a one-rank process group of
  // distributed.backend and c10d's reducer with its gradient buckets (distributed.bucket_mb).
  bool data_parallel = false;
  SweepLauncher launcher = SweepLauncher::Local;
  SlurmConfig slurm;
  // Local launcher on CUDA: the GPUs (indices) to run trials on, one trial per GPU at a time
  // (CUDA_VISIBLE_DEVICES); empty: one trial at a time on training.device.
  std::vector<int64_t> devices = {};
};

struct MonitorConfig {
  double sample_period = 1.0;           // seconds between device samples (0 = no gpu.jsonl)
  double data_wait_threshold = 0.10;    // warn when the loop waits for data longer than this share
  double utilization_threshold = 0.70;  // warn when mean GPU utilisation is below this
  bool tensorboard = tensorboard_built();  // events.out.tfevents.* in the run directory
};

struct ProfilerConfig {
  bool enabled = false;
  std::vector<int64_t> steps = {5, 7};  // first and last optimizer step (1-based) to trace
  int64_t top = 15;                     // rows of the operator table in the log
  bool record_shapes = false;
};

struct CheckpointConfig {
  bool enabled = true;  // write <run>/checkpoint.pt after every epoch and at the end
};

struct OutputConfig {
  std::string dir = "runs";  // parent of run directories
  std::string name;          // run directory name; empty = <date>-<time>-<arch>
};

// data.prefetch resolved for the device: "auto" means 2 on CUDA, 0 on the CPU.
int64_t prefetch_for(const DataConfig& data, bool cuda);

// The most training images the config alone says it has: synthetic data's size, or
// data.train_limit, whichever is smaller; 0 where only reading the data would tell.
int64_t train_images_at_most(const DataConfig& data);

// Why `train` would refuse `batch` in `accumulate_steps` micro-batches a step (more images a step
// than the `train_images` of the sweep's config; 0: not known), as sweep.md and plan.md say it:
// "batch 200 is more than the 128 training images of the sweep's config, which train refuses
// (training.batch_size)"; "" else.
std::string untrainable_batch(int64_t batch, int64_t accumulate_steps, int64_t train_images);

// A table cell's note where a step of `batch` in `accumulate_steps` micro-batches takes more images
// than `train_images` (0: not known), which train refuses: " (more than the 256 training
// images`of`, which train refuses)", its images first where it accumulates ("40 images a step: ");
// else "".
std::string beyond_training_set(int64_t batch, int64_t accumulate_steps, int64_t train_images,
                                const std::string& of = "");

struct Config {
  models::ResNetOptions model;
  DataConfig data;
  TrainingConfig training;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;
  CheckpointingOptions checkpointing;
  MemoryConfig memory;
  MonitorConfig monitor;
  ProfilerConfig profiler;
  CheckpointConfig checkpoint;
  OutputConfig output;
  SweepConfig sweep;
  DistributedOptions distributed;

  // Where `key` ("section.key") was set, for messages: its flag ("--device", "--set
  // training.device"), else the config's origin (its file).
  std::string origin_of(const std::string& key) const;
  // Of keys that make one refusal together: the first's flag, else the flag of the first another
  // set, else the config's origin.
  std::string origin_of(const std::vector<std::string>& keys) const;
  std::string origin;                        // the config file (or the text's origin)
  std::map<std::string, std::string> flags;  // "section.key" → the flag that set it
};

// Runs `work`, a KeyError from it becoming a ConfigError led by where the key was set: "--device:
// training.device: 'cuda:3' requested, but this machine has 1 CUDA device(s) ...".
template <class Work>
auto with_key_origins(const Config& config, Work&& work) -> decltype(work()) {
  try {
    return work();
  } catch (const KeyError& e) {
    throw ConfigError(config.origin_of(e.keys()) + ": " + e.what());
  }
}

// What a config is read as. A record (a run's, a sweep's or a trial's own config, read back) names
// folders that exist: the rules for a new folder's name (output.dir, output.name) apply only to
// what a flag changes in it, so that a run an earlier build named (" r1") is read, reported and
// resumed as it was named.
enum class ConfigRead { New, Record };

// Reads `path` (YAML), applies `overrides` in order and validates. Keys absent from the file keep
// their defaults. Refuses a path that is not a readable file, and duplicate keys.
Config load_config(const std::string& path, const std::vector<Override>& overrides = {},
                   ConfigRead read = ConfigRead::New);

// Same, from YAML text; `origin` names the source in error messages.
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<Override>& overrides = {}, ConfigRead read = ConfigRead::New);

// Images per optimizer step: training.batch_size x training.accumulate_steps x `ranks`.
int64_t effective_batch_size(const Config& config, int64_t ranks);
// "128", or "128 x 4 micro-batches x 2 ranks = 1024 per optimizer step".
std::string batch_description(const Config& config, int64_t ranks);

// Why training.cuda_graph cannot run this config, ending "training.cuda_graph: on ..." (fp16, the
// unfused SGD, checkpointing); empty when it can. The device and ranks are checked apart.
std::string cuda_graph_obstacle(const Config& config);

// The effective config as YAML, every key; parse_config() reads it back to an equal Config.
std::string to_yaml(const Config& config);

// A run's config as asked (its config.yaml, its checkpoint's copy): to_yaml without the sweep
// section, which is train sweep's input and not a run's; a sweep's and its trials' keep it.
std::string run_yaml(const Config& config);

// Every valid key as "section.key".
std::vector<std::string> config_keys();

// "resnet50" etc. and "cifar" / "imagenet", as written in the config.
std::string arch_name(const models::ResNetOptions& model);
std::string stem_name(const models::ResNetOptions& model);

// "contiguous" / "channels_last".
std::string memory_format_name(c10::MemoryFormat format);
std::string memory_format_name(const std::optional<c10::MemoryFormat>& format);  // "auto" if empty
// The config's spelling read back; nullopt for any other text.
std::optional<Precision> precision_named(const std::string& name);
std::optional<c10::MemoryFormat> memory_format_named(const std::string& name);

// The config's spellings of the other choices: "binary", "block", "cosine", ...
std::string source_name(data::Source source);
std::string granularity_name(CheckpointGranularity granularity);
std::string checkpointing_setting_name(CheckpointMode mode);  // "off", "on", "auto" (tables)
std::string schedule_name(ScheduleKind kind);

}  // namespace training
