// The config turned into the parts of a run: the model, optimizer and loss scaler (shared by the
// trainer and sweep trials), the loaders, the profiler's and sampler's options, the label checks.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "models/resnet.h"
#include "training/config/config.h"
#include "training/platform/distributed.h"
#include "training/platform/monitor.h"
#include "training/platform/profiler.h"
#include "training/step/step.h"

namespace training {

// The model as training runs it: seeded by training.seed, on `device`, in the configured memory
// format, with gradient checkpointing installed when configured.
models::ResNet build_model(const Config& config, const torch::Device& device);

// What a training step changes, from the config. With a data-parallel `group`, every rank starts
// from rank 0's initial weights.
StepParts build_step_parts(const Config& config, const torch::Device& device,
                           ProcessGroup* group = nullptr);

// The same for a step that is measured rather than trained: fp16's GradScaler starts at 1, not
// 2^16, at which the first steps overflow and are skipped (on the CPU every measured step), so the
// momentum was never made and fp16's peaks fell short of the steady step's (ResNet-18: 44.7 MB).
StepParts build_measured_step_parts(const Config& config, const torch::Device& device,
                                    ProcessGroup* group = nullptr);

// A random batch of training.batch_size images of data.image_size (in training.memory_format) and
// labels, made on `device`: what trials, memory studies and the checkpointing choice step on.
std::pair<torch::Tensor, torch::Tensor> synthetic_batch(const Config& config,
                                                        const torch::Device& device);

// The bytes of one batch of `image_size`-sided images as the loader hands it to the step: {float
// images, int64 labels}.
std::pair<int64_t, int64_t> batch_bytes(int64_t batch, int64_t image_size);

// The bytes of the model's gradients (one per trainable parameter, in its dtype): what gradient
// accumulation holds beside the step from its second micro-batch on.
int64_t gradient_bytes(const models::ResNetOptions& model);

// What a run holds on the device whatever the batch: the weights and buffers, their gradients,
// the momentum, the weight average's copy (`without_average`: less it), fp16's GradScaler state
// (12 bytes) and in bf16 or fp16 autocast's copies of the convolution and linear weights, cast in
// the forward and held for its backward (`casts`: their bytes; biases left out, a lower bound).
// Counted outside memory.limit (TrackingCpuAllocator::HostData).
struct HeldWhateverTheBatch {
  int64_t bytes = 0;
  int64_t without_average = 0;
  int64_t casts = 0;
  int64_t gradients = 0;  // of them, the gradients (none before a step's first backward)
};
HeldWhateverTheBatch held_whatever_the_batch(const Config& config);

// The least a step or an evaluation of one image allocates beside what the run holds whatever the
// batch: its input and the stem convolution's output (64 channels, in the precision's dtype).
int64_t one_image_bytes(const Config& config);

// Where held_whatever_the_batch leaves less than one_image_bytes of `limit`, which no batch,
// precision or checkpointing lowers, the one remedy ("the weights and their gradients and momentum
// alone take 127.91 MiB: more memory or a smaller model.arch"; training.ema_decay: 0 offered where
// the rest fits); empty where it takes less. The figure is written apart from `limit`
// (format_bytes_apart), and `limit_text`, where given, gets the limit as written beside it. In bf16
// or fp16, where fp32 would fit (no autocast copies), `fp32` is offered: how the command takes it.
std::string weights_alone_remedy(const Config& config, int64_t limit,
                                 const std::string& more = "more memory",
                                 std::string* limit_text = nullptr,
                                 const std::string& fp32 = "training.precision: fp32");

// Whether a batch smaller than training.batch_size trains (BatchNorm needs two values a channel:
// 1 does not where its last map is 1x1).
bool smaller_batch_trains(const Config& config);

// ", a smaller data.image_size (now N)" where the images are resized up; else "".
std::string image_size_remedy(const Config& config);

// The remedies of a step that runs out of memory in its own settings, each with a leading ", ":
// a smaller training.batch_size where a smaller one trains, bf16 or fp16 for fp32 where autocast's
// copies beside the weights leave room under `limit` (they did not: bf16 was offered, and then
// refused offering fp32), a smaller data.image_size where the images are resized up, and
// training.ema_decay: 0 where a weight average is kept; empty where none applies.
std::string step_remedies(const Config& config, int64_t limit);

// Whether a step with every block recomputed can fit `limit` at the config's batch: false where
// what it keeps through its forward (held_whatever_the_batch less the gradients, which the first
// micro-batch has not made yet; its input and stem output; every block's input,
// models::block_input_elements, in 2-byte elements under autocast) is above it. A lower bound of
// each block recomputed on its own (auto's finest choice; momentum counted, as every step after
// the first holds it): true does not say it fits (only measuring tells), false says
// checkpointing cannot help.
bool every_block_recomputed_can_fit(const Config& config, int64_t limit);

// Refuses before anything is measured or written: what the run holds whatever the batch taking
// memory.limit (or with checkpointing auto, checkpointing.budget) or more (OutOfMemory, exit 3:
// "memory.limit 50.00 MiB: " + weights_alone_remedy), and checkpointing auto on the CPU without a
// budget (missing_budget's KeyError). `fp32`: as weights_alone_remedy's.
void refuse_what_no_batch_fits(const Config& config, const torch::Device& device,
                               const std::string& fp32 = "training.precision: fp32");

// A sweep's precisions (`configs`, one each): refused as refuse_what_no_batch_fits refuses the
// first where none of them fits; one that fits lets the sweep run (the others' trials run out of
// memory, a result there).
void refuse_unless_one_fits(const std::vector<Config>& configs, const torch::Device& device,
                            const std::string& fp32);

// The step's precision and label smoothing, from training.* (one micro-batch per step: callers
// that accumulate set StepOptions::accumulate_steps).
StepOptions step_options(const Config& config);

// The training (shuffled, augmented, last partial batch dropped) or evaluation loader, sharded
// across the ranks of `group`: data.loader's kind.
std::unique_ptr<data::Loader> make_loader(data::Split split, const Config& config,
                                          const torch::Device& device, bool train,
                                          ProcessGroup* group);

// Throws UserError when `split` (named `name`) is empty or has labels beyond num_classes.
void check_labels(const data::Split& split, const char* name, int64_t num_classes);

// The steps a run makes: `by_epochs`, cut at training.max_steps when that is set.
int64_t capped_by_max_steps(const Config& config, int64_t by_epochs);

ProfilerOptions profiler_options(const ProfilerConfig& config);

// NVML on a GPU, /proc on the CPU, writing `file`; none when sampling is off or NVML cannot be
// loaded (said once).
std::unique_ptr<Sampler> make_sampler(const MonitorConfig& config, const torch::Device& device,
                                      const std::filesystem::path& file);

// Whether training.cuda_graph puts this run's step in a graph. auto: on CUDA, training alone, where
// cuda_graph_obstacle names nothing. on: yes, refusing a CPU device or data-parallel training.
bool use_cuda_graph(const Config& config, const torch::Device& device, bool data_parallel);

}  // namespace training
