#include "training/platform/rendezvous_store.h"

#include <algorithm>

#ifdef TRAIN_WITH_DISTRIBUTED
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace training {

#ifdef TRAIN_WITH_DISTRIBUTED

// Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) the agent of node 0 already hosts the store on
// MASTER_ADDR:MASTER_PORT: every rank is its client. Otherwise rank 0 hosts it. The keys of each
// elastic restart are kept apart.
c10::intrusive_ptr<c10d::Store> join_store(const LaunchEnv& env,
                                           std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.master_port);
  options.isServer = !env.agent_store && env.rank == 0;
  options.waitWorkers = false;  // the ranks meet below, where a missing one can be named
  options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  return c10::make_intrusive<c10d::PrefixStore>("train/attempt_" + env.restart, store);
}

void leave_the_join(c10d::Store& store, const LaunchEnv& env,
                    std::chrono::steady_clock::time_point until) {
  try {
    store.set("left/" + std::to_string(env.rank), "");
    if (env.rank != 0 || env.agent_store) return;
    for (int64_t r = 1; r < env.world_size; ++r) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      store.setTimeout(left);
      store.wait({"left/" + std::to_string(r)});
    }
  } catch (const std::exception&) {
  }
}

void tell_peers_this_rank_cannot_start(const LaunchEnv& env, std::chrono::seconds timeout, int code,
                                       const std::string& line) {
  try {
    // The store is waited for a short while only: one that is not there by then (rank 0 not
    // started) leaves the peers their own timeout, as before.
    const auto store =
        join_store(env, std::min<std::chrono::milliseconds>(timeout, kTellPeersWithin));
    store->set("peer/" + std::to_string(env.rank),
               kCannotStart + std::to_string(code) + " " + line);
    leave_the_join(*store, env, std::chrono::steady_clock::now() + kTellPeersWithin);
  } catch (const std::exception&) {  // the peers' own timeout says the rest
  }
}

#else

void tell_peers_this_rank_cannot_start(const LaunchEnv&, std::chrono::seconds, int,
                                       const std::string&) {}

#endif

}  // namespace training
