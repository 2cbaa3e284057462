// `train bench matmul`: the seed's CuPy-vs-NumPy experiment in LibTorch. Square random matrices
// on each device and dtype, warm-up, device-synchronised timing, and per entry the median time,
// GFLOP/s (2·N³ / t), the fraction of a peak, the memory used, and the error against a float64
// reference on a sample of rows.
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
