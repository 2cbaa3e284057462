#include "training/bench/bench_matmul.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>

#include "training/config/config.h"
#include "training/config/config_yaml.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/duration.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/platform/statistics.h"
#include "training/run/output_file.h"

namespace training {

namespace {

struct MatmulBenchOptions {
  std::vector<int64_t> sizes;
  std::vector<std::string> devices = {"cpu"};  // cpu, cuda, cuda:N
  std::vector<std::string> dtypes = {"fp32"};  // fp64, fp32, bf16, fp16
  int64_t repeats = 5;
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

// A given peak's key: "cpu:fp32", "cuda:0:bf16" (cuda is cuda:0, auto the GPU it would pick).
std::string peak_key(const DeviceSpec& spec, const std::string& dtype) {
  return (spec.kind == DeviceSpec::Kind::Cpu ? std::string("cpu")
                                             : "cuda:" + std::to_string(spec.index)) +
         ":" + dtype;
}

const std::map<std::string, torch::ScalarType>& dtype_table() {
  static const std::map<std::string, torch::ScalarType> table = {{"fp64", torch::kFloat64},
                                                                 {"fp32", torch::kFloat32},
                                                                 {"bf16", torch::kBFloat16},
                                                                 {"fp16", torch::kHalf}};
  return table;
}

// Times N x N by N x N on `device` in `dtype` and fills r's figures.
void measure(const MatmulBenchOptions& options, const torch::Device& device,
             torch::ScalarType dtype, MatmulResult& r) {
  const int64_t size = r.size;
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  torch::manual_seed(0);
  synchronize(device);
  const int64_t before = memory_stats(device).allocated;
  reset_peak_memory(device);
  auto a = torch::randn({size, size}, opts);
  auto b = torch::randn({size, size}, opts);
  torch::Tensor c = torch::mm(a, b);  // warm-up
  std::vector<double> seconds;
  for (int64_t i = 0; i < options.repeats; ++i) {
    synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    c = torch::mm(a, b);
    synchronize(device);
    seconds.push_back(seconds_since(start));
  }
  r.memory_bytes = memory_stats(device).peak_allocated - before;
  r.median_seconds = median(seconds);
  r.gflops = 2.0 * static_cast<double>(size) * size * size / r.median_seconds / 1e9;
  // Error against float64 on (up to) 64 rows: enough to catch a wrong result cheaply.
  const int64_t rows = std::min<int64_t>(size, 64);
  const auto reference = torch::mm(a.narrow(0, 0, rows).to(torch::kCPU, torch::kFloat64),
                                   b.to(torch::kCPU, torch::kFloat64));
  const auto got = c.narrow(0, 0, rows).to(torch::kCPU, torch::kFloat64);
  r.relative_error = ((got - reference).abs().max() / reference.abs().max()).item<double>();
}

// Parses "--devices cpu,cuda", "--dtypes fp32,bf16", "--peak cpu:fp32=1500"...; throws
// UserError naming the flag and the allowed values.
MatmulBenchOptions parse_matmul_options(const MatmulRequest& request) {
  MatmulBenchOptions options;
  for (const auto& item : config_yaml::split_items(request.sizes, "--size")) {
    int64_t size = 0;
    try {
      size_t used = 0;
      size = std::stoll(item, &used);
      if (used != item.size()) size = 0;
    } catch (const std::exception&) {
    }
    if (size < 1 || size > 65536) {
      throw UserError("--size: expected matrix sizes in [1, 65536], got '" + item + "'");
    }
    options.sizes.push_back(size);
  }
  if (options.sizes.empty()) throw UserError("--size: expected at least one size");
  options.devices = config_yaml::split_items(request.devices, "--devices");
  std::vector<std::string> device_keys;  // one key for one device: cuda, cuda:0 and cuda:00
  for (auto& device : options.devices) {
    const auto spec = parse_device_spec(device);
    if (!spec || spec->kind == DeviceSpec::Kind::Auto) {
      throw UserError("--devices: expected cpu, cuda or cuda:N, got '" + device + "'");
    }
    device = device_spec_text(device);
    device_keys.push_back(peak_key(*spec, ""));
  }
  options.dtypes = config_yaml::split_items(request.dtypes, "--dtypes");
  for (const auto& dtype : options.dtypes) {
    if (!dtype_table().count(dtype)) {
      throw UserError("--dtypes: expected fp64, fp32, bf16 or fp16, got '" + dtype + "'");
    }
  }
  for (const auto& [flag, repeat] :
       {std::pair{"--size", config_yaml::first_repeat(options.sizes)},
        std::pair{"--devices", config_yaml::first_repeat(device_keys)},
        std::pair{"--dtypes", config_yaml::first_repeat(options.dtypes)}}) {
    if (!repeat.empty()) throw UserError(std::string(flag) + ": " + repeat);
  }
  if (options.devices.empty() || options.dtypes.empty()) {
    throw UserError("--devices and --dtypes need at least one entry each");
  }
  if (request.repeats < 1 || request.repeats > 1000) {
    throw UserError("--repeats: expected an integer in [1, 1000], got " +
                    std::to_string(request.repeats));
  }
  options.repeats = request.repeats;
  std::vector<std::string> peak_keys;  // device:dtype, each once (a repeat would overwrite)
  for (const auto& given : request.peaks) {
    // device:dtype=GFLOPS, the device in the device grammar (device.h); white space around it
    // ignored, as around every value.
    const std::string peak = config_yaml::trimmed(given);
    const std::string expected =
        "--peak: expected device:dtype=GFLOPS, e.g. cuda:bf16=989000, got '" + peak + "'";
    const auto equals = peak.find('=');
    const auto colon = peak.rfind(':', equals);
    if (equals == std::string::npos || colon == std::string::npos) throw UserError(expected);
    const std::string device = peak.substr(0, colon);
    const std::string dtype = peak.substr(colon + 1, equals - colon - 1);
    const auto spec = parse_device_spec(device);
    if (!spec || spec->kind == DeviceSpec::Kind::Auto || !dtype_table().count(dtype)) {
      throw UserError(expected);
    }
    static const std::regex kNumber("[0-9]+(\\.[0-9]*)?");
    const std::string value = peak.substr(equals + 1);
    if (!std::regex_match(value, kNumber)) throw UserError(expected);
    const double gflops = std::stod(value);
    if (gflops <= 0) {
      throw UserError("--peak: expected a peak above 0 GFLOP/s, got '" + peak + "'");
    }
    // One key for one device however it is spelled: cuda and cuda:0 are one.
    const std::string key = peak_key(*spec, dtype);
    options.peak_gflops[key] = gflops;
    peak_keys.push_back(key);
  }
  if (const std::string repeat = config_yaml::first_repeat(peak_keys); !repeat.empty()) {
    throw UserError("--peak: " + repeat + " (a device and dtype's peak is given once)");
  }
  options.memory_limit = request.memory_limit;
  return options;
}

// Devices without CUDA are reported as not available, not as errors; so is a size that runs out
// of memory (out_of_memory set), and the remaining rows still run.
std::vector<MatmulResult> run_matmul_bench(const MatmulBenchOptions& options) {
  std::vector<MatmulResult> results;
  for (const auto& device_name : options.devices) {
    const auto spec = *parse_device_spec(device_name);  // checked by parse_matmul_options
    const std::string why_not =
        spec.kind == DeviceSpec::Kind::Cpu ? "" : cuda_unavailable_reason(spec.index);
    const std::optional<torch::Device> device =
        why_not.empty() ? std::make_optional(resolve_device(device_name)) : std::nullopt;
    try {
      if (device) set_memory_limit(*device, options.memory_limit);
    } catch (const UserError& e) {
      throw UserError(std::string("--memory-limit: ") + e.what());
    }
    for (const auto& dtype_name : options.dtypes) {
      for (int64_t size : options.sizes) {
        MatmulResult r;
        r.device = device_name;
        r.dtype = dtype_name;
        r.size = size;
        if (!device) {
          r.available = false;
          r.note = "not available: " + why_not;
          results.push_back(r);
          continue;
        }
        try {
          measure(options, *device, dtype_table().at(dtype_name), r);
        } catch (const std::exception& e) {
          if (!is_out_of_memory(e)) throw;
          r.available = false;
          r.out_of_memory = true;
          r.note = "out of memory: " + error_line(e);
        }
        results.push_back(r);
      }
    }
  }
  // Fractions: of the given peak, else of the best this bench measured for that device and dtype.
  for (auto& r : results) {
    if (!r.available) continue;
    const auto given = options.peak_gflops.find(peak_key(*parse_device_spec(r.device), r.dtype));
    if (given != options.peak_gflops.end()) {
      r.fraction_of_peak = r.gflops / given->second;
      r.peak_source = "given";
      continue;
    }
    double best = 0;
    for (const auto& other : results) {
      if (other.available && other.device == r.device && other.dtype == r.dtype)
        best = std::max(best, other.gflops);
    }
    r.fraction_of_peak = r.gflops / best;
    r.peak_source = "best measured";
  }
  return results;
}

std::string format_matmul_table(const std::vector<MatmulResult>& results) {
  std::ostringstream out;
  out << fmt::format("{:<8} {:<5} {:>7} {:>12} {:>12} {:>16} {:>12} {:>10}\n", "device", "dtype",
                     "size", "median (s)", "GFLOP/s", "of peak", "memory MiB", "rel. error");
  for (const auto& r : results) {
    if (!r.available) {
      out << fmt::format("{:<8} {:<5} {:>7} {}\n", r.device, r.dtype, r.size, r.note);
      continue;
    }
    out << fmt::format("{:<8} {:<5} {:>7} {:>12.5f} {:>12.1f} {:>16} {:>12.1f} {:>10.2e}\n",
                       r.device, r.dtype, r.size, r.median_seconds, r.gflops,
                       fmt::format("{:.1f}% ({})", 100 * r.fraction_of_peak.value_or(0),
                                   r.peak_source == "given" ? "given" : "best"),
                       to_mib(r.memory_bytes), r.relative_error);
  }
  return out.str();
}

nlohmann::ordered_json matmul_json(const std::vector<MatmulResult>& results) {
  auto rows = nlohmann::ordered_json::array();
  for (const auto& r : results) {
    nlohmann::ordered_json row = {
        {"device", r.device}, {"dtype", r.dtype}, {"size", r.size}, {"available", r.available}};
    if (!r.available) {
      row["note"] = r.note;
      row["out_of_memory"] = r.out_of_memory;
    } else {
      row["median_seconds"] = r.median_seconds;
      row["gflops"] = r.gflops;
      row["fraction_of_peak"] = r.fraction_of_peak.value_or(0);
      row["peak_source"] = r.peak_source;
      row["memory_bytes"] = r.memory_bytes;
      row["relative_error"] = r.relative_error;
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int matmul_command(const MatmulRequest& request) {
  const auto options = parse_matmul_options(request);
  if (request.threads < 0 || request.threads > kMaxThreads) {
    throw UserError("--threads: expected 0 (LibTorch's default) to " + std::to_string(kMaxThreads) +
                    ", as training.threads, got " + std::to_string(request.threads));
  }
  const auto a_result = [](const std::filesystem::path& file) {
    return json_file_where(file, [](const nlohmann::json& rows) {
      return rows.is_array() && !rows.empty() &&
             std::all_of(rows.begin(), rows.end(), [](const nlohmann::json& row) {
               return row.is_object() && row.contains("dtype") && row.contains("available");
             });
    });
  };
  check_output_file(request.output, "--output", a_result, "a result of `train bench matmul`");
  set_cpu_threads(request.threads);
  const auto results = run_matmul_bench(options);
  std::printf("%s", format_matmul_table(results).c_str());
  write_file_atomically(request.output, matmul_json(results).dump(2) + "\n");
  spdlog::info("results written to {}", request.output);
  for (const auto& r : results) {
    if (!r.out_of_memory) continue;
    spdlog::error("bench matmul: {} {} N={} ran out of memory; the other rows are in {}", r.device,
                  r.dtype, r.size, request.output);
    return kExitOutOfMemory;
  }
  return kExitOk;
}

}  // namespace training
