#include "training/run/checkpoint_io.h"

#include <ATen/CPUGeneratorImpl.h>
#include <openssl/evp.h>
#include <spdlog/fmt/fmt.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include "training/platform/atomic_file.h"
#include "training/platform/errors.h"

namespace training {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kFormatVersion = 2;  // of the archive's entries (the frame has its own)
constexpr char kMagic[8] = {'T', 'R', 'N', 'C', 'K', 'P', 'T', '\n'};

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t get_le(std::string_view in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  }
  return value;
}

// The SHA-256 of `data`, 32 raw bytes.
std::string sha256(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL could not compute a SHA-256");
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

std::string hex(std::string_view bytes) {
  std::string text;
  for (unsigned char byte : bytes) text += fmt::format("{:02x}", byte);
  return text;
}

torch::serialize::InputArchive open_archive(const fs::path& file, const torch::Device& device) {
  const std::string bytes = read_whole_file(file);
  const std::string_view payload = verified_payload(bytes, file.string());
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(payload.data(), payload.size(), device);
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

// A count or time as the trainer wrote it (issue 57): a number of the entry's kind, >= `low`.
template <typename T>
T read_number(torch::serialize::InputArchive& archive, const fs::path& file, const std::string& key,
              T low) {
  const c10::IValue value = read_value(archive, file, key);
  const bool whole = std::is_integral_v<T>;
  if (whole ? !value.isInt() : !value.isDouble()) {
    throw UserError(file.string() + ": checkpoint entry '" + key + "' is not " +
                    (whole ? "a whole number" : "a number") + " (train never writes it so)");
  }
  const T number = whole ? static_cast<T>(value.toInt()) : static_cast<T>(value.toDouble());
  if (!(number >= low)) {
    throw UserError(file.string() + ": checkpoint entry '" + key + "' is " +
                    fmt::format("{}", number) + ", expected at least " + fmt::format("{}", low) +
                    " (train never writes it so)");
  }
  return number;
}

// Parameters and buffers as one flat name -> tensor table (a state dict), so loading can check
// every name and shape instead of trusting the nested archive layout.
std::vector<std::pair<std::string, torch::Tensor>> state_tensors(torch::nn::Module& model) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& p : model.named_parameters()) tensors.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) tensors.emplace_back(b.key(), b.value());
  return tensors;
}

void write_state(torch::serialize::OutputArchive& archive, const std::string& prefix,
                 torch::nn::Module& model) {
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
  for (auto& [name, tensor] : state_tensors(model)) {
    names.push_back(name);
    tensors.push_back(tensor.detach());
  }
  archive.write(prefix + "_names", c10::IValue(names));
  archive.write(prefix + "_tensors", c10::IValue(tensors));
}

// Checks the stored `prefix` state's names and shapes against `model`, then (`copy`) copies it.
void read_state(torch::serialize::InputArchive& archive, const fs::path& file,
                const std::string& prefix, torch::nn::Module& model, bool copy = true) {
  const auto names = read_value(archive, file, prefix + "_names").toListRef();
  const auto saved = read_value(archive, file, prefix + "_tensors").toTensorVector();
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
  }
  if (!copy) return;
  for (auto& [name, tensor] : targets) tensor.copy_(by_name.at(name));
}

// The stored optimizer state into `optimizer`, keeping the config's options: LibTorch's load
// restores the saved ones, so a resume with another momentum or weight decay would run the old
// ones. With momentum 0 no momentum buffer is kept (it would be held and never read).
void read_optimizer(torch::serialize::InputArchive& archive, const fs::path& file,
                    torch::optim::Optimizer& optimizer) {
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> configured;
  for (auto& group : optimizer.param_groups()) configured.push_back(group.options().clone());
  torch::serialize::InputArchive optimizer_archive;
  archive.read("optimizer", optimizer_archive);
  try {
    optimizer.load(optimizer_archive);
  } catch (const c10::Error& e) {
    throw UserError(file.string() + ": optimizer state does not fit (" + first_line(e.what()) +
                    ")");
  }
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].set_options(std::move(configured[i]));
    const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&groups[i].options());
    if (!sgd || sgd->momentum() != 0) continue;
    for (const auto& p : groups[i].params()) optimizer.state().erase(p.unsafeGetTensorImpl());
  }
}

void check_format(torch::serialize::InputArchive& archive, const fs::path& file) {
  const auto format = read_value(archive, file, "format").toInt();
  if (format != kFormatVersion) {
    throw UserError(file.string() + ": checkpoint format " + std::to_string(format) +
                    ", this build reads format " + std::to_string(kFormatVersion));
  }
}

// Fills the header of `framed`, whose payload follows kCheckpointHeaderBytes of room for it.
void seal(std::string& framed) {
  const std::string_view payload = std::string_view(framed).substr(kCheckpointHeaderBytes);
  std::string header(kMagic, sizeof kMagic);
  put_le(header, kCheckpointFrameVersion, 4);
  put_le(header, payload.size(), 8);
  header.append(sha256(payload));
  framed.replace(0, kCheckpointHeaderBytes, header);
}

// What stands at `path`, for a message: "missing", "a dangling symbolic link", "a loop of
// symbolic links", "a folder", "a file", ...
std::string what_stands_at(const fs::path& path) {
  std::error_code ec;
  const auto link = fs::symlink_status(path, ec);
  if (link.type() == fs::file_type::not_found) return "missing";
  const auto target = fs::status(path, ec);
  if (ec == std::errc::too_many_symbolic_link_levels) return "a loop of symbolic links";
  if (target.type() == fs::file_type::not_found) return "a dangling symbolic link";
  if (ec) return ec.message();
  switch (target.type()) {
    case fs::file_type::regular:
      return "a file";
    case fs::file_type::directory:
      return "a folder";
    default:
      return "not a regular file";
  }
}

}  // namespace

std::string frame_checkpoint(std::string_view payload) {
  std::string framed(kCheckpointHeaderBytes, '\0');
  framed.append(payload);
  seal(framed);
  return framed;
}

std::string_view verified_payload(std::string_view bytes, const std::string& name) {
  const std::string damaged = name + ": damaged checkpoint: ";
  if (bytes.size() < kCheckpointHeaderBytes ||
      bytes.substr(0, sizeof kMagic) != std::string_view(kMagic, sizeof kMagic)) {
    throw UserError(name + ": not a readable checkpoint (no TRNCKPT header: not written by train)");
  }
  const auto version = get_le(bytes, 8, 4);
  if (version != kCheckpointFrameVersion) {
    throw UserError(name + ": checkpoint frame version " + std::to_string(version) +
                    ", this build reads version " + std::to_string(kCheckpointFrameVersion));
  }
  const uint64_t length = get_le(bytes, 12, 8);
  const uint64_t held = bytes.size() - kCheckpointHeaderBytes;
  if (length != held) {
    throw UserError(damaged + "the header says " + std::to_string(length) +
                    " payload bytes, the file holds " + std::to_string(held) +
                    " (truncated or extended); it was not loaded");
  }
  const std::string_view payload = bytes.substr(kCheckpointHeaderBytes);
  const std::string_view stored = bytes.substr(20, 32);
  const std::string computed = sha256(payload);
  if (computed != stored) {
    throw UserError(damaged + "SHA-256 " + hex(stored).substr(0, 16) + "... stored, " +
                    hex(computed).substr(0, 16) + "... computed; it was not loaded");
  }
  return payload;
}

fs::path find_checkpoint(const fs::path& run_dir_or_file) {
  std::error_code ec;
  // A folder named as the checkpoint itself ("RUN/checkpoint.pt") is said as such.
  const bool run_dir =
      fs::is_directory(run_dir_or_file, ec) && run_dir_or_file.extension() != ".pt";
  const fs::path file = run_dir ? run_dir_or_file / "checkpoint.pt" : run_dir_or_file;
  if (!fs::is_regular_file(file, ec)) {
    throw UserError(file.string() + ": " + what_stands_at(file) + "; no checkpoint to resume from");
  }
  return file;
}

void save_checkpoint(const fs::path& file, torch::nn::Module& model,
                     torch::optim::Optimizer& optimizer, const TrainState& state,
                     const RunInputs& inputs, torch::nn::Module* average) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(kFormatVersion));
  archive.write("config", c10::IValue(inputs.config_yaml));
  archive.write("decisions", c10::IValue(inputs.decisions_json));
  write_state(archive, "model", model);
  if (average) write_state(archive, "average", *average);

  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  archive.write("optimizer", optimizer_archive);

  archive.write("epoch", c10::IValue(state.epoch));
  archive.write("step", c10::IValue(state.step));
  archive.write("batch_in_epoch", c10::IValue(state.batch_in_epoch));
  archive.write("seen", c10::IValue(state.seen));
  archive.write("train_seconds", c10::IValue(state.train_seconds));
  archive.write("skipped_steps", c10::IValue(state.skipped_steps));
  archive.write("peak_allocated", c10::IValue(state.peak_allocated));
  archive.write("peak_reserved", c10::IValue(state.peak_reserved));
  archive.write("world_size", c10::IValue(state.world_size));
  archive.write("batch_size", c10::IValue(state.batch_size));
  if (state.grad_scale.defined()) {
    archive.write("grad_scale", state.grad_scale.detach());
    archive.write("growth_tracker", state.growth_tracker.detach());
  }
  const bool partial = state.batch_in_epoch > 0;
  archive.write("loss_sum", partial ? state.loss_sum.detach() : torch::zeros({}, torch::kFloat64));
  archive.write("correct", partial ? state.correct.detach() : torch::zeros({}, torch::kInt64));
  if (partial && state.rank_loss_sums.defined()) {
    archive.write("rank_loss_sums", state.rank_loss_sums.detach());
    archive.write("rank_correct", state.rank_correct.detach());
    archive.write("rank_seen", state.rank_seen.detach());
  }

  // Stored as a list of ints: it must come back as a CPU tensor whatever device the rest is
  // mapped to. (All training randomness is drawn from CPU generators.)
  auto rng = at::detail::getDefaultCPUGenerator().get_state();
  archive.write("rng_cpu", c10::IValue(std::vector<int64_t>(
                               rng.data_ptr<uint8_t>(), rng.data_ptr<uint8_t>() + rng.numel())));

  // Serialised straight behind the header's room, then sealed: one copy of the archive in memory.
  std::string framed(kCheckpointHeaderBytes, '\0');
  archive.save_to([&](const void* data, size_t size) {
    framed.append(static_cast<const char*>(data), size);
    return size;
  });
  seal(framed);
  replace_file_atomically(file, [&](const fs::path& temporary) {
    write_whole_file(temporary, framed, file);
    // Read back before it replaces the previous checkpoint: only a verified file may.
    verified_payload(read_whole_file(temporary), file.string());
  });
}

RunInputs checkpoint_inputs(const fs::path& file) {
  auto archive = open_archive(file, torch::kCPU);
  RunInputs inputs{read_value(archive, file, "config").toStringRef(), ""};
  c10::IValue decisions;
  if (archive.try_read("decisions", decisions)) {
    if (!decisions.isString()) {
      throw UserError(file.string() + ": the checkpoint's 'decisions' entry is not text");
    }
    inputs.decisions_json = decisions.toStringRef();
  }
  return inputs;
}

// Where the run stood when it was written.
void read_position(torch::serialize::InputArchive& archive, const fs::path& file,
                   TrainState& state) {
  state.epoch = read_number<int64_t>(archive, file, "epoch", 0);
  state.step = read_number<int64_t>(archive, file, "step", 0);
  state.batch_in_epoch = read_number<int64_t>(archive, file, "batch_in_epoch", 0);
  state.world_size = read_number<int64_t>(archive, file, "world_size", 1);
  state.batch_size = read_number<int64_t>(archive, file, "batch_size", 1);
  state.config_yaml = read_value(archive, file, "config").toStringRef();
}

std::string position_text(const TrainState& s) {
  return s.batch_in_epoch > 0 ? fmt::format("in epoch {} after step {}", s.epoch + 1, s.step)
                              : fmt::format("after epoch {} (step {})", s.epoch, s.step);
}

TrainState checkpoint_position(const fs::path& file) {
  auto archive = open_archive(file, torch::kCPU);
  TrainState position;
  read_position(archive, file, position);
  return position;
}

TrainState check_checkpoint_model(const fs::path& file, torch::nn::Module& model,
                                  torch::optim::Optimizer& optimizer) {
  auto archive = open_archive(file, torch::kCPU);
  check_format(archive, file);
  read_state(archive, file, "model", model, /*copy=*/false);
  read_optimizer(archive, file, optimizer);
  TrainState position;
  read_position(archive, file, position);
  return position;
}

TrainState load_checkpoint(const fs::path& file, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, const torch::Device& device,
                           torch::nn::Module* average, bool* had_average) {
  auto archive = open_archive(file, device);
  check_format(archive, file);
  read_state(archive, file, "model", model);
  c10::IValue stored_average;
  const bool has_average = archive.try_read("average_names", stored_average);
  if (average && has_average) read_state(archive, file, "average", *average);
  if (had_average) *had_average = average && has_average;

  read_optimizer(archive, file, optimizer);
  TrainState state;
  read_position(archive, file, state);
  state.seen = read_number<int64_t>(archive, file, "seen", 0);
  state.train_seconds = read_number<double>(archive, file, "train_seconds", 0);
  state.skipped_steps = read_number<int64_t>(archive, file, "skipped_steps", 0);
  state.peak_allocated = read_number<int64_t>(archive, file, "peak_allocated", 0);
  state.peak_reserved = read_number<int64_t>(archive, file, "peak_reserved", 0);
  c10::IValue scale, tracker;
  if (archive.try_read("grad_scale", scale) && archive.try_read("growth_tracker", tracker)) {
    state.grad_scale = scale.toTensor();
    state.growth_tracker = tracker.toTensor();
  }
  state.loss_sum = read_value(archive, file, "loss_sum").toTensor();
  state.correct = read_value(archive, file, "correct").toTensor();
  c10::IValue loss_sums, rank_correct, rank_seen;
  if (archive.try_read("rank_loss_sums", loss_sums) &&
      archive.try_read("rank_correct", rank_correct) && archive.try_read("rank_seen", rank_seen)) {
    state.rank_loss_sums = loss_sums.toTensor();
    state.rank_correct = rank_correct.toTensor();
    state.rank_seen = rank_seen.toTensor();
  }

  const auto rng_bytes = read_value(archive, file, "rng_cpu").toIntVector();
  auto rng = torch::empty({static_cast<int64_t>(rng_bytes.size())}, torch::kUInt8);
  std::copy(rng_bytes.begin(), rng_bytes.end(), rng.data_ptr<uint8_t>());
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  generator.set_state(rng);
  return state;
}

}  // namespace training
