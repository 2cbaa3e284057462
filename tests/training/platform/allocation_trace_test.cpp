#include "training/platform/allocation_trace.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace training
