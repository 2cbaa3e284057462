#include "training/cards/cards_report.h"

#include <fmt/format.h>

#include "training/cards/cards.h"
#include "training/cards/speed_calibration.h"
#include "training/platform/memory.h"

namespace training {

namespace {

std::string figure(double value, const char* format = "{:.1f}") {
  return value > 0 ? fmt::format(fmt::runtime(format), value) : "-";
}

}  // namespace

std::string cards_report() {
  std::string out =
      "# Cards\n\nThe cards `--card` takes by name (or any card by its size, e.g. 24GiB: memory "
      "only, no speed). Dense peaks in TFLOP/s; '-' where the vendor publishes none.\n\n"
      "| card | memory | arch | bandwidth GB/s | SMs | boost MHz | fp32 | TF32 | fp16/bf16 | "
      "sources |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n";
  for (const Card& c : known_cards()) {
    const DataSheet& s = c.sheet;
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}; memory: {} |\n", c.name,
                       format_bytes(c.memory_bytes), c.architecture,
                       figure(s.bandwidth_gbps, "{:.0f}"), figure(s.sms, "{:.0f}"),
                       figure(s.boost_mhz, "{:.0f}"), figure(s.fp32_tflops), figure(s.tf32_tflops),
                       figure(s.half_tflops), s.source, c.memory_source);
  }
  return out + "\n# Speed model\n\n" + calibration_report();
}

}  // namespace training
