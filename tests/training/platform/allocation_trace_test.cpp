#include "training/platform/allocation_trace.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <stdexcept>

#include "training/platform/memory.h"

namespace training {
namespace {

std::vector<int64_t> ids(const AllocationStream& stream) {
  std::vector<int64_t> out;
  for (const auto& event : stream.events) out.push_back(event.is_free() ? -event.id - 1 : event.id);
  return out;
}

TEST(AllocationTrace, NumbersAllocationsAndNamesThemInTheirFrees) {
  AllocationTrace trace;
  int a = 0, b = 0;
  trace.allocated(&a, 64);
  trace.allocated(&b, 0);  // an empty allocation is no event
  trace.freed(&b);         // nor is the free of an address it never saw
  trace.allocated(&b, 32);
  trace.freed(&a);
  const AllocationStream stream = trace.stream();
  ASSERT_EQ(stream.events.size(), 3u);
  EXPECT_EQ(stream.events[0].bytes, 64);
  EXPECT_EQ(stream.events[1].id, 1);
  EXPECT_TRUE(stream.events[2].is_free());
  EXPECT_EQ(stream.events[2].id, 0);
}

// Autograd frees saved tensors in an order that follows their addresses: two recordings of one
// step differ inside a run of frees, and only there. The stream sorts each run, never across an
// allocation or a mark.
TEST(AllocationTrace, SortsEachRunOfFreesAndNothingElse) {
  AllocationTrace trace;
  int cells[6] = {};
  for (int i = 0; i < 5; ++i) trace.allocated(&cells[i], 8);
  trace.freed(&cells[3]);
  trace.freed(&cells[1]);
  trace.mark("backward");
  trace.freed(&cells[2]);
  trace.freed(&cells[0]);
  trace.allocated(&cells[5], 8);
  trace.freed(&cells[4]);
  const AllocationStream stream = trace.stream();
  EXPECT_EQ(ids(stream), (std::vector<int64_t>{0, 1, 2, 3, 4, -2, -4, -1, -3, 5, -5}));
  ASSERT_EQ(stream.marks.size(), 1u);
  EXPECT_EQ(stream.marks[0].event, 7u);
}

// A kernel's own working memory (made and freed inside one operator: oneDNN's scratch, other on
// every CPU) is no tensor a card would hold; what leaves the operator is.
TEST(AllocationTrace, LeavesOutWhatAnOperatorAllocatesAndFreesInsideItself) {
  AllocationTrace trace;
  int held = 0, output = 0, scratch = 0, inner = 0;
  trace.allocated(&held, 4);
  trace.mark("step1 forward");
  trace.operation_begins(Operation::Operator);
  trace.allocated(&scratch, 100);
  trace.operation_begins(Operation::Operator);  // e.g. aten::empty inside the kernel
  trace.allocated(&output, 8);
  trace.allocated(&inner, 50);
  trace.operation_ends();
  trace.freed(&inner);  // made by the nested operator, freed by the outer: the outer's scratch
  trace.freed(&scratch);
  trace.operation_ends();
  trace.mark("step1 backward");
  trace.freed(&output);  // outlived the operator
  trace.freed(&held);
  const AllocationStream stream = trace.stream();
  EXPECT_EQ(ids(stream), (std::vector<int64_t>{0, 1, -1, -2}));
  ASSERT_EQ(stream.events.size(), 4u);
  EXPECT_EQ(stream.events[1].bytes, 8);
  ASSERT_EQ(stream.marks.size(), 2u);
  EXPECT_EQ(stream.marks[0].event, 1u);
  EXPECT_EQ(stream.marks[1].event, 2u);
}

// What an operator frees that was made before it began is the step's (an input it consumed), and
// the frees on either side of a dropped scratch allocation become one run, sorted as one.
TEST(AllocationTrace, KeepsWhatAnOperatorFreesOfEarlierAllocationsAndSortsTheJoinedRun) {
  AllocationTrace trace;
  int a = 0, b = 0, scratch = 0;
  trace.allocated(&a, 8);
  trace.allocated(&b, 8);
  trace.operation_begins(Operation::Operator);
  trace.freed(&b);
  trace.allocated(&scratch, 64);
  trace.freed(&scratch);
  trace.freed(&a);
  trace.operation_ends();
  trace.mark("end");
  EXPECT_EQ(ids(trace.stream()), (std::vector<int64_t>{0, 1, -1, -2}));
  ASSERT_EQ(trace.stream().marks.size(), 1u);
  EXPECT_EQ(trace.stream().marks[0].event, 4u);  // a mark after the last event stays last
}

// The operator that runs backward (aten::_backward) evaluates autograd nodes inside it: what it
// frees is the step's (gradients, saved activations, a checkpointed block's recomputation), and
// so is what a node frees.
TEST(AllocationTrace, KeepsWhatIsFreedInsideAnOperatorThatDrivesAutograd) {
  AllocationTrace trace;
  int activation = 0, gradient = 0, recomputed = 0;
  trace.allocated(&activation, 16);
  trace.operation_begins(Operation::Operator);  // aten::_backward
  trace.operation_begins(Operation::AutogradNode);
  trace.allocated(&recomputed, 32);
  trace.operation_begins(Operation::Operator);
  trace.allocated(&gradient, 8);
  trace.operation_ends();
  trace.freed(&recomputed);
  trace.operation_ends();
  trace.freed(&gradient);
  trace.freed(&activation);
  trace.operation_ends();
  EXPECT_EQ(ids(trace.stream()), (std::vector<int64_t>{0, 1, 2, -1, -2, -3}));  // all kept
}

// Real operators, through RecordFunction and the tracking allocator: aten::layer_norm makes the
// mean and the reciprocal deviation (aten::native_layer_norm's outputs) and frees them before it
// returns; only its output is left.
TEST(AllocationTrace, OperationWatchSeesRealOperators) {
  const torch::NoGradGuard no_grad;
  const auto x = torch::randn({8, 16});
  auto record = [&](bool watched) {
    AllocationTrace trace;
    std::optional<OperationWatch> watch;
    if (watched) watch.emplace(trace);
    TrackingCpuAllocator::instance().set_trace(&trace);
    const auto y = at::layer_norm(x, {16});
    TrackingCpuAllocator::instance().set_trace(nullptr);
    AllocationStream stream = trace.stream();
    stream.events.erase(
        stream.events.begin(),
        stream.events.begin() + static_cast<std::ptrdiff_t>(stream.marks.at(0).event));
    return stream.events;
  };
  const auto watched = record(true);
  ASSERT_EQ(watched.size(), 1u);
  EXPECT_EQ(watched[0].bytes, 8 * 16 * 4);
  EXPECT_GT(record(false).size(), 1u);  // the mean and the deviation, made and freed
  AllocationTrace trace;
  const OperationWatch watch(trace);
  EXPECT_THROW(OperationWatch{trace}, std::logic_error);  // one at a time
}

}  // namespace
}  // namespace training
