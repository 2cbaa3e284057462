#include "training/cards/cards.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "training/cards/cards_report.h"
#include "training/platform/allocation_trace.h"
#include "training/platform/errors.h"

namespace training {
namespace {

std::string refusal(const std::string& text) {
  try {
    find_card(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Cards, FindsACardByNameOrSizeAndRefusesTheRest) {
  const Card h100 = find_card("h100_80gb");
  EXPECT_EQ(h100.name, "H100-80GB");
  EXPECT_EQ(h100.memory_bytes, int64_t{81559} << 20);
  EXPECT_EQ(h100.architecture, "sm_90");
  EXPECT_EQ(find_card("H200").memory_bytes, int64_t{143771} << 20);
  const Card sized = find_card("24GiB");
  EXPECT_EQ(sized.memory_bytes, int64_t{24} << 30);
  EXPECT_EQ(sized.architecture, "");
  EXPECT_NE(refusal("RTX4909").find("unknown card 'RTX4909' (did you mean 'RTX4090'?)"),
            std::string::npos)
      << refusal("RTX4909");
  EXPECT_NE(refusal("Voodoo").find("(valid: H200, H100-80GB"), std::string::npos);
  // Sixteenth pass: a blank --card was "unknown card '' (did you mean 'L4'?)".
  EXPECT_EQ(refusal(" "), "--card: expected a card's name or size, got nothing");
  // A card must hold more than what a CUDA process keeps outside the allocator.
  for (const auto& text : {"1KiB", "771MiB"}) {
    EXPECT_NE(refusal(text).find("is no larger than the 771.00 MiB"), std::string::npos)
        << refusal(text);
  }
  EXPECT_EQ(find_card("772MiB").memory_bytes, int64_t{772} << 20);
  // Hostile pass 7: `train plan --card 600MiB --overhead 100MiB` was refused against the 771 MiB
  // the --overhead replaces: judged against the figure given.
  EXPECT_EQ(find_card("600MiB", int64_t{100} << 20).memory_bytes, int64_t{600} << 20);
  try {
    find_card("600MiB", int64_t{600} << 20);
    ADD_FAILURE() << "a card no larger than --overhead was taken";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--card: 600MiB is no larger than the 600.00 MiB outside "
                                         "the allocator (--overhead)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NE(refusal("12 parsecs").find("--card: expected a size"), std::string::npos)
      << refusal("12 parsecs");
  EXPECT_FALSE(refusal("").empty());
  // A size that starts like a number is a bad size, not an unknown name.
  for (const auto& text : {"0B", "-1GiB", "+0MiB"}) {
    EXPECT_EQ(refusal(text).rfind("--card: expected a size", 0), 0u) << refusal(text);
  }
  // The forms it offers take a unit, as a card's memory does (it offered "a whole number of
  // bytes", then refused one).
  EXPECT_EQ(refusal("1e3"),
            "--card: expected a size with its unit, like 12GiB, 512MiB or 1.5GB, "
            "got '1e3'");
  // Round 5: a bare number has no unit (4090 was read as 4090 bytes), and where it is part of a
  // card's name that card is offered; spaces around the value are no part of it.
  EXPECT_EQ(refusal("4090"),
            "--card: '4090' has no unit; did you mean 4090GiB or 4090MiB or the card RTX4090?");
  EXPECT_NE(refusal("3090").find("or the card RTX3090?"), std::string::npos) << refusal("3090");
  // Only what would be taken is offered: 500MiB is below what lies outside the allocator,
  // 1073741824GiB beyond the largest card, 0 nothing.
  EXPECT_EQ(refusal("500"), "--card: '500' has no unit; did you mean 500GiB?");
  EXPECT_EQ(refusal("1073741824"),
            "--card: '1073741824' has no unit; did you mean 1073741824MiB or 1073741824B?");
  // Fourteenth pass: a number of bytes that is a card's size offered nothing, while its form
  // with B is taken.
  EXPECT_EQ(refusal("25769803776"),
            "--card: '25769803776' has no unit; did you mean 25769803776B?");
  EXPECT_EQ(find_card("25769803776B").memory_bytes, int64_t{24} << 30);
  EXPECT_EQ(refusal("0"), "--card: expected a size above 0, got '0'");
  // A fraction without a unit is a size without a unit too (it was "not a whole number of
  // bytes"), and the form offered is taken.
  EXPECT_EQ(refusal("1.5"), "--card: '1.5' has no unit; did you mean 1.5GiB?");
  // Thirteenth pass: 0.5GiB was offered, and refused as no larger than what lies outside the
  // allocator; only what is taken is offered.
  EXPECT_EQ(refusal("0.5"), "--card: '0.5' has no unit; give one, e.g. 24GiB");
  EXPECT_EQ(refusal("2.5."),
            "--card: expected a size with its unit, like 12GiB, 512MiB or 1.5GB, "
            "got '2.5.'");
  EXPECT_EQ(find_card("1.5GiB").memory_bytes, int64_t{3} << 29);
  EXPECT_EQ(find_card(" 24GiB ").memory_bytes, int64_t{24} << 30);
  EXPECT_EQ(find_card("24 GiB").memory_bytes, int64_t{24} << 30);
  // A card given by its size is named as it is typed back (it was written as typed: "24 gib" in
  // sweep.md, plan.json and "no data sheet for '24 gib'").
  EXPECT_EQ(find_card(" 24 gib ").name, "24GiB");
  EXPECT_EQ(find_card("1.5gb").name, "1.5GB");
  EXPECT_EQ(find_card("2048mib").name, "2048MiB");
  EXPECT_EQ(find_card(find_card(" 24 gib ").name).memory_bytes, int64_t{24} << 30);
  EXPECT_EQ(find_card(" T4").name, "T4");

  // A family's name offers each of its cards.
  EXPECT_NE(refusal("H100").find("(did you mean 'H100-80GB' or 'H100-SXM' or 'H100-PCIe' or "
                                 "'H100-NVL'?)"),
            std::string::npos)
      << refusal("H100");
  EXPECT_EQ(refusal("1025TiB"), "--card: expected a card of at most 1024TiB, got '1025TiB'");
  // The workspaces follow the architecture: 32 MiB on Hopper, LibTorch's smaller default before.
  EXPECT_EQ(beside_tensors(h100).cublas_workspace, 32 << 20);
  EXPECT_EQ(beside_tensors(find_card("T4")).cublas_workspace, 4096 * 1024 * 2 + 16 * 1024 * 8);
  EXPECT_NE(beside_tensors(h100).outside_source.find("assumed"), std::string::npos);
}

AllocationStream stream(std::vector<TraceEvent> events, std::vector<TraceMark> marks = {}) {
  return {std::move(events), std::move(marks)};
}

// Every named card has a data sheet: bandwidth, dense peaks for fp32 and fp16/bf16, TF32 from
// sm_80 (where it is published), and its source; SMs and clock where the vendor gives them. A card
// given by its size has none, and no other card's figures stand in.
TEST(Cards, EachNamedCardHasADataSheetAndACardBySizeNone) {
  for (const Card& card : known_cards()) {
    const DataSheet& s = card.sheet;
    EXPECT_TRUE(s.known()) << card.name;
    EXPECT_GT(s.bandwidth_gbps, 0) << card.name;
    EXPECT_GT(s.fp32_tflops, 0) << card.name;
    EXPECT_GT(s.half_tflops, s.fp32_tflops) << card.name;
    EXPECT_FALSE(s.source.empty()) << card.name;
    if (card.compute_major < 8) {
      EXPECT_EQ(s.tf32_tflops, 0) << card.name;
    }
    EXPECT_LE(s.tf32_tflops, s.half_tflops) << card.name;
  }
  EXPECT_EQ(find_card("H100-PCIe").sheet.sms, 114);
  EXPECT_EQ(find_card("A100-80GB-PCIe").sheet.bandwidth_gbps, 1935);
  EXPECT_EQ(find_card("A100-80GB-SXM").sheet.bandwidth_gbps, 2039);
  EXPECT_EQ(find_card("a10").sheet.half_tflops, 125.0);
  EXPECT_EQ(find_card("RTX-A6000").memory_bytes, int64_t{49140} << 20);
  EXPECT_EQ(find_card("rtx6000 ada").architecture, "sm_89");
  const Card sized = find_card("24GiB");
  EXPECT_FALSE(sized.sheet.known());
  EXPECT_EQ(sized.sheet.bandwidth_gbps, 0);
  EXPECT_TRUE(sized.sheet.source.empty());
}

// `train cards --card NAME... [--json]`: the cards asked for, in order, each found as --card
// finds it everywhere, so that a script asks train for a card's name instead of folding names by a
// rule of its own (compare_devices.py, speed_holdout.py).
TEST(Cards, TheListingGivesTheCardsAskedForAsJson) {
  const auto all = nlohmann::json::parse(cards_report({}, /*json=*/true)).at("cards");
  ASSERT_EQ(all.size(), known_cards().size());
  EXPECT_EQ(all[0].at("name"), known_cards()[0].name);
  EXPECT_FALSE(all[0].contains("given"));
  const auto asked =
      nlohmann::json::parse(cards_report({"h100 sxm", "A100_80gb", " 24GiB"}, true)).at("cards");
  ASSERT_EQ(asked.size(), 3u);
  EXPECT_EQ(asked[0].at("name"), "H100-SXM");
  EXPECT_EQ(asked[0].at("given"), "h100 sxm");
  EXPECT_EQ(asked[0].at("known"), true);
  EXPECT_EQ(asked[0].at("memory_bytes"), int64_t{81559} << 20);
  EXPECT_EQ(asked[0].at("architecture"), "sm_90");
  EXPECT_EQ(asked[0].at("bandwidth_gbps"), 3350.0);
  EXPECT_EQ(asked[1].at("name"), "A100-80GB");
  EXPECT_EQ(asked[2].at("name"), "24GiB");  // a size: its name is the size as given
  EXPECT_EQ(asked[2].at("known"), false);
  EXPECT_EQ(asked[2].at("memory_bytes"), int64_t{24} << 30);
  EXPECT_TRUE(asked[2].at("architecture").is_null());
  EXPECT_TRUE(asked[2].at("half_tflops").is_null());
  // An unknown card is --card's own refusal, before anything is listed.
  try {
    cards_report({"T4", "nosuch"}, true);
    ADD_FAILURE() << "an unknown card was listed";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--card: unknown card 'nosuch' ", 0), 0u) << e.what();
  }
  // One card named twice, however it is named, is refused as every list's repeat (round 5: it
  // was listed twice).
  for (const auto& twice : std::vector<std::vector<std::string>>{{"H100-SXM", "h100sxm"},
                                                                 {"24GiB", "24576MiB"},
                                                                 {"T4", "T4"},
                                                                 {"H100-SXM", "H100-80GB"},
                                                                 {"A100-80GB", "A100-80GB-SXM"}}) {
    try {
      cards_report(twice, true);
      ADD_FAILURE() << twice[1];
    } catch (const UserError& e) {
      // Twelfth pass: two rows of the table refused as one card without saying why.
      const std::string names = twice[0].find("100") != std::string::npos && twice[1] != "h100sxm"
                                    ? ": " + twice[0] + " and " + twice[1] + " have one data sheet"
                                    : "";
      EXPECT_EQ(std::string(e.what()),
                "--card: item 2 repeats item 1; list each value once (one card, however it is "
                "named" +
                    names + ")");
    }
  }
  // The markdown lists only the cards asked for, then the speed model as always.
  const std::string markdown = cards_report({"t4"}, false);
  const std::string table = markdown.substr(0, markdown.find("# Speed model"));
  EXPECT_NE(table.find("\n| T4 | 15.00 GiB | sm_75 |"), std::string::npos) << table;
  EXPECT_EQ(table.find("| H200 |"), std::string::npos) << table;
  EXPECT_NE(markdown.find("# Speed model"), std::string::npos);
}

}  // namespace
}  // namespace training
