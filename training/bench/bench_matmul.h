// `train bench matmul`: the seed's CuPy-vs-NumPy experiment in LibTorch. Square random matrices
// on each device and dtype, warm-up, device-synchronised timing, and per entry the median time,
// GFLOP/s (2·N³ / t), the fraction of a peak, the memory used, and the error against a float64
// reference on a sample of rows.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace training {

struct MatmulBenchOptions {
  std::vector<int64_t> sizes = {4096};
  std::vector<std::string> devices = {"cpu"};  // cpu, cuda, cuda:N
  std::vector<std::string> dtypes = {"fp32"};  // fp64, fp32, bf16, fp16
  int64_t repeats = 5;
  int64_t warmup = 1;
  std::map<std::string, double> peak_gflops;  // "cpu:fp32" -> GFLOP/s, given by the user
  int64_t memory_limit = 0;  // bytes each device may hold, as memory.limit (0 = the device's)
};

struct MatmulResult {
  std::string device, dtype;
  int64_t size = 0;
  bool available = true;
  bool out_of_memory = false;  // the device ran out of memory for this size (not available)
  std::string note;            // why not available
  double median_seconds = 0, gflops = 0;
  std::optional<double> fraction_of_peak;
  std::string peak_source;  // "given" / "best measured"
  // What the row allocated at its peak beyond what was held before it: A, B, C and any
  // workspace the multiply allocated through the allocator (peak allocated, not reserved, so
  // blocks cached by earlier rows are not counted again).
  int64_t memory_bytes = 0;
  double relative_error = 0;  // max |C - C64| / max |C64| on the sampled rows
};

// Parses "--devices cpu,cuda", "--dtypes fp32,bf16", "--peak cpu:fp32=1500"...; throws
// UserError naming the flag and the allowed values.
MatmulBenchOptions parse_matmul_options(const std::string& sizes, const std::string& devices,
                                        const std::string& dtypes, int64_t repeats,
                                        const std::vector<std::string>& peaks,
                                        int64_t memory_limit = 0);

// Devices without CUDA are reported as not available, not as errors; so is a size that runs out
// of memory (out_of_memory set), and the remaining rows still run.
std::vector<MatmulResult> run_matmul_bench(const MatmulBenchOptions& options);

std::string format_matmul_table(const std::vector<MatmulResult>& results);
nlohmann::ordered_json matmul_json(const std::vector<MatmulResult>& results);

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
