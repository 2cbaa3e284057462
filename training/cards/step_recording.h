// A setting's training step recorded on the CPU as an allocation stream
// (platform/allocation_trace.h): the step's parts built as training builds them, its phases marked,
// the card's tensors and nothing else.
#pragma once

#include <cstdint>

#include "training/config/config.h"
#include "training/config/setting.h"
#include "training/platform/allocation_trace.h"
#include "training/platform/device.h"

namespace training {

inline constexpr int kTraceSteps = 3;

// One setting's step on the CPU at `batch`, `steps` times, on one thread (the stream the same at
// every batch). Marks: "held" (weights, buffers, the batch; with sweep.data_parallel the Reducer's
// buckets), then "stepN forward|backward|optimizer|end" ("stepN microM ..." when accumulating).
// Checkpointing auto is refused (UserError): its blocks depend on the budget. fp16 with
// `fp16_through_bf16` runs bf16's kernels under fp16's GradScaler: autocast's CPU casts make the
// same tensors, and the CPU's fp16 kernels are far slower (ResNet-18 at 32x32: 13.0 s against 1.5
// s).
AllocationStream record_step_stream(const Config& config, const Setting& setting, int64_t batch,
                                    int steps = kTraceSteps,
                                    bool fp16_through_bf16 = cpu_has_native_bf16());

// The bytes of c10d's Reducer's gradient buckets one rank holds with sweep.data_parallel (the
// buckets record_step_stream holds); 0 without it.
int64_t reducer_bucket_bytes(const Config& config);

}  // namespace training
