// Internal to the device seam: implemented in device_cuda.cpp (CUDA builds only). Called from
// device.cpp, and from distributed.cpp for the NCCL backend (which needs CUDA's headers too).
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>

#include "training/platform/memory.h"
#include "training/platform/memory_timeline.h"

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace training::cuda {

std::string describe(int index);
MemoryStats memory_stats(int index);
void reset_peak_memory(int index);
void set_memory_fraction(int index, double fraction);
int64_t total_memory(int index);
int compute_capability_major(int index);
void make_current(int index);
std::string pci_bus_id(int index);
void trace_allocations(int index, MemoryTimeline* timeline);
void start_memory_history(int index, int64_t max_entries);
std::string memory_snapshot_pickle();
void stop_memory_history();
int64_t memory_outside_allocator(int index);

// An NCCL process-group backend for this rank (training/distributed.cpp asks for it). Throws
// UserError when the NCCL library loaded at run time is not the version this build's nccl.h
// describes (ProcessGroupNCCL::Options embeds NCCL's config struct, laid out from the header).
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int64_t rank, int64_t world_size,
                                                    std::chrono::seconds timeout);

}  // namespace training::cuda
