#include "training/parts/components.h"

#include <spdlog/spdlog.h>

#include <exception>

#include "data/torch_data.h"
#include "training/parts/checkpoint_choice.h"
#include "training/parts/memory_format.h"
#include "training/platform/device.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/step/optim.h"
#include "training/step/recompute.h"

namespace training {

models::ResNet build_model(const Config& config, const torch::Device& device) {
  // Seeding first makes the initial weights a function of training.seed alone.
  seed_everything(static_cast<uint64_t>(config.training.seed));
  models::ResNet model(config.model);
  model->to(device);
  models::convert_memory_format(*model, memory_format_for(config, device));
  apply_checkpointing(*model, config.checkpointing);
  return model;
}

namespace {

// The step's parts with fp16's GradScaler set by `scaler`.
StepParts step_parts(const Config& config, const torch::Device& device, ProcessGroup* group,
                     const GradScalerOptions& scaler) {
  auto model = build_model(config, device);
  // Rank 0's initial weights everywhere, before anything else touches them.
  if (group) group->broadcast_from_main(*model);
  auto optimizer = make_sgd(*model, config.optimizer);
  std::unique_ptr<WeightAverage> ema;
  if (config.training.ema_decay > 0) {
    // Built like the model (the same seed, so the global generator ends where it did), then
    // overwritten with the model's weights.
    ema = std::make_unique<WeightAverage>(model, build_model(config, device),
                                          config.training.ema_decay);
  }
  return {model, std::move(optimizer),
          GradScaler(config.training.precision == Precision::FP16, device, scaler), std::move(ema)};
}

}  // namespace

StepParts build_step_parts(const Config& config, const torch::Device& device, ProcessGroup* group) {
  return step_parts(config, device, group, GradScalerOptions());
}

StepParts build_measured_step_parts(const Config& config, const torch::Device& device,
                                    ProcessGroup* group) {
  return step_parts(config, device, group, GradScalerOptions().init_scale(1.0));
}

std::pair<torch::Tensor, torch::Tensor> synthetic_batch(const Config& config,
                                                        const torch::Device& device) {
  const int64_t batch = config.training.batch_size;
  const int64_t side = config.data.image_size;
  auto images = torch::randn({batch, 3, side, side}, torch::TensorOptions().device(device))
                    .contiguous(memory_format_for(config, device));
  auto labels = torch::randint(0, config.model.num_classes(), {batch},
                               torch::TensorOptions(torch::kInt64).device(device));
  return {images, labels};
}

std::pair<int64_t, int64_t> batch_bytes(int64_t batch, int64_t image_size) {
  return {batch * 3 * image_size * image_size * static_cast<int64_t>(sizeof(float)),
          batch * static_cast<int64_t>(sizeof(int64_t))};
}

int64_t gradient_bytes(const models::ResNetOptions& model) {
  int64_t bytes = 0;
  for (const auto& p : models::ResNet(model)->parameters()) {
    if (p.requires_grad()) bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  return bytes;
}

HeldWhateverTheBatch held_whatever_the_batch(const Config& config) {
  // Counting builds a model on the CPU, outside memory.limit: it is said after running out of it,
  // beside the run's own weights.
  const TrackingCpuAllocator::HostData counting;
  const models::ResNet model(config.model);
  // One model for every figure (gradient_bytes builds its own): the gradients are those of the
  // trainable parameters, as gradient_bytes counts them.
  const bool half = config.training.precision != Precision::FP32;
  int64_t parameters = 0, buffers = 0, gradients = 0, casts = 0;
  for (const auto& p : model->parameters()) {
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    parameters += bytes;
    if (p.requires_grad()) gradients += bytes;
    if (half && p.dim() >= 2) casts += p.numel() * 2;  // a convolution's or linear's weight
  }
  for (const auto& b : model->buffers())
    buffers += b.numel() * static_cast<int64_t>(b.element_size());
  const int64_t weights = parameters + buffers;
  const int64_t momentum = config.optimizer.momentum() > 0 ? gradients : 0;
  const int64_t scaler = config.training.precision == Precision::FP16 ? 12 : 0;
  const int64_t rest = weights + gradients + momentum + scaler + casts;
  return {rest + (config.training.ema_decay > 0 ? weights : 0), rest, casts, gradients};
}

int64_t one_image_bytes(const Config& config) {
  const int64_t side = config.data.image_size;
  const int64_t stem_side =
      config.model.stem() == models::Stem::ImageNet ? (side + 1) / 2 : side;  // 7x7, stride 2
  const int64_t element = config.training.precision == Precision::FP32 ? 4 : 2;
  return batch_bytes(1, side).first + 64 * stem_side * stem_side * element;
}

std::string weights_alone_remedy(const Config& config, int64_t limit, const std::string& more,
                                 std::string* limit_text, const std::string& fp32) {
  const HeldWhateverTheBatch held = held_whatever_the_batch(config);
  // The smallest batch that trains (2 where BatchNorm's last map is 1x1): less than its images
  // fit, and no batch does (a smaller batch was advised, then refused).
  const int64_t smallest = models::smallest_trainable_batch(config.model, config.data.image_size);
  const int64_t image = smallest * one_image_bytes(config);
  if (held.bytes + image <= limit) return "";
  Config in_fp32 = config;  // its image's stem output in 4-byte elements
  in_fp32.training.precision = Precision::FP32;
  const int64_t fp32_image = smallest * one_image_bytes(in_fp32);
  const bool average = config.training.ema_decay > 0;
  const auto [limit_apart, held_apart] = format_bytes_apart(limit, held.bytes);
  if (limit_text) *limit_text = limit_apart;
  // Below the limit, what is left for the batch is less than a step of one image allocates.
  const auto [leaving, needs] = format_bytes_apart(limit - held.bytes, image);
  const std::string left =
      held.bytes < limit
          ? " of it, leaving " + leaving + ", less than " +
                (smallest == 1 ? std::string("one image's")
                               : std::to_string(smallest) +
                                     " images' (the smallest batch that trains: BatchNorm needs "
                                     "two values a channel)") +
                " input and first convolution output (" + needs + ")"
          : "";
  const std::string casts =
      held.casts > 0 ? " and autocast's " + std::string(precision_name(config.training.precision)) +
                           " copies of them"
                     : "";
  return "the weights and their gradients" +
         std::string(config.optimizer.momentum() > 0 ? " and momentum" : "") +
         (average ? " and the weight average (training.ema_decay)" : "") + casts + " alone take " +
         held_apart + left + ": " + more +
         (average && held.without_average + image <= limit ? ", training.ema_decay: 0" : "") +
         (held.casts > 0 && held.bytes - held.casts + fp32_image <= limit ? ", " + fp32 : "") +
         // Where the image is what does not fit beside them, a smaller one may.
         (held.bytes < limit ? image_size_remedy(config) : "") + " or a smaller model.arch";
}

bool smaller_batch_trains(const Config& config) {
  return config.training.batch_size >
         models::smallest_trainable_batch(config.model, config.data.image_size);
}

std::string image_size_remedy(const Config& config) {
  return config.data.image_size > kStoredImageSize
             ? ", a smaller data.image_size (now " + std::to_string(config.data.image_size) + ")"
             : "";
}

std::string step_remedies(const Config& config, int64_t limit) {
  std::string more;
  const int64_t batch = config.training.batch_size, steps = config.training.accumulate_steps;
  const int64_t smallest = models::smallest_trainable_batch(config.model, config.data.image_size);
  if (batch > smallest) {
    more += ", a smaller training.batch_size (now " + std::to_string(batch) + ")";
    // Accumulating, more micro-batches of fewer images keep the images per optimizer step: the
    // largest batch up to half this one (halving, as one does) that trains and divides them.
    for (int64_t fewer = batch / 2, images = batch * steps;
         steps > 1 && fewer >= smallest && images / fewer <= kMaxAccumulateSteps; --fewer) {
      if (images % fewer != 0) continue;
      more += ", e.g. " + std::to_string(fewer) + " with training.accumulate_steps " +
              std::to_string(images / fewer) + " (now " + std::to_string(steps) +
              ") to keep the images per optimizer step";
      break;
    }
  }
  Config half = config;
  half.training.precision = Precision::BF16;
  if (config.training.precision == Precision::FP32 && weights_alone_remedy(half, limit).empty()) {
    // training.cuda_graph: on refuses fp16 (its GradScaler decides on the host).
    more += std::string(", training.precision: bf16") +
            (config.training.cuda_graph == CudaGraphMode::On ? "" : " or fp16") + " (now fp32)";
  }
  more += image_size_remedy(config);
  if (config.training.ema_decay > 0) more += ", training.ema_decay: 0";
  return more;
}

bool every_block_recomputed_can_fit(const Config& config, int64_t limit) {
  const int64_t element = config.training.precision == Precision::FP32 ? 4 : 2;
  const int64_t kept = one_image_bytes(config) +
                       element * models::block_input_elements(config.model, config.data.image_size);
  const HeldWhateverTheBatch held = held_whatever_the_batch(config);
  const int64_t gradients = config.training.accumulate_steps > 1 ? 0 : held.gradients;
  return held.bytes - gradients + config.training.batch_size * kept <= limit;
}

void refuse_unless_one_fits(const std::vector<Config>& configs, const torch::Device& device,
                            const std::string& fp32) {
  std::exception_ptr first;
  for (const Config& config : configs) {
    try {
      refuse_what_no_batch_fits(config, device, fp32);
      return;
    } catch (const OutOfMemory&) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void refuse_what_no_batch_fits(const Config& config, const torch::Device& device,
                               const std::string& fp32) {
  const auto refuse = [&](int64_t limit, const std::string& key, const std::string& more) {
    if (limit <= 0) return;
    std::string limit_text;
    const std::string held = weights_alone_remedy(config, limit, more, &limit_text, fp32);
    if (!held.empty()) throw OutOfMemory(key + " " + limit_text + ": " + held);
  };
  refuse(config.memory.limit, "memory.limit", "more memory");
  const auto& ck = config.checkpointing;
  if (ck.mode() != CheckpointMode::Auto) return;
  refuse(ck.budget(), "checkpointing.budget", "a larger checkpointing.budget");
  if (ck.blocks()) return;
  missing_budget(config, device, "checkpointing.enabled");
  if (ck.budget() == 0 && config.memory.limit > 0) {  // memory.limit less the headroom
    const CheckpointBudget budget = checkpointing_budget(config, device);
    refuse(budget.bytes, "checkpointing auto's budget (" + budget.source + "),",
           "a smaller checkpointing.headroom, more memory");
  }
}

StepOptions step_options(const Config& config) {
  return StepOptions()
      .precision(config.training.precision)
      .label_smoothing(config.training.label_smoothing);
}

std::unique_ptr<data::Loader> make_loader(data::Split split, const Config& config,
                                          const torch::Device& device, bool train,
                                          ProcessGroup* group) {
  const auto options =
      data::LoaderOptions()
          .batch_size(train ? config.training.batch_size : config.training.eval_batch_size)
          .shuffle(train)
          .drop_last(train)
          .augment(train && config.data.augment)
          .device(device)
          .device_resident(config.data.device_resident)
          .prefetch(prefetch_for(config.data, device.is_cuda()))
          .seed(static_cast<uint64_t>(config.training.seed))
          .memory_format(memory_format_for(config, device))
          .image_size(config.data.image_size)
          .simulated_delay_ms(train ? config.data.simulated_delay_ms : 0.0)
          .shard_index(group ? group->rank() : 0)
          .shard_count(group ? group->world_size() : 1);
  if (config.data.loader == LoaderKind::TorchData) {
    return std::make_unique<data::TorchDataLoader>(std::move(split), options, config.data.workers);
  }
  return std::make_unique<data::BatchLoader>(std::move(split), options);
}

void check_labels(const data::Split& split, const char* name, int64_t num_classes) {
  if (split.size() == 0) throw UserError(std::string("data: the ") + name + " split is empty");
  // The largest label is host data: outside memory.limit, which is judged after (the thirteenth
  // pass: under a limit of a few bytes, its 8-byte result was LibTorch's out-of-memory, exit 1).
  const TrackingCpuAllocator::HostData host_data;
  const int64_t top = split.labels.max().item<int64_t>();
  if (top >= num_classes) {
    throw KeyError("model.num_classes",
                   std::string("the ") + name + " split has labels up to " + std::to_string(top) +
                       ", so num_classes must be at least " + std::to_string(top + 1) + ", got " +
                       std::to_string(num_classes));
  }
}

int64_t capped_by_max_steps(const Config& config, int64_t by_epochs) {
  return config.training.max_steps > 0 ? std::min(by_epochs, config.training.max_steps) : by_epochs;
}

ProfilerOptions profiler_options(const ProfilerConfig& config) {
  return ProfilerOptions()
      .enabled(config.enabled)
      .first_step(config.steps.at(0))
      .last_step(config.steps.at(1))
      .top(config.top)
      .record_shapes(config.record_shapes);
}

std::unique_ptr<Sampler> make_sampler(const MonitorConfig& config, const torch::Device& device,
                                      const std::filesystem::path& file) {
  if (config.sample_period <= 0) return nullptr;
  std::string why_not;
  std::unique_ptr<Probe> probe =
      device.is_cuda()
          ? make_nvml_probe(device.str(), pci_bus_id(device), "libnvidia-ml.so.1", &why_not)
          : make_cpu_probe();
  if (!probe) {
    spdlog::warn("GPU sampling off: {}; training goes on without gpu.jsonl", why_not);
    return nullptr;
  }
  return std::make_unique<Sampler>(std::move(probe), config.sample_period, file);
}

bool use_cuda_graph(const Config& config, const torch::Device& device, bool data_parallel) {
  switch (config.training.cuda_graph) {
    case CudaGraphMode::Off:
      return false;
    case CudaGraphMode::On:
      if (!device.is_cuda()) {
        throw KeyError("training.cuda_graph", "on needs a CUDA device; this run trains on " +
                                                  device.str() +
                                                  " (set training.cuda_graph: off or auto)");
      }
      if (data_parallel) {
        throw UserError(
            "training.cuda_graph: on is not combined with data-parallel training (WORLD_SIZE > "
            "1): the gradient all-reduce is started from autograd hooks on the host; set it to "
            "off or auto");
      }
      return true;
    case CudaGraphMode::Auto:
      return device.is_cuda() && !data_parallel && cuda_graph_obstacle(config).empty();
  }
  return false;
}

}  // namespace training
