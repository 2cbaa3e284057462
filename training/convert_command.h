// `train convert`: image folders written as official-format binary batches, read with train's
// own listing and decoder (data/image_folder.h), so that training on the folders and on their
// conversion reads the same images, labels and pixels, and what train refuses is refused here.
#pragma once

#include <string>

namespace training {

struct ConvertRequest {
  std::string root;    // a data root holding train/<class>/ and test/<class>/
  std::string output;  // the folder to create: data_batch_1..5.bin, test_batch.bin
  bool list = false;   // --list: print train's listing (JSON lines) instead of converting
};

// Returns kExitOk or kExitStopped. Throws data::DataError for data train would refuse,
// UserError for an output that is already there, CannotWrite when it cannot be written; the
// output appears whole (written in a temporary folder beside it, then renamed) or not at all.
int convert_command(const ConvertRequest& request);

}  // namespace training
