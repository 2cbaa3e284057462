#include "training/cards/cards.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "training/config/config_yaml.h"
#include "training/platform/errors.h"
#include "training/platform/memory.h"

namespace training {

namespace {

const char* const kVendor =
    "nvidia-smi memory.total as commonly reported for this card (not measured here)";

// The data sheets, dense figures; bandwidth, SMs and boost clock as the sheets and TechPowerUp's
// GPU database give them. Sources, by family:
const char* const kH100 =
    "NVIDIA H100 Tensor Core GPU data sheet (SXM or PCIe column; its figures with sparsity halved)";
const char* const kH200 = "NVIDIA H200 Tensor Core GPU data sheet (figures with sparsity halved)";
const char* const kH100Nvl =
    "NVIDIA H100 NVL data sheet, per GPU (figures with sparsity halved; boost clock not given)";
const char* const kA100 = "NVIDIA A100 Tensor Core GPU data sheet (dense column)";
const char* const kAda = "NVIDIA L4 / L40S data sheets (dense; L4's figures with sparsity halved)";
const char* const kA10 = "NVIDIA A10 Tensor Core GPU data sheet (dense column)";
const char* const kA10G =
    "AWS G5 (A10G) as commonly quoted; NVIDIA publishes no A10G sheet (SMs, clock: not known)";
const char* const kRtxPro =
    "NVIDIA RTX A6000 / RTX 6000 Ada data sheets (figures with sparsity halved; Ada's tensor "
    "figures derived as SMs x boost clock x 1024 FLOP a clock)";
const char* const kGeForce =
    "NVIDIA Ampere GA102 / Ada AD102 whitepapers: GeForce runs fp16 with FP32 accumulate, bf16 and "
    "TF32 at half the fp16-accumulate rate";
const char* const kVolta = "NVIDIA Tesla V100 (SXM2) data sheet";
const char* const kTuring = "NVIDIA T4 data sheet";

Card card(const char* name, int64_t mib, int major, const char* arch, DataSheet sheet,
          const char* memory_source = kVendor) {
  return {name, mib * kMiB, memory_source, major, arch, std::move(sheet)};
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

std::string Card::unsupported(Precision precision) const {
  if (precision == Precision::BF16 && compute_major > 0 && compute_major < 8) {
    return "bf16 needs compute capability 8.0 or later; " + name + " is " + architecture;
  }
  return "";
}

std::string Card::unsupported(const std::vector<Precision>& precisions) const {
  std::string why;
  for (const Precision precision : precisions) {
    if ((why = unsupported(precision)).empty()) return "";
  }
  return why;
}

const std::vector<Card>& known_cards() {
  // name, nvidia-smi MiB, compute capability; bandwidth GB/s, SMs, boost MHz, fp32, TF32 and
  // fp16/bf16 TFLOP/s.
  static const std::vector<Card> cards = {
      card("H200", 143771, 9, "sm_90", {4800, 132, 1980, 67.0, 494.7, 989.4, kH200},
           "measured here: nvidia-smi on the H200 of docs/gpu.md"),
      card("H100-80GB", 81559, 9, "sm_90", {3350, 132, 1980, 67.0, 494.7, 989.4, kH100}),
      card("H100-SXM", 81559, 9, "sm_90", {3350, 132, 1980, 67.0, 494.7, 989.4, kH100}),
      card("H100-PCIe", 81559, 9, "sm_90", {2000, 114, 1755, 51.2, 378.0, 756.5, kH100}),
      card("H100-NVL", 95830, 9, "sm_90", {3938, 132, 0, 60.0, 417.5, 835.0, kH100Nvl}),
      card("A100-80GB", 81920, 8, "sm_80", {2039, 108, 1410, 19.5, 156.0, 312.0, kA100}),
      card("A100-80GB-SXM", 81920, 8, "sm_80", {2039, 108, 1410, 19.5, 156.0, 312.0, kA100}),
      card("A100-80GB-PCIe", 81920, 8, "sm_80", {1935, 108, 1410, 19.5, 156.0, 312.0, kA100}),
      card("A100-40GB", 40960, 8, "sm_80", {1555, 108, 1410, 19.5, 156.0, 312.0, kA100}),
      card("L40S", 46068, 8, "sm_89", {864, 142, 2520, 91.6, 183.0, 362.0, kAda}),
      card("L4", 23034, 8, "sm_89", {300, 58, 2040, 30.3, 60.0, 121.0, kAda}),
      card("A10", 23028, 8, "sm_86", {600, 72, 1695, 31.2, 62.5, 125.0, kA10}),
      card("A10G", 23028, 8, "sm_86", {600, 0, 0, 31.2, 0, 70.0, kA10G}),
      card("RTX-A6000", 49140, 8, "sm_86", {768, 84, 1800, 38.7, 77.4, 154.8, kRtxPro}),
      card("RTX6000-Ada", 49140, 8, "sm_89", {960, 142, 2505, 91.1, 182.1, 364.2, kRtxPro}),
      card("RTX4090", 24564, 8, "sm_89", {1008, 128, 2520, 82.6, 82.6, 165.2, kGeForce}),
      card("RTX3090", 24576, 8, "sm_86", {936, 82, 1695, 35.6, 35.6, 71.0, kGeForce}),
      card("RTX3060", 12288, 8, "sm_86", {360, 28, 1777, 12.7, 12.7, 25.6, kGeForce}),
      card("V100-32GB", 32510, 7, "sm_70", {900, 80, 1530, 15.7, 0, 125.0, kVolta}),
      card("V100-16GB", 16160, 7, "sm_70", {900, 80, 1530, 15.7, 0, 125.0, kVolta}),
      card("T4", 15360, 7, "sm_75", {320, 40, 1590, 8.1, 0, 65.0, kTuring}),
  };
  return cards;
}

Card find_card(const std::string& given, std::optional<int64_t> outside_allocator,
               double headroom) {
  // Spaces around the flag's value are no part of it (' 24GiB' was an unknown card's name).
  const std::string text = config_yaml::trimmed(given);
  if (blank(text))
    throw UserError("--card: expected a card's name or size, got nothing");
  for (const auto& known : known_cards()) {
    if (folded(known.name) == folded(text)) return known;
  }
  // A size: what starts like a number (a sign too, so that -1GiB is a bad size, not a name).
  if (!text.empty() && (std::isdigit(static_cast<unsigned char>(text.front())) ||
                        text.front() == '-' || text.front() == '+' || text.front() == '.')) {
    // A card's memory has a unit: a bare number is no card's size ("4090" was read as 4090 bytes),
    // and may be part of a card's name (a run of digits in it: 4090 in RTX4090).
    std::vector<std::string> named;
    for (const auto& known : known_cards()) {
      const std::string& name = known.name;
      for (size_t at = name.find(text); at != std::string::npos; at = name.find(text, at + 1)) {
        const size_t end = at + text.size();
        if ((at == 0 || !std::isdigit(static_cast<unsigned char>(name[at - 1]))) &&
            (end == name.size() || !std::isdigit(static_cast<unsigned char>(name[end])))) {
          named.push_back("the card " + name);
          break;
        }
      }
    }
    const auto beside =
        static_cast<double>(outside_allocator.value_or(beside_tensors({}).outside_allocator));
    const std::string bare = no_unit_refusal(
        text, static_cast<int64_t>(std::ceil(beside / (1 - headroom))), kLargestCard, named);
    if (!bare.empty()) throw UserError("--card: " + bare);
    const int64_t bytes = size_flag("--card", text);
    if (bytes > kLargestCard) {  // caching_allocator.cpp's address span is no larger
      throw UserError("--card: expected a card of at most 1024TiB, got '" + text + "'");
    }
    const Card card{size_as_written(text), bytes, "given with --card", 0, "", {}};
    const int64_t outside = outside_allocator.value_or(beside_tensors(card).outside_allocator);
    if (bytes <= outside) {
      throw UserError("--card: " + text + " is no larger than the " + format_bytes(outside) +
                      (outside_allocator ? " outside the allocator (--overhead)"
                                         : " a CUDA process holds outside the allocator (context, "
                                           "kernels, libraries)") +
                      "; expected a card above it");
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
