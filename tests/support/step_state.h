// Everything a training step changes, by name, for tests that compare two ways of stepping (the
// graphed step against the eager one, a resumed run against a straight one): the parameters,
// the buffers (BatchNorm's running mean and variance and num_batches_tracked), the optimizer's
// momentum buffers and, with training.ema_decay, the weight average's parameters and buffers.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "training/step/step.h"

namespace test_support {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

inline NamedTensors step_state(training::StepParts& parts) {
  NamedTensors state;
  for (const auto& p : parts.model->named_parameters()) state.emplace_back(p.key(), p.value());
  for (const auto& b : parts.model->named_buffers()) state.emplace_back(b.key(), b.value());
  const auto& slots = parts.optimizer->state();
  for (const auto& p : parts.model->named_parameters()) {
    const auto found = slots.find(p.value().unsafeGetTensorImpl());
    if (found == slots.end()) continue;
    const auto& slot = static_cast<const torch::optim::SGDParamState&>(*found->second);
    state.emplace_back("momentum " + p.key(), slot.momentum_buffer());
  }
  if (parts.ema) {
    for (const auto& p : parts.ema->average()->named_parameters()) {
      state.emplace_back("average " + p.key(), p.value());
    }
    for (const auto& b : parts.ema->average()->named_buffers()) {
      state.emplace_back("average " + b.key(), b.value());
    }
  }
  return state;
}

// The two states hold the same names; integer tensors (num_batches_tracked) are equal, floating
// ones bit-equal when `relative` is 0, else within `relative` of the first's norm (plus 1e-4).
inline void expect_same_step_state(training::StepParts& a, training::StepParts& b,
                                   double relative) {
  const NamedTensors first = step_state(a), second = step_state(b);
  ASSERT_EQ(first.size(), second.size());
  int64_t momentum = 0, tracked = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    const auto& [name, x] = first[i];
    const auto& y = second[i].second;
    ASSERT_EQ(name, second[i].first);
    if (name.rfind("momentum ", 0) == 0) ++momentum;
    if (name.find("num_batches_tracked") != std::string::npos) ++tracked;
    if (!x.is_floating_point() || relative == 0) {
      EXPECT_TRUE(x.equal(y)) << name;
      continue;
    }
    const auto xf = x.to(torch::kFloat64), yf = y.to(torch::kFloat64);
    EXPECT_LE((xf - yf).norm().item<double>(), relative * xf.norm().item<double>() + 1e-4) << name;
  }
  // What the comparison is for: it covers the momentum and the BatchNorm step counts.
  EXPECT_GT(momentum, 0);
  EXPECT_GT(tracked, 0);
}

}  // namespace test_support
