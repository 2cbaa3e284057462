// The data a run trains and evaluates on: both splits decoded once, as host data (not counted
// against memory.limit, as on CUDA), before anything is measured.
#pragma once

#include <string>

#include "data/split.h"
#include "training/config/config.h"

namespace training {

struct LoadedData {
  data::Source source = data::Source::Auto;
  std::string root;
  data::Split train, test;
  double seconds = 0;
};

// Both splits of `config`'s data; a synthetic size this machine cannot hold is refused as its
// key's (KeyError), and running out of host memory while decoding is OutOfMemory naming the keys
// that lower it.
LoadedData load_data(const Config& config);

// How the log names a data source: "binary batches", "image folders", "synthetic", "auto".
const char* source_description(data::Source source);

}  // namespace training
