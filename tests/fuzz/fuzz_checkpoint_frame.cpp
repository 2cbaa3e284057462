// Fuzz target: the checkpoint frame (header + SHA-256), which must refuse every damaged file
// before LibTorch's loader sees it. Every input must be verified or refused with UserError; a
// verified payload must be exactly what a frame of it holds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "training/platform/errors.h"
#include "training/run/checkpoint_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto payload = training::verified_payload(bytes, "fuzz.pt");
    if (training::frame_checkpoint(payload) != bytes) std::abort();
  } catch (const training::UserError&) {
  }
  // Framing then verifying is the identity for any payload.
  if (training::verified_payload(training::frame_checkpoint(bytes), "fuzz.pt") != bytes) {
    std::abort();
  }
  return 0;
}
