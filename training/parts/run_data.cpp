#include "training/parts/run_data.h"

#include <chrono>
#include <new>
#include <utility>

#include "data/dataset.h"
#include "training/platform/device.h"
#include "training/platform/duration.h"
#include "training/platform/errors.h"
#include "training/platform/heartbeat.h"
#include "training/platform/memory.h"

namespace training {

const char* source_description(data::Source source) {
  return source == data::Source::Binary      ? "binary batches"
         : source == data::Source::Images    ? "image folders"
         : source == data::Source::Synthetic ? "synthetic"
                                             : "auto";
}

LoadedData load_data(const Config& config) {
  const auto start = std::chrono::steady_clock::now();
  auto dataset = config.data.dataset;
  dataset.synthetic_seed(static_cast<uint64_t>(config.training.seed));
  LoadedData loaded;
  loaded.source = data::resolve_source(dataset);
  loaded.root = loaded.source == data::Source::Synthetic ? "memory" : dataset.root();
  if (loaded.source == data::Source::Synthetic) {
    // A size the machine cannot hold is a bad value, said before memory runs out.
    const int64_t host = total_memory(torch::Device(torch::kCPU));
    for (const auto& [key, images] :
         {std::pair<const char*, int64_t>{"data.synthetic_train_size",
                                          dataset.synthetic_train_size()},
          {"data.synthetic_test_size", dataset.synthetic_test_size()}}) {
      const int64_t bytes = images * data::kChannels * data::kImageSide * data::kImageSide;
      if (bytes > host) {
        const auto [decoded, has] = format_bytes_apart(bytes, host);
        throw KeyError(key, std::to_string(images) + " images are " + decoded +
                                " decoded, more than this machine's " + has + " of memory");
      }
    }
  }
  TrackingCpuAllocator::HostData host_data;
  const OutOfMemory no_room("out of host memory while loading the data set (" +
                            std::string(source_description(loaded.source)) +
                            "); lower data.train_limit or data.synthetic_train_size");
  try {
    Heartbeat beat(std::string("data: reading ") + source_description(loaded.source), 2, "splits");
    loaded.train = data::load_split(dataset, data::SplitName::Train);
    beat.advance(1);
    loaded.test = data::load_split(dataset, data::SplitName::Test);
  } catch (const std::bad_alloc&) {
    throw no_room;
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw no_room;
  }
  loaded.seconds = seconds_since(start);
  return loaded;
}

}  // namespace training
