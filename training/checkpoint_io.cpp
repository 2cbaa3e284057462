#include "training/checkpoint_io.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "training/atomic_file.h"
#include "training/errors.h"

namespace training {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kFormatVersion = 1;

torch::serialize::InputArchive open_archive(const fs::path& file, const torch::Device& device) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(file.string(), device);
  } catch (const c10::OutOfMemoryError&) {
    throw;  // a good checkpoint that does not fit: the caller reports it as out of memory
  } catch (const c10::Error& e) {
    throw UserError(file.string() + ": not a readable checkpoint (" + error_line(e) + ")");
  }
  return archive;
}

c10::IValue read_value(torch::serialize::InputArchive& archive, const fs::path& file,
                       const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw UserError(file.string() + ": checkpoint has no '" + key + "' entry");
  }
  return value;
}

// Parameters and buffers as one flat name -> tensor table (a state dict), so loading can check
// every name and shape instead of trusting the nested archive layout.
std::vector<std::pair<std::string, torch::Tensor>> state_tensors(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : model.named_parameters()) tensors.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) tensors.emplace_back(b.key(), b.value());
  return tensors;
}

}  // namespace

fs::path find_checkpoint(const fs::path& run_dir_or_file) {
  std::error_code ec;
  const fs::path file =
      fs::is_directory(run_dir_or_file, ec) ? run_dir_or_file / "checkpoint.pt" : run_dir_or_file;
  if (!fs::is_regular_file(file, ec)) {
    throw UserError(file.string() + ": no checkpoint to resume from");
  }
  return file;
}

void save_checkpoint(const fs::path& file, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const TrainState& state,
                     const std::string& config_yaml) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(kFormatVersion));
  archive.write("config", c10::IValue(config_yaml));

  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
  for (auto& [name, tensor] : state_tensors(model)) {
    names.push_back(name);
    tensors.push_back(tensor.detach());
  }
  archive.write("model_names", c10::IValue(names));
  archive.write("model_tensors", c10::IValue(tensors));

  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);

  archive.write("epoch", c10::IValue(state.epoch));
  archive.write("step", c10::IValue(state.step));
  archive.write("batch_in_epoch", c10::IValue(state.batch_in_epoch));
  archive.write("seen", c10::IValue(state.seen));
  archive.write("train_seconds", c10::IValue(state.train_seconds));
  archive.write("skipped_steps", c10::IValue(state.skipped_steps));
  archive.write("world_size", c10::IValue(state.world_size));
  if (state.grad_scale.defined()) {
    archive.write("grad_scale", state.grad_scale.detach());
    archive.write("growth_tracker", state.growth_tracker.detach());
  }
  const bool partial = state.batch_in_epoch > 0;
  archive.write("loss_sum", partial ? state.loss_sum.detach() : torch::zeros({}, torch::kFloat64));
  archive.write("correct", partial ? state.correct.detach() : torch::zeros({}, torch::kInt64));

  // Stored as a list of ints: it must come back as a CPU tensor whatever device the rest is
  // mapped to. (All training randomness is drawn from CPU generators.)
  auto rng = at::detail::getDefaultCPUGenerator().get_state();
  archive.write("rng_cpu", c10::IValue(std::vector<int64_t>(
                               rng.data_ptr<uint8_t>(), rng.data_ptr<uint8_t>() + rng.numel())));

  replace_file_atomically(file,
                          [&](const fs::path& temporary) { archive.save_to(temporary.string()); });
}

std::string checkpoint_config(const fs::path& file) {
  auto archive = open_archive(file, torch::kCPU);
  return read_value(archive, file, "config").toStringRef();
}

TrainState load_checkpoint(const fs::path& file, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, const torch::Device& device) {
  auto archive = open_archive(file, device);
  const auto format = read_value(archive, file, "format").toInt();
  if (format != kFormatVersion) {
    throw UserError(file.string() + ": checkpoint format " + std::to_string(format) +
                    ", this build reads format " + std::to_string(kFormatVersion));
  }

  const auto names = read_value(archive, file, "model_names").toListRef();
  const auto saved = read_value(archive, file, "model_tensors").toTensorVector();
  std::map<std::string, torch::Tensor> by_name;
  for (size_t i = 0; i < names.size() && i < saved.size(); ++i) {
    by_name[names[i].toStringRef()] = saved[i];
  }
  auto targets = state_tensors(model);
  if (by_name.size() != targets.size()) {
    throw UserError(file.string() + ": checkpoint holds " + std::to_string(by_name.size()) +
                    " tensors, the configured model has " + std::to_string(targets.size()) +
                    " (was model.* changed?)");
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : targets) {
      auto found = by_name.find(name);
      if (found == by_name.end()) {
        throw UserError(file.string() + ": checkpoint has no tensor '" + name + "'");
      }
      if (found->second.sizes() != tensor.sizes()) {
        throw UserError(file.string() + ": tensor '" + name + "' has shape " +
                        c10::str(found->second.sizes()) + ", the model expects " +
                        c10::str(tensor.sizes()));
      }
      tensor.copy_(found->second);
    }
  }

  torch::serialize::InputArchive optimizer_archive;
  archive.read("optimizer", optimizer_archive);
  try {
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw UserError(file.string() + ": optimizer state does not fit (" + first_line(e.what()) +
                    ")");
  }

  TrainState state;
  state.epoch = read_value(archive, file, "epoch").toInt();
  state.step = read_value(archive, file, "step").toInt();
  state.batch_in_epoch = read_value(archive, file, "batch_in_epoch").toInt();
  state.seen = read_value(archive, file, "seen").toInt();
  state.train_seconds = read_value(archive, file, "train_seconds").toDouble();
  state.skipped_steps = read_value(archive, file, "skipped_steps").toInt();
  state.world_size = read_value(archive, file, "world_size").toInt();
  c10::IValue scale, tracker;
  if (archive.try_read("grad_scale", scale) && archive.try_read("growth_tracker", tracker)) {
    state.grad_scale = scale.toTensor();
    state.growth_tracker = tracker.toTensor();
  }
  state.loss_sum = read_value(archive, file, "loss_sum").toTensor();
  state.correct = read_value(archive, file, "correct").toTensor();

  const auto rng_bytes = read_value(archive, file, "rng_cpu").toIntVector();
  auto rng = torch::empty({static_cast<int64_t>(rng_bytes.size())}, torch::kUInt8);
  std::copy(rng_bytes.begin(), rng_bytes.end(), rng.data_ptr<uint8_t>());
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  generator.set_state(rng);
  return state;
}

}  // namespace training
