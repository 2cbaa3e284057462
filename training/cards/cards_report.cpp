#include "training/cards/cards_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "training/cards/cards.h"
#include "training/cards/speed_calibration.h"
#include "training/config/config_yaml.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"

namespace training {

namespace {

std::string figure(double value, const char* format = "{:.1f}") {
  return value > 0 ? fmt::format(fmt::runtime(format), value) : "-";
}

// A data sheet's figure, null where there is none (0: not published, or a card given by size).
template <class Number>
nlohmann::json figure_or_null(Number value) {
  return value > 0 ? nlohmann::json(value) : nlohmann::json(nullptr);
}

nlohmann::json text_or_null(const std::string& text) {
  return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
}

nlohmann::json card_json(const Card& c) {
  const DataSheet& s = c.sheet;
  return {{"name", c.name},
          {"known", s.known()},  // a card known by name; false: a card given by its size
          {"memory_bytes", c.memory_bytes},
          {"memory_source", c.memory_source},
          {"compute_major", figure_or_null(c.compute_major)},
          {"architecture", text_or_null(c.architecture)},
          {"bandwidth_gbps", figure_or_null(s.bandwidth_gbps)},
          {"sms", figure_or_null(s.sms)},
          {"boost_mhz", figure_or_null(s.boost_mhz)},
          {"fp32_tflops", figure_or_null(s.fp32_tflops)},
          {"tf32_tflops", figure_or_null(s.tf32_tflops)},
          {"half_tflops", figure_or_null(s.half_tflops)},
          {"source", text_or_null(s.source)}};
}

}  // namespace

std::string cards_report(const std::vector<std::string>& asked, bool json) {
  std::vector<Card> cards;
  // One card, however named: a size by its bytes, a named card by its figures (H100-80GB is the
  // H100-SXM under its older name).
  std::vector<std::string> keys;
  for (const auto& given : asked) {
    cards.push_back(find_card(given));  // refused before any output
    const Card& c = cards.back();
    keys.push_back(fmt::format("{} {} {} {} {} {} {}", c.memory_bytes, c.architecture,
                               c.sheet.bandwidth_gbps, c.sheet.sms, c.sheet.fp32_tflops,
                               c.sheet.tf32_tflops, c.sheet.half_tflops));
  }
  if (const std::string repeat = config_yaml::first_repeat(keys); !repeat.empty()) {
    // Two names of one data sheet (H100-80GB, H100-SXM) are said as such: the table lists both.
    const auto known = [](const Card& c) {
      return std::any_of(known_cards().begin(), known_cards().end(),
                         [&](const Card& k) { return k.name == c.name; });
    };
    std::string names;
    for (size_t i = 0; i < keys.size() && names.empty(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (keys[i] == keys[j] && cards[i].name != cards[j].name && known(cards[i]) &&
            known(cards[j])) {
          names = ": " + cards[j].name + " and " + cards[i].name + " have one data sheet";
        }
      }
    }
    throw UserError("--card: " + repeat + " (one card, however it is named" + names + ")");
  }
  if (asked.empty()) cards = known_cards();
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < cards.size(); ++i) {
      rows.push_back(card_json(cards[i]));
      if (!asked.empty()) rows.back()["given"] = asked[i];
    }
    return nlohmann::json{{"cards", rows}}.dump(2) + "\n";
  }
  std::string out =
      "# Cards\n\nThe cards `--card` takes by name (or any card by its size, e.g. 24GiB: memory "
      "only, no speed). Dense peaks in TFLOP/s; '-' where the vendor publishes none.\n\n"
      "| card | memory | arch | bandwidth GB/s | SMs | boost MHz | fp32 | TF32 | fp16/bf16 | "
      "sources |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---|\n";
  for (const Card& c : cards) {
    const DataSheet& s = c.sheet;
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}; memory: {} |\n", c.name,
                       format_bytes(c.memory_bytes), c.architecture.empty() ? "-" : c.architecture,
                       figure(s.bandwidth_gbps, "{:.0f}"), figure(s.sms, "{:.0f}"),
                       figure(s.boost_mhz, "{:.0f}"), figure(s.fp32_tflops), figure(s.tf32_tflops),
                       figure(s.half_tflops), s.source.empty() ? "-" : s.source, c.memory_source);
  }
  return out + "\n# Speed model\n\n" + calibration_report();
}

}  // namespace training
