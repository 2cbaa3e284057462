// The store the ranks of a data-parallel job meet at (c10d's TCPStore: rank 0 hosts it, or
// torchrun's agent), and what a rank that will not join leaves in it for its peers
// (distributed.h's tell_peers_this_rank_cannot_start; meet_peers reads it).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include "build_config.h"
#include "training/platform/distributed.h"

#ifdef TRAIN_WITH_DISTRIBUTED
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace training {

// The store of `env`'s job, joined within `timeout` (hosted here on rank 0 without an agent).
c10::intrusive_ptr<c10d::Store> join_store(const LaunchEnv& env, std::chrono::milliseconds timeout);

// A rank's key in the store ("peer/<rank>") holds its address, or this marker, its exit code and
// its line where it cannot start.
inline const std::string kCannotStart = "cannot start ";

// Ends this rank's part in a join that will not happen: sets "left/<rank>", and on the store's
// host (rank 0 without torchrun's agent) waits, until `until` at most, for every other rank to
// have left too, so that none loses the store before it has read why. Throws nothing: a rank
// that does not come, or a store lost, leaves the others their own timeout.
void leave_the_join(c10d::Store& store, const LaunchEnv& env,
                    std::chrono::steady_clock::time_point until);

}  // namespace training
#endif
