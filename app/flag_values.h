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

// `request` with the flags' typed values, each checked (one of --memory and --card, of --from and
// --config; sizes, headroom, --target-batch, --budget in range; --json no file or a plan).
training::PlanRequest plan_request(const PlanFlags& flags, training::PlanRequest request);

}  // namespace app
