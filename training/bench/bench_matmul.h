// `train bench matmul`: the seed's CuPy-vs-NumPy experiment in LibTorch. Per device, dtype and
// size: the median synchronised time, GFLOP/s (2·N³ / t), fraction of a peak, memory, and the error
// against float64 on sampled rows.
#pragma once

#include <string>
#include <vector>

namespace training {

// `train bench matmul`'s flags, as given.
struct MatmulRequest {
  std::string sizes = "4096", devices = "cpu", dtypes = "fp32";
  int64_t repeats = 5;
  std::vector<std::string> peaks;
  int64_t threads = 0;       // CPU threads (0 = LibTorch's default)
  int64_t memory_limit = 0;  // --memory-limit in bytes (app/flag_values.h); 0 = none
  std::string output = "matmul.json";
};

// `train bench matmul`: runs the bench, prints the table, writes the JSON. Returns kExitOk, or
// kExitOutOfMemory when a size ran out of memory (after writing every row). Throws UserError for
// bad flags.
int matmul_command(const MatmulRequest& request);

}  // namespace training
