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

// One setting's step on the CPU at `batch`, `steps` times, on one thread (so that the stream is the
// same at every batch). Marks: "held" (what is allocated before: weights, buffers, the batch; with
// sweep.data_parallel, c10d's Reducer's gradient buckets of distributed.bucket_mb, as a
// data-parallel trial holds them), then "stepN forward|backward|optimizer|end", or with
// setting.accumulate_steps N > 1 "stepN microM ..." (the first micro-batch's gradients held through
// the others; CardPredictor records N = 2, which every later micro-batch repeats). Checkpointing
// auto is refused (UserError): its blocks depend on the budget. fp16 with `fp16_through_bf16`
// (where the CPU has native bf16) runs bf16's kernels under fp16's GradScaler: autocast's CPU casts
// are one list for both 2-byte types, so the tensors are the same, and the CPU's fp16 kernels are
// far slower (ResNet-18 at 32x32: 13.0 s against 1.5 s; ResNet-50 at 224: over 10 minutes).
AllocationStream record_step_stream(const Config& config, const Setting& setting, int64_t batch,
                                    int steps = kTraceSteps,
                                    bool fp16_through_bf16 = cpu_has_native_bf16());

// The bytes of c10d's Reducer's gradient buckets one rank holds with sweep.data_parallel (the
// buckets record_step_stream holds); 0 without it.
int64_t reducer_bucket_bytes(const Config& config);

}  // namespace training
