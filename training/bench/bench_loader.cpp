#include "training/bench/bench_loader.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "training/parts/components.h"
#include "training/parts/setup.h"
#include "training/platform/atomic_file.h"
#include "training/platform/device.h"
#include "training/platform/duration.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"
#include "training/run/output_file.h"

namespace training {

namespace {

// The benchmark itself, from its config.
void bench_loader(const LoaderBenchRequest& request, const Config& config) {
  const torch::Device device = set_up_device(config, DeviceUse::Loader);
  auto dataset = config.data.dataset;
  dataset.synthetic_seed(static_cast<uint64_t>(config.training.seed));
  data::Split split;
  {
    TrackingCpuAllocator::HostData host_data;
    split = data::load_split(dataset, data::SplitName::Train);
  }
  auto loader = make_loader(std::move(split), config, device, /*train=*/true, nullptr);
  if (loader->batches_per_epoch() == 0) {
    throw KeyError("training.batch_size", "larger than the training set, so there is no batch");
  }
  const std::string kind = config.data.loader == LoaderKind::TorchData ? "torch_data" : "batched";
  const int64_t prefetch = prefetch_for(config.data, device.is_cuda());
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  int64_t epoch = 1;
  loader->start_epoch(epoch);
  for (int64_t done = 0; done < request.batches; ++done) {
    data::next_batch_across_epochs(*loader, epoch);
  }
  synchronize(device);
  const double seconds = seconds_since(start);
  const double images_per_second =
      static_cast<double>(request.batches * config.training.batch_size) / std::max(seconds, 1e-9);
  const nlohmann::ordered_json json = {{"loader", kind},
                                       {"workers", config.data.workers},
                                       {"prefetch", prefetch},
                                       {"batch_size", config.training.batch_size},
                                       {"image_size", config.data.image_size},
                                       {"batches", request.batches},
                                       {"seconds", seconds},
                                       {"images_per_second", images_per_second},
                                       {"device", device.str()}};
  std::printf("%s\n", json.dump().c_str());
  if (!request.output.empty()) write_file_atomically(request.output, json.dump(2) + "\n");
  spdlog::info(
      "input pipeline alone: {} ({} workers, prefetch {}){}: {:.0f} images/s over {} batches", kind,
      config.data.workers, prefetch, resized_text(config.data.image_size), images_per_second,
      request.batches);
}

}  // namespace

void loader_bench_command(const LoaderBenchRequest& request) {
  if (request.batches < 1) throw UserError("--batches: expected 1 or more");
  if (!request.output.empty()) {
    check_not_an_input(request.output, "--output", request.config_path, "--config");
    const auto a_result = [](const std::filesystem::path& file) {
      return json_file_where(file, [](const nlohmann::json& j) {
        return j.is_object() && j.contains("loader") && j.contains("images_per_second");
      });
    };
    check_output_file(request.output, "--output", a_result, "a result of `train bench loader`");
  }
  const Config config = load_config(request.config_path, request.overrides);
  with_key_origins(config, [&] { bench_loader(request, config); });
}

}  // namespace training
