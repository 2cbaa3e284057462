#include "training/platform/distributed.h"

#include "build_config.h"

#ifdef TRAIN_WITH_DISTRIBUTED
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <map>

#include "training/platform/errors.h"
#include "training/platform/join_deadline.h"
#include "training/platform/memory.h"
#include "training/platform/network.h"
#include "training/platform/rendezvous_store.h"

#ifdef TRAIN_WITH_NCCL
#include "training/platform/device_cuda.h"
#endif

namespace training {

#ifdef TRAIN_WITH_DISTRIBUTED

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  c10d::ProcessGroup::BackendType type = c10d::ProcessGroup::BackendType::GLOO;
};

namespace {

using Clock = std::chrono::steady_clock;

// Why the store's server could not listen, from c10d's text ("... message: address already in
// use"): its message, else the whole text.
std::string listen_failure(const std::string& error) {
  const auto at = error.rfind("message: ");
  return at == std::string::npos ? error : error.substr(at + 9);
}

// `check`'s result; what it refuses (before any other rank is waited for) is told to the others,
// so that they do not wait for this rank, and thrown.
template <class Check>
auto told_if_refused(const LaunchEnv& env, const DistributedOptions& options,
                     const std::string& interface_setting, Check&& check) {
  try {
    return check();
  } catch (const std::exception& e) {
    const bool keyed = dynamic_cast<const InterfaceRefused*>(&e) && !interface_setting.empty();
    tell_peers_this_rank_cannot_start(env, std::chrono::seconds(options.timeout_seconds),
                                      kExitBadInput,
                                      (keyed ? interface_setting + ": " : "") + error_line(e));
    throw;
  }
}

// Who hosts the store, for messages.
std::string store_host(const LaunchEnv& env) {
  return env.agent_store ? "torchrun's agent on node 0" : "rank 0";
}

// NCCL's backend (`nccl`: uses_nccl said so), or Gloo's full mesh over the peer network's
// interfaces, connected within `connect_within` (what is left of the join's), collectives
// `timeout`.
c10::intrusive_ptr<c10d::Backend> make_backend(bool nccl, const LaunchEnv& env,
                                               const PeerNetwork& network,
                                               std::chrono::milliseconds connect_within,
                                               std::chrono::seconds timeout,
                                               const c10::intrusive_ptr<c10d::Store>& store) {
#ifdef TRAIN_WITH_NCCL
  if (nccl) return cuda::make_nccl_backend(store, env.rank, env.world_size, timeout);
#else
  (void)nccl;
#endif
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(connect_within);
  for (const auto& interface : network.interfaces) {
    gloo_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(interface.address));
  }
  auto gloo =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, gloo_options);
  gloo->setTimeout(timeout);
  return gloo;
}

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
  void prepare(const torch::Tensor& output) override {
    reducer_->prepare_for_backward({output});
    ++reductions_;
  }

 private:
  std::unique_ptr<c10d::Reducer> reducer_;
};

}  // namespace

bool uses_nccl(DistributedBackend backend, const torch::Device& device) {
  const bool nccl = backend == DistributedBackend::Nccl ||
                    (backend == DistributedBackend::Auto && device.is_cuda());
  if (nccl && !device.is_cuda()) {
    throw BackendRefused("nccl needs a CUDA device; this rank trains on " + device.str());
  }
#ifndef TRAIN_WITH_NCCL
  if (nccl) {
    throw BackendRefused(
        "nccl is not in this build (it needs a CUDA LibTorch and nccl.h at build time)");
  }
#endif
  return nccl;
}

ProcessGroup::ProcessGroup(const LaunchEnv& env, const DistributedOptions& options,
                           const torch::Device& device, const std::string& interface_setting)
    : env_(env),
      options_(options),
      interface_remedy_("set GLOO_SOCKET_IFNAME" +
                        (interface_setting.empty() ? "" : " (or " + interface_setting + ")")),
      device_(device),
      impl_(std::make_unique<Impl>()) {
  const bool nccl = told_if_refused(env, options, interface_setting, [&] {
    const bool uses = uses_nccl(options.backend, device);
    // Refused here, before any other rank is waited for: a named interface this host lacks.
    network_ =
        choose_peer_network({options.interface, interface_setting}, env.gloo_socket_ifname.c_str(),
                            env.master_addr, static_cast<int>(env.master_port));
    return uses;
  });
  const std::string me = "rank " + std::to_string(env.rank);
  network_description_ = "reached by its peers through " + describe(network_.interfaces) +
                         ", chosen by " + network_.chosen_by;
  if (nccl && !std::getenv("NCCL_SOCKET_IFNAME")) {
    std::string names;
    for (const auto& i : network_.interfaces) names += (names.empty() ? "" : ",") + i.name;
    // "=": NCCL then matches the names exactly, not as prefixes (eth1 would take eth10 too).
    ::setenv("NCCL_SOCKET_IFNAME", ("=" + names).c_str(), 1);
    network_description_ += "; NCCL_SOCKET_IFNAME==" + names + " set to match";
  }
  const auto timeout = std::chrono::seconds(options.timeout_seconds);
  const std::string store_address = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string within = " within " + std::to_string(options.timeout_seconds) + " s";
  // Each stage's message, said by the deadline or with the error that ended it.
  const std::string unreachable =
      me + ": could not reach the other ranks through " + store_address + within +
      " (the store, hosted by " + store_host(env) +
      ": is every rank started, with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE?)";
  JoinDeadline deadline(Clock::now() + timeout + kJoinGrace, unreachable);
  try {
    impl_->store = join_store(env, deadline.remaining());
  } catch (const std::exception& e) {
    const std::string error = first_line(e.what());
    // The store's host cannot listen (MASTER_PORT in use): the cause, not the peers, is said.
    if (error.find("failed to listen") != std::string::npos) {
      throw DistributedError(
          me + ": cannot host the store on " + store_address + ": failed to listen (" +
          listen_failure(error) + "); choose another MASTER_PORT (" +
          shell_word(TRAIN_SCRIPTS_DIR "/launch.py") + " --master-port 0 picks a free one)");
    }
    throw DistributedError(unreachable + ": " + error);
  }
  try {
    meet_peers(deadline.remaining(), within);
  } catch (const DistributedError&) {
    throw;
  } catch (const PeerError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError(me + ": lost the store at " + store_address + " (hosted by " +
                           store_host(env) + ") while meeting the other ranks: " + error_line(e));
  }
  const std::string reach_each_other =
      "the hosts must reach each other on these addresses: " + interface_remedy_ +
      " on each host to the interface that does";
  deadline.stage(me + ": could not connect to " + describe_peers("") + within + "; " +
                 reach_each_other);
  try {
    const auto backend =
        make_backend(nccl, env, network_, deadline.remaining(), timeout, impl_->store);
    if (nccl) impl_->type = c10d::ProcessGroup::BackendType::NCCL;
    impl_->group = c10::make_intrusive<c10d::ProcessGroup>(impl_->store, env.rank, env.world_size);
    impl_->group->setBackend(device.type(), impl_->type, backend);
    impl_->group->setDefaultBackend(impl_->type);
    // A first collective: NCCL makes its communicator here, and every connection has carried data.
    std::vector<torch::Tensor> probe = {torch::zeros({1}, torch::TensorOptions().device(device))};
    impl_->group->allreduce(probe)->wait();
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistributedError(me + ": could not connect to " + describe_peers(e.what()) + within +
                           " (" + error_line(e) + "); " + reach_each_other);
  }
}

// Every rank publishes the address its peers reach it at and reads theirs: the rendezvous (a rank
// that does not come is named, one that cannot start is passed on) and what the error messages
// name.
void ProcessGroup::meet_peers(std::chrono::milliseconds timeout, const std::string& within) {
  const auto join_ends = Clock::now() + timeout;
  auto& store = *impl_->store;
  const auto& first = network_.interfaces.front();
  store.set("peer/" + std::to_string(env_.rank), first.address + " " + first.name);
  store.setTimeout(timeout);
  peers_.assign(env_.world_size, "");
  std::vector<std::string> missing;
  for (int64_t r = 0; r < env_.world_size; ++r) {
    if (r == env_.rank) {
      peers_[r] = first.address + " " + first.name;
      continue;
    }
    try {
      const auto bytes = store.get("peer/" + std::to_string(r));
      peers_[r].assign(bytes.begin(), bytes.end());
    } catch (const c10::DistNetworkError&) {
      throw;  // the store itself is lost, not a rank late
    } catch (const std::exception&) {
      missing.push_back(std::to_string(r));
      // The others are not waited for again: the whole timeout is spent.
      store.setTimeout(std::chrono::milliseconds(1));
      continue;
    }
    if (peers_[r].rfind(kCannotStart, 0) == 0) {  // "cannot start <code> <line>"
      const std::string told = peers_[r].substr(kCannotStart.size());
      const auto space = told.find(' ');
      // Within the join's own deadline (JoinDeadline would end this rank with exit 4).
      leave_the_join(store, env_, std::min(Clock::now() + kTellPeersWithin, join_ends));
      throw PeerError(std::atoi(told.substr(0, space).c_str()),
                      "rank " + std::to_string(env_.rank) + ": rank " + std::to_string(r) +
                          " could not start, so no rank trains: " + told.substr(space + 1));
    }
  }
  store.setTimeout(std::chrono::seconds(options_.timeout_seconds));
  // A loopback address with a peer elsewhere: the mesh would wait the whole timeout.
  for (int64_t r = 0; missing.empty() && r < env_.world_size; ++r) {
    const std::string address = peers_[r].substr(0, peers_[r].find(' '));
    for (int64_t other = 0; is_loopback_address(address) && other < env_.world_size; ++other) {
      const std::string theirs = peers_[other].substr(0, peers_[other].find(' '));
      if (is_loopback_address(theirs)) continue;
      throw DistributedError(
          "rank " + std::to_string(env_.rank) + ": rank " + std::to_string(r) + " is reached at " +
          address + " (loopback) but rank " + std::to_string(other) + " at " + theirs +
          ", on another host: " + interface_remedy_ + " on rank " + std::to_string(r) +
          "'s host to the interface the others reach it through");
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (const auto& r : missing) ranks += (ranks.empty() ? "" : ", ") + r;
    throw DistributedError("rank " + std::to_string(env_.rank) + ": rank(s) " + ranks +
                           " did not join" + within + " (each has to reach the store at " +
                           env_.master_addr + ":" + std::to_string(env_.master_port) +
                           ": is it started, with the same MASTER_ADDR, MASTER_PORT and "
                           "WORLD_SIZE?)");
  }
}

// "rank 1 at 10.0.0.2 (eth0)": the peers whose address appears in `error` (Gloo names the remote
// end: "remote=[10.0.0.2]:4711"), or every peer when none does.
std::string ProcessGroup::describe_peers(const std::string& error) const {
  std::vector<int64_t> named, others;
  for (int64_t r = 0; r < static_cast<int64_t>(peers_.size()); ++r) {
    if (r == env_.rank || peers_[r].empty()) continue;
    const std::string address = peers_[r].substr(0, peers_[r].find(' '));
    (error.find("[" + address + "]") != std::string::npos ? named : others).push_back(r);
  }
  if (named.empty()) named = others;
  std::string text;
  for (const int64_t r : named) {
    const std::string& peer = peers_[r];
    const size_t space = peer.find(' ');
    text += (text.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " at " +
            peer.substr(0, space) + " (" + peer.substr(space + 1) + ")";
  }
  return text.empty() ? "the other ranks" : text;
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

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<torch::Tensor>& params,
                                                  int64_t bucket_bytes) {
  auto buckets = std::get<0>(c10d::compute_bucket_assignment_by_size(
      params, {static_cast<size_t>(kFirstBucketBytes), static_cast<size_t>(bucket_bytes)}));
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

std::unique_ptr<ProcessGroup::GradientAverager> ProcessGroup::gradient_averager(
    torch::nn::Module& module) const {
  return std::make_unique<ReducerAverager>(module, impl_->group, options_.bucket_mb * kMiB);
}

#else  // no Gloo headers at build time: refuse at the door, before anything else happens

struct ProcessGroup::Impl {};

ProcessGroup::ProcessGroup(const LaunchEnv& env, const DistributedOptions& options,
                           const torch::Device& device, const std::string&)
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
void ProcessGroup::meet_peers(std::chrono::milliseconds, const std::string&) {}
std::string ProcessGroup::describe_peers(const std::string&) const {
  return "the other ranks";
}
std::unique_ptr<ProcessGroup::GradientAverager> ProcessGroup::gradient_averager(
    torch::nn::Module&) const {
  return nullptr;
}
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<torch::Tensor>&, int64_t) {
  throw UserError("this build has no data-parallel training (no Gloo headers at build time)");
}

#endif

}  // namespace training
