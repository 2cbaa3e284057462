#include "training/platform/distributed.h"

#include "build_config.h"

#ifdef TRAIN_WITH_DISTRIBUTED
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <map>

#include "training/platform/errors.h"

#ifdef TRAIN_WITH_NCCL
#include "training/platform/device_cuda.h"
#endif

namespace training {

namespace {

int64_t env_integer(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* text = std::getenv(name);
  if (!text) return fallback;
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    if (used == std::string(text).size() && value >= lo && value <= hi) return value;
  } catch (const std::exception&) {
  }
  throw UserError(std::string(name) + ": expected an integer in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got '" + text + "'");
}

}  // namespace

std::optional<LaunchEnv> launch_env_from_environment() {
  if (!std::getenv("WORLD_SIZE")) return std::nullopt;
  LaunchEnv env;
  env.world_size = env_integer("WORLD_SIZE", 1, 1, 1 << 16);
  env.rank = env_integer("RANK", 0, 0, env.world_size - 1);
  env.local_rank = env_integer("LOCAL_RANK", env.rank, 0, env.world_size - 1);
  if (const char* addr = std::getenv("MASTER_ADDR")) env.master_addr = addr;
  env.master_port = env_integer("MASTER_PORT", 29500, 1, 65535);
  if (env.world_size > 1 && (!std::getenv("RANK") || !std::getenv("MASTER_PORT"))) {
    throw UserError("WORLD_SIZE=" + std::to_string(env.world_size) +
                    " needs RANK and MASTER_PORT too (start the ranks with scripts/launch.py)");
  }
  return env;
}

#ifdef TRAIN_WITH_DISTRIBUTED

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  c10d::ProcessGroup::BackendType type = c10d::ProcessGroup::BackendType::GLOO;
};

ProcessGroup::ProcessGroup(const LaunchEnv& env, const DistributedOptions& options,
                           const torch::Device& device)
    : env_(env), options_(options), device_(device), impl_(std::make_unique<Impl>()) {
  const bool nccl = options.backend == DistributedBackend::Nccl ||
                    (options.backend == DistributedBackend::Auto && device.is_cuda());
  if (nccl && !device.is_cuda()) {
    throw KeyError("distributed.backend", "nccl needs training.device cuda; use gloo on the CPU");
  }
  const auto timeout = std::chrono::seconds(options.timeout_seconds);
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0;
    store_options.numWorkers = static_cast<int>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const std::exception& e) {
    throw DistributedError("rank " + std::to_string(env.rank) +
                           ": could not reach the other ranks through " + where + " within " +
                           std::to_string(options.timeout_seconds) +
                           " s (is every rank started, with the same MASTER_ADDR, MASTER_PORT and "
                           "WORLD_SIZE?): " +
                           first_line(e.what()));
  }
  c10::intrusive_ptr<c10d::Backend> backend;
  if (nccl) {
#ifdef TRAIN_WITH_NCCL
    backend = cuda::make_nccl_backend(impl_->store, env.rank, env.world_size, timeout);
    impl_->type = c10d::ProcessGroup::BackendType::NCCL;
#else
    throw UserError(
        "distributed.backend: nccl is not in this build (it needs a CUDA LibTorch and "
        "nccl.h at build time); use gloo");
#endif
  } else {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create();
    gloo_options->timeout = timeout;
    // Loopback rendezvous: talk over loopback; otherwise the interface this host name resolves to.
    const bool loopback = env.master_addr == "127.0.0.1" || env.master_addr == "localhost";
    gloo_options->devices.push_back(
        loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                 : c10d::ProcessGroupGloo::createDefaultDevice());
    backend = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env.rank, env.world_size,
                                                          gloo_options);
  }
  impl_->group = c10::make_intrusive<c10d::ProcessGroup>(impl_->store, env.rank, env.world_size);
  impl_->group->setBackend(device.type(), impl_->type, backend);
  impl_->group->setDefaultBackend(impl_->type);
}

ProcessGroup::~ProcessGroup() = default;

const char* ProcessGroup::backend_name() const {
  return impl_->type == c10d::ProcessGroup::BackendType::NCCL ? "nccl" : "gloo";
}

void ProcessGroup::broadcast_from_main(torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors;
  for (auto& p : module.parameters()) tensors.push_back(p.detach());
  for (auto& b : module.buffers()) tensors.push_back(b.detach());
  torch::NoGradGuard no_grad;
  // One tensor per call: Gloo broadcasts a list only when all its tensors share a shape.
  for (auto& tensor : tensors) {
    std::vector<torch::Tensor> one = {tensor};
    impl_->group->broadcast(one)->wait();
  }
}

void ProcessGroup::broadcast_buffers(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (auto& b : module.buffers()) by_dtype[b.scalar_type()].push_back(b.detach());
  for (auto& [dtype, buffers] : by_dtype) {
    std::vector<torch::Tensor> flat = {torch::cat([&] {
      std::vector<torch::Tensor> views;
      for (auto& b : buffers) views.push_back(b.reshape({-1}));
      return views;
    }())};
    impl_->group->broadcast(flat)->wait();
    int64_t offset = 0;
    for (auto& b : buffers) {
      b.copy_(flat[0].narrow(0, offset, b.numel()).view_as(b));
      offset += b.numel();
    }
  }
}

void ProcessGroup::all_reduce(std::vector<torch::Tensor>& tensors, bool max) {
  c10d::AllreduceOptions options;
  options.reduceOp = max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  for (auto& tensor : tensors) {
    std::vector<torch::Tensor> one = {tensor};
    impl_->group->allreduce(one, options)->wait();
  }
}

void ProcessGroup::barrier() {
  impl_->group->barrier()->wait();
}

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<torch::Tensor>& params,
                                                  int64_t bucket_bytes) {
  auto buckets = std::get<0>(c10d::compute_bucket_assignment_by_size(
      params, {static_cast<size_t>(kFirstBucketBytes), static_cast<size_t>(bucket_bytes)}));
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

namespace {

class ReducerAverager : public ProcessGroup::GradientAverager {
 public:
  ReducerAverager(torch::nn::Module& module, const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                  int64_t bucket_bytes) {
    std::vector<torch::Tensor> params;
    for (auto& p : module.parameters()) {
      if (p.requires_grad()) params.push_back(p);
    }
    reducer_ = std::make_unique<c10d::Reducer>(
        params, gradient_buckets(params, bucket_bytes), group,
        std::vector<bool>(params.size(), false), bucket_bytes,
        /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false,
        std::unordered_map<size_t, std::string>{}, kFirstBucketBytes,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        std::vector<int64_t>{});
  }
  void prepare(const torch::Tensor& output) override { reducer_->prepare_for_backward({output}); }

 private:
  std::unique_ptr<c10d::Reducer> reducer_;
};

}  // namespace

std::unique_ptr<ProcessGroup::GradientAverager> ProcessGroup::gradient_averager(
    torch::nn::Module& module) const {
  return std::make_unique<ReducerAverager>(module, impl_->group, options_.bucket_mb << 20);
}

#else  // no Gloo headers at build time: refuse at the door, before anything else happens

struct ProcessGroup::Impl {};

ProcessGroup::ProcessGroup(const LaunchEnv& env, const DistributedOptions& options,
                           const torch::Device& device)
    : env_(env), options_(options), device_(device) {
  throw UserError("WORLD_SIZE=" + std::to_string(env.world_size) +
                  ": this build has no data-parallel training (Gloo's headers were missing when it "
                  "was built: install libgloo-dev and rebuild)");
}
ProcessGroup::~ProcessGroup() = default;
const char* ProcessGroup::backend_name() const {
  return "none";
}
void ProcessGroup::broadcast_from_main(torch::nn::Module&) {}
void ProcessGroup::broadcast_buffers(torch::nn::Module&) {}
void ProcessGroup::all_reduce(std::vector<torch::Tensor>&, bool) {}
void ProcessGroup::barrier() {}
std::unique_ptr<ProcessGroup::GradientAverager> ProcessGroup::gradient_averager(
    torch::nn::Module&) const {
  return nullptr;
}
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<torch::Tensor>&, int64_t) {
  throw UserError("this build has no data-parallel training (no Gloo headers at build time)");
}

#endif

}  // namespace training
