#include "training/cards/cards.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "training/config/config_yaml.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"

namespace training {

namespace {

const char* const kVendor =
    "nvidia-smi memory.total as commonly reported for this card (not measured here)";

Card card(const char* name, int64_t mib, int major, const char* arch, double fp32, double half,
          const char* source = kVendor) {
  return {name, mib * kMiB, source, major, arch, fp32, half};
}

std::string folded(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '-' || c == '_' || c == ' ') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

const std::vector<Card>& known_cards() {
  static const std::vector<Card> cards = {
      card("H200", 143771, 9, "sm_90", 66.9, 989.4,
           "measured here: nvidia-smi on the H200 of docs/gpu.md"),
      card("H100-80GB", 81559, 9, "sm_90", 66.9, 989.4),
      card("H100-NVL", 95830, 9, "sm_90", 60.0, 835.0),
      card("A100-80GB", 81920, 8, "sm_80", 19.5, 312.0),
      card("A100-40GB", 40960, 8, "sm_80", 19.5, 312.0),
      card("L40S", 46068, 8, "sm_89", 91.6, 362.0),
      card("L4", 23034, 8, "sm_89", 30.3, 121.0),
      card("A10G", 23028, 8, "sm_86", 31.2, 70.0),
      card("RTX4090", 24564, 8, "sm_89", 82.6, 165.2),
      card("RTX3090", 24576, 8, "sm_86", 35.6, 71.0),
      card("RTX3060", 12288, 8, "sm_86", 12.7, 25.6),
      card("V100-32GB", 32510, 7, "sm_70", 15.7, 125.0),
      card("V100-16GB", 16160, 7, "sm_70", 15.7, 125.0),
      card("T4", 15360, 7, "sm_75", 8.1, 65.0),
  };
  return cards;
}

Card find_card(const std::string& given) {
  // Spaces around the flag's value are no part of it (' 24GiB' was an unknown card's name).
  const auto first = given.find_first_not_of(" \t"), last = given.find_last_not_of(" \t");
  const std::string text = first == std::string::npos ? "" : given.substr(first, last - first + 1);
  for (const auto& known : known_cards()) {
    if (folded(known.name) == folded(text)) return known;
  }
  // A size: what starts like a number (a sign too, so that -1GiB is a bad size, not a name).
  if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text.front())) ||
                        text.front() == '-' || text.front() == '+' || text.front() == '.')) {
    // A card's memory has a unit: a bare number is no card's size ("4090" was read as 4090 bytes),
    // and may be part of a card's name.
    if (text.find_first_not_of("0123456789") == std::string::npos) {
      // What it may have meant: the number with a unit, where that is a card taken, and the cards
      // whose names hold it.
      std::vector<std::string> meant;
      for (const char* unit : {"GiB", "MiB"}) {
        try {
          const int64_t bytes = parse_byte_size(text + unit);
          if (bytes <= kLargestCard && bytes > beside_tensors({}).outside_allocator)
            meant.push_back(text + unit);
        } catch (const std::invalid_argument&) {
        }
      }
      for (const auto& known : known_cards()) {  // a run of digits in the name: 4090 in RTX4090
        const std::string& name = known.name;
        for (size_t at = name.find(text); at != std::string::npos; at = name.find(text, at + 1)) {
          const size_t end = at + text.size();
          if ((at == 0 || !std::isdigit(static_cast<unsigned char>(name[at - 1]))) &&
              (end == name.size() || !std::isdigit(static_cast<unsigned char>(name[end])))) {
            meant.push_back("the card " + name);
            break;
          }
        }
      }
      throw UserError("--card: '" + text + "' has no unit; a card's memory takes one (e.g. 24GiB)" +
                      (meant.empty() ? std::string()
                                     : "; did you mean " + config_yaml::join(meant, " or ") + "?"));
    }
    int64_t bytes = 0;
    try {
      bytes = parse_byte_size(text);
    } catch (const std::invalid_argument& e) {
      throw UserError(std::string("--card: ") + e.what());
    }
    if (bytes <= 0) throw UserError("--card: expected a size above 0, got '" + text + "'");
    if (bytes > kLargestCard) {  // caching_allocator.cpp's address span is no larger
      throw UserError("--card: expected a card of at most 1024TiB, got '" + text + "'");
    }
    const Card card{text, bytes, "given with --card", 0, "", 0, 0};
    const int64_t outside = beside_tensors(card).outside_allocator;
    if (bytes <= outside) {
      throw UserError("--card: " + text + " is no larger than the " + format_bytes(outside) +
                      " a CUDA process holds outside the allocator (context, kernels, libraries); "
                      "expected a card above it");
    }
    return card;
  }
  std::vector<std::string> names, starting;
  for (const auto& known : known_cards()) {
    names.push_back(known.name);
    // "H100" names a family: each of its cards is offered.
    if (!text.empty() && folded(known.name).rfind(folded(text), 0) == 0) {
      starting.push_back("'" + known.name + "'");
    }
  }
  throw UserError("--card: unknown card '" + text + "' " +
                  (starting.size() > 1
                       ? "(did you mean " + config_yaml::join(starting, " or ") + "?)"
                       : config_yaml::suggestion(text, names, "")) +
                  "; or give its memory, e.g. --card 24GiB");
}

BesideTensors beside_tensors(const Card& card) {
  BesideTensors beside;
  const bool large = card.compute_major == 9 || card.compute_major == 10 ||
                     card.compute_major == 12 || card.compute_major == 0;
  beside.cublas_workspace = large ? 32 * kMiB : 4096 * 1024 * 2 + 16 * 1024 * 8;
  beside.outside_allocator = kOutsideAllocatorBytes;
  beside.outside_source = kOutsideAllocatorSource;
  if (card.name != "H200") beside.outside_source += ", assumed for this card";
  return beside;
}

}  // namespace training
