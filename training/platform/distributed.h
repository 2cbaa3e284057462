// Data-parallel training on c10d, the engine under PyTorch's DDP: a TCPStore rendezvous, a Gloo
// (CPU) or NCCL (CUDA) process group, and the Reducer, which all-reduces gradients in buckets as
// backward produces them. Ranks start as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT; scripts/launch.py). BatchNorm normalises with each rank's batch; the
// running estimates are rank 0's, broadcast before each step and evaluation, as DDP does.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "training/platform/errors.h"
#include "training/platform/network.h"

namespace training {

struct LaunchEnv {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  bool agent_store = false;        // TORCHELASTIC_USE_AGENT_STORE=True: torchrun hosts the store
  std::string restart = "0";       // TORCHELASTIC_RESTART_COUNT: each restart's keys apart
  std::string gloo_socket_ifname;  // GLOO_SOCKET_IFNAME ("" = unset)
};

// The torchrun variables (and GLOO_SOCKET_IFNAME), or nullopt when WORLD_SIZE is unset. Throws
// UserError naming the variable when one is malformed or inconsistent (RANK >= WORLD_SIZE, ...).
std::optional<LaunchEnv> launch_env_from_environment();
// WORLD_SIZE alone (1 when unset), for a command that runs as one process whatever the rest says.
int64_t world_size_from_environment();

enum class DistributedBackend { Auto, Gloo, Nccl };

struct DistributedOptions {
  DistributedBackend backend = DistributedBackend::Auto;  // auto: nccl on CUDA, gloo on the CPU
  int64_t bucket_mb = 25;                                 // all-reduce bucket size
  int64_t timeout_seconds = 60;                           // rendezvous and collectives
  std::string interface;  // the interfaces peers reach this rank through ("" = route to the store)
};

// The Reducer's gradient buckets of `params` (parameter indices), assigned by size as DDP does
// (kFirstBucketBytes first, then `bucket_bytes` each) and reversed: backward produces gradients in
// about reverse order and bucket i goes after 0..i-1, so the output layers' overlap backward.
inline constexpr int64_t kFirstBucketBytes = 1 << 20;
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<torch::Tensor>& params,
                                                  int64_t bucket_bytes);

// Whether a group of `backend` for a rank on `device` is NCCL's (auto: on a CUDA device);
// BackendRefused (errors.h) when NCCL is asked for a CPU rank or is not in this build. The group
// checks it before waiting for anyone; a sweep's trials before the first starts.
bool uses_nccl(DistributedBackend backend, const torch::Device& device);

// How long a rank that cannot start spends telling its peers: to reach the store, and, on the
// store's host, for the others to read why (their connection retries back off to about 4 s).
inline constexpr auto kTellPeersWithin = std::chrono::seconds(10);

// A rank that ends before it has joined the group (its config, device, data, checkpoint or
// interface refused; out of memory deciding an auto) tells its peers, so that they end at once
// with its line rather than wait for it until distributed.timeout_seconds: it puts `code` (its
// exit code) and `line` where its address would go, and each peer meeting it ends with "rank 1:
// rank 0 could not start, so no rank trains: <line>" and that code (PeerError). It waits for the
// store, and on the store's host for the others to read it, kTellPeersWithin at most
// (rendezvous_store.h). Throws nothing: a store it cannot reach leaves the peers their timeout.
void tell_peers_this_rank_cannot_start(const LaunchEnv& env, std::chrono::seconds timeout, int code,
                                       const std::string& line);

class ProcessGroup {
 public:
  // Joins the group (store, peers' addresses, connections, a first collective) within
  // distributed.timeout_seconds, else exits 4 naming the stage. Throws BackendRefused or
  // InterfaceRefused (errors.h) before waiting for anyone, DistributedError when a peer cannot be
  // reached; `interface_setting` ("distributed.interface") is named beside GLOO_SOCKET_IFNAME.
  ProcessGroup(const LaunchEnv& env, const DistributedOptions& options, const torch::Device& device,
               const std::string& interface_setting);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }
  bool is_main() const { return env_.rank == 0; }
  const char* backend_name() const;

  // Every parameter and buffer of `module` takes rank 0's value.
  void broadcast_from_main(torch::nn::Module& module);
  // Every buffer (BatchNorm's running statistics) takes rank 0's value, as PyTorch's DDP does
  // before each forward (broadcast_buffers): the ranks evaluate with the same statistics, and a
  // resume from rank 0's checkpoint continues exactly. One broadcast per dtype.
  void broadcast_buffers(torch::nn::Module& module);
  // Element-wise sum (or max) over the ranks, in place.
  void all_reduce(std::vector<torch::Tensor>& tensors, bool max = false);

  // "reached by its peers through eth0 (10.0.0.2), chosen by the route to the store at ...":
  // what the rank's start-up line says of its network.
  const std::string& network_description() const { return network_description_; }

  // The peers named by a backend's error ("rank 1 at 10.0.0.2 (eth0)"; every peer when the error
  // names none): who a rank lost contact with.
  std::string describe_peers(const std::string& error) const;

  // Averages gradients across ranks during the next backward: call prepare(output) before a
  // backward whose gradients are to be averaged. Without it, a backward adds its gradients to the
  // local ones (gradient accumulation's micro-batches, as DDP's no_sync).
  class GradientAverager {
   public:
    virtual ~GradientAverager() = default;
    virtual void prepare(const torch::Tensor& output) = 0;
    // The backward passes prepared so far: the gradient reductions (tests count them).
    int64_t reductions() const { return reductions_; }

   protected:
    int64_t reductions_ = 0;
  };
  std::unique_ptr<GradientAverager> gradient_averager(torch::nn::Module& module) const;

 private:
  void meet_peers(std::chrono::milliseconds timeout, const std::string& within);

  struct Impl;
  PeerNetwork network_;
  std::vector<std::string> peers_;  // per rank: "address interface"
  std::string network_description_;
  LaunchEnv env_;
  DistributedOptions options_;
  std::string interface_remedy_;  // "set GLOO_SOCKET_IFNAME (or <interface_setting>)"
  torch::Device device_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace training
