#include "app/flag_values.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "test_support.h"
#include "training/platform/errors.h"
#include "training/run/output_dir.h"

namespace {

namespace fs = std::filesystem;

training::PlanRequest from_sweep() {
  training::PlanRequest request;
  request.from = "sweep";
  return request;
}

// The line `plan_request` refuses `flags` with ("" when it takes them).
std::string refusal(const app::PlanFlags& flags, training::PlanRequest request = {}) {
  if (request.from.empty() && request.config_path.empty()) request.from = "sweep";
  try {
    app::plan_request(flags, request);
  } catch (const training::UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FlagValues, APlanRequestIsCheckedBeforeTheCommandRuns) {
  app::PlanFlags flags;
  EXPECT_EQ(refusal(flags).rfind("plan: expected one of --memory SIZE", 0), 0u);
  flags.memory = "4GiB";
  const auto request = app::plan_request(flags, from_sweep());
  EXPECT_EQ(request.memory, int64_t{4} << 30);
  EXPECT_DOUBLE_EQ(request.headroom, 0.10);
  EXPECT_EQ(request.target_batch, 0);
  for (const auto& [headroom, share] :
       {std::pair{"10%", 0.10}, std::pair{"0.25", 0.25}, std::pair{"0", 0.0},
        std::pair{"5 %", 0.05},  // a ninth pass: "5 %" was a key's only (one reader now)
        std::pair{" 10%", 0.10}, std::pair{"10% ", 0.10}}) {  // fourteenth: spaces, as other flags
    flags.headroom = headroom;
    EXPECT_DOUBLE_EQ(app::plan_request(flags, from_sweep()).headroom, share);
  }
  for (const std::string bad : {"", "%", "100%", "1", "-5%", "ten", "10%%", "nan"}) {
    flags.headroom = bad;
    EXPECT_EQ(refusal(flags).rfind("--headroom: expected the share of the card", 0), 0u) << bad;
  }
  flags.headroom = "10%";
  for (const std::string bad : {"0", "-512", "1k"}) {
    flags.target_batch = bad;
    EXPECT_EQ(refusal(flags),
              "--target-batch: expected images per optimizer step, a whole number >= 1, got '" +
                  bad + "'");
  }
  flags.target_batch = "1024";
  EXPECT_EQ(app::plan_request(flags, from_sweep()).target_batch, 1024);
  flags.target_batch = " 8 ";  // the fourteenth pass: spaces around it, as every flag takes them
  EXPECT_EQ(app::plan_request(flags, from_sweep()).target_batch, 8);
  training::PlanRequest both;
  both.from = "sweep";
  both.config_path = "c.yaml";
  EXPECT_EQ(refusal(flags, both).rfind("--config: not used with --from", 0), 0u);
  training::PlanRequest slow;
  slow.budget_seconds = 0;
  EXPECT_EQ(refusal(flags, slow).rfind("--budget: expected seconds from 1 to", 0), 0u);
}

// --json replaces only an earlier plan: never a sweep's file, a config or a folder.
TEST(FlagValues, APlansJsonReplacesOnlyAnEarlierPlan) {
  test_support::TempDir dir;
  std::ofstream(dir / "config.yaml") << "model: {arch: resnet18}\n";
  std::ofstream(dir / "plan.json") << R"({"candidates": [], "images_per_second_source": "x"})";
  app::PlanFlags flags;
  flags.memory = "4GiB";
  training::PlanRequest request;
  request.json = (dir / "config.yaml").string();
  EXPECT_EQ(
      refusal(flags, request).rfind("--json: " + request.json + " exists and is not a plan", 0),
      0u);
  request.json = dir.path().string();
  EXPECT_EQ(refusal(flags, request), "--json: " + request.json + " is a folder; give a file name");
  request.json = (dir / "plan.json").string();
  EXPECT_EQ(refusal(flags, request), "");
  request.json = (dir / "nowhere/plan.json").string();  // refused before the replay, not after
  EXPECT_EQ(
      refusal(flags, request).rfind("--json: " + (dir / "nowhere").string() + " does not exist", 0),
      0u);
  { auto lock = training::claim_output_dir(dir / "run", training::OutputKind::Run, "-o"); }
  request.json = (dir / "run/plan.json").string();  // only a folder's own command writes there
  EXPECT_NE(refusal(flags, request).find("which holds a run"), std::string::npos);
  // Round 5, a sixth pass: inside the plan's own --output-dir (its small sweep's folder), existing
  // and empty, the plan was written there; refused as another command's folder is, naming both.
  request.from.clear();
  request.config_path = (dir / "config.yaml").string();
  fs::create_directories(dir / "small/sub");
  request.output_dir = (dir / "small").string();
  for (const fs::path& json : {dir / "small/plan.json", dir / "small/sub/plan.json"}) {
    request.json = json.string();
    EXPECT_EQ(refusal(flags, request),
              "--json: " + json.string() + " is inside " + (dir / "small").string() +
                  ", the folder --output-dir gives this command; give a path outside it");
  }
  request.output_dir = (dir / "small").string();
  request.json = (dir / "plan.json").string();
  EXPECT_EQ(refusal(flags, request), "");
}

// A size without its unit is refused, as --card refuses one: "--memory 24" was 24 bytes.
TEST(FlagValues, APlansSizesTakeAUnit) {
  app::PlanFlags flags;
  flags.memory = "24";
  // Only what a plan takes is offered: 24MiB has no room beside the 771 MiB outside the allocator.
  EXPECT_EQ(refusal(flags), "--memory: '24' has no unit; did you mean 24GiB?");
  flags.memory = "24GiB";
  flags.overhead = "800";
  // What lies beside the allocator is below the card's memory: 800GiB, offered before, is not.
  EXPECT_EQ(refusal(flags), "--overhead: '800' has no unit; did you mean 800MiB or 800B?");
  flags.overhead = "800MiB";
  EXPECT_EQ(app::plan_request(flags, from_sweep()).overhead, int64_t{800} << 20);
  // The size it offers is one it takes: "25769803776GiB" is above the largest size.
  flags.memory = "25769803776";
  EXPECT_EQ(refusal(flags), "--memory: '25769803776' has no unit; did you mean 25769803776B?");
  flags.memory = "25769803776B";
  EXPECT_EQ(app::plan_request(flags, from_sweep()).memory, int64_t{24} << 30);
  // Twelfth pass: "1500000000GiB" was offered (and taken: a card of 1.4 EiB); a size above the
  // largest card is refused as --card refuses it.
  flags.memory = "1500000000";
  EXPECT_EQ(refusal(flags), "--memory: '1500000000' has no unit; did you mean 1500000000B?");
  flags.memory = "1500000000GiB";
  EXPECT_EQ(refusal(flags),
            "--memory: expected at most 1024TiB (the largest card), got '1500000000GiB'");
  // A size it cannot read is told the forms it takes, which have a unit (round 5: "or a whole
  // number of bytes", which it then refused).
  for (const std::string bad : {"1e3", "12XB"}) {
    flags.memory = bad;
    EXPECT_EQ(
        refusal(flags),
        "--memory: expected a size with its unit, like 12GiB, 512MiB or 1.5GB, got '" + bad + "'");
  }
  // A number with a fraction has no unit either: it was "not a whole number of bytes", and the
  // bytes then given were refused for having no unit. The size offered is one it takes.
  flags.memory = "1.5";
  EXPECT_EQ(refusal(flags), "--memory: '1.5' has no unit; did you mean 1.5GiB?");
  flags.memory = "24GiB";
  flags.overhead = "0.5";
  EXPECT_EQ(refusal(flags), "--overhead: '0.5' has no unit; did you mean 0.5GiB or 0.5MiB?");
  flags.overhead = "800MiB";
  // Nor is 0GiB offered for a bare 0, which no unit makes a size.
  for (const std::string zero : {"0", "00"}) {
    flags.memory = zero;
    EXPECT_EQ(refusal(flags).find("GiB"), std::string::npos) << refusal(flags);
    EXPECT_EQ(refusal(flags), "--memory: expected a size above 0, got '" + zero + "'");
  }
  // Fifteenth pass: sizes a plan always refuses were offered: 772MiB (above the 771 MiB outside
  // the allocator, not once the 10% headroom is taken), and 800GiB beside a card not given right.
  app::PlanFlags card;
  card.card = "772";
  EXPECT_EQ(refusal(card), "--card: '772' has no unit; did you mean 772GiB?");
  card.card = "24";
  card.overhead = "800";
  EXPECT_EQ(refusal(card), "--card: '24' has no unit; did you mean 24GiB?");
  card.card = "24GiB";
  EXPECT_EQ(refusal(card), "--overhead: '800' has no unit; did you mean 800MiB or 800B?");
}

// PYTORCH_CUDA_ALLOC_CONF with an option the model does not follow is refused with --card before
// the small sweep runs.
TEST(FlagValues, AnAllocatorConfigTheCardCannotModelIsRefusedFirst) {
  app::PlanFlags flags;
  flags.card = "T4";
  ASSERT_EQ(setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:5", 1), 0);
  const std::string said = refusal(flags);
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_EQ(said.rfind("PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb", 0), 0u) << said;
  EXPECT_EQ(app::plan_request(flags, from_sweep()).card->name, "T4");
}
