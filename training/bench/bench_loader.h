// `train bench loader`: the input pipeline alone. The configured training loader (data.loader,
// data.workers, data.prefetch, augmentation, device) runs for a number of batches with nothing
// else, and reports images/s: set beside a training run's images/s, it says whether the input
// pipeline can keep up.
#pragma once

#include <string>
#include <vector>

#include "training/config/config.h"

namespace training {

struct LoaderBenchRequest {
  std::string config_path;
  std::vector<Override> overrides;
  int64_t batches = 200;  // batches to time, over as many epochs as it takes
  std::string output;     // a JSON file for the result ("" = none)
};

// Times the loader (device-synchronised); prints one line, writes the JSON when asked.
void loader_bench_command(const LoaderBenchRequest& request);

}  // namespace training
