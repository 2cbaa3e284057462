// Fuzz target: the image-folder reader on an arbitrary image file (train/cat/0.jpg). Every input
// must be decoded or refused with DataError (naming the file); anything else is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "data/image_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir =
      fs::temp_directory_path() / ("fuzz-images-" + std::to_string(::getpid()));
  static const bool made = fs::create_directories(dir / "cat") || true;
  (void)made;
  std::ofstream(dir / "cat" / "0.jpg", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    const auto split = data::read_image_folder(dir);
    (void)split;
  } catch (const data::DataError&) {
  }
  return 0;
}
