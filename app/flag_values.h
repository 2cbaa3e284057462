// Flags that are not config keys (sizes, shares, the card), read once into the typed values the
// commands take; each refusal names its flag (UserError, exit 2) before the command starts.
#pragma once

#include <string>

#include "training/studies/plan.h"

namespace app {

// `train plan`'s flags as given.
struct PlanFlags {
  std::string memory, card, headroom = "10%", overhead, target_batch;
};

// `request` with the flags' typed values, every flag checked: one of --memory and --card, sizes
// above 0, a headroom in [0, 1), --target-batch and --budget in range, one of --from and --config,
// and a --json path that holds nothing or an earlier plan.
training::PlanRequest plan_request(const PlanFlags& flags, training::PlanRequest request);

}  // namespace app
