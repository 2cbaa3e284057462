// End-to-end tests of the `train` executable: arguments, exit codes, one-line errors and the
// run directory it leaves behind.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "app/cli_support.h"
#include "training/config/config.h"
#include "training/parts/components.h"
#include "training/platform/memory.h"
#include "training/platform/tensorboard.h"
#include "training/run/epoch_record.h"
#include "training/run/output_dir.h"

namespace {

namespace fs = std::filesystem;
using cli::count_lines;
using cli::run_train;
using cli::write_tiny_config;

TEST(Cli, HelpShowsExamplesAndExitsZero) {
  const auto r = run_train("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("More examples:"), std::string::npos);
  EXPECT_NE(r.output.find("--resume"), std::string::npos);
  // It ends with copy-paste examples: train, sweep, compare, naming the program as it was run and
  // the project's configs (a ninth pass: a bare `train` on no PATH, configs/ relative to the
  // source tree).
  const auto tail = r.output.substr(r.output.rfind("Start here"));
  const std::string program = TRAIN_BINARY;
  EXPECT_NE(tail.find(program + " --config " PROJECT_SOURCE_DIR "/configs/quick_cpu.yaml"),
            std::string::npos)
      << tail;
  EXPECT_NE(tail.find(program + " sweep --config"), std::string::npos) << tail;
  EXPECT_NE(tail.find(program + " compare runs/"), std::string::npos) << tail;
  // The launcher too, by its path (the tenth pass's F7).
  EXPECT_NE(r.output.find(PROJECT_SOURCE_DIR "/scripts/launch.py -n 2 " + program + " --config"),
            std::string::npos)
      << r.output;
  // A program whose path holds "scripts/" is named as run (the words put in are not rewritten).
  test_support::TempDir dir;
  fs::create_directories(dir / "myscripts");
  fs::create_symlink(TRAIN_BINARY, dir / "myscripts" / "train");
  const auto linked = cli::run_shell("cd " + dir.path().string() + " && ./myscripts/train --help");
  EXPECT_NE(linked.output.find("\n  ./myscripts/train --config " PROJECT_SOURCE_DIR
                               "/configs/quick_cpu.yaml"),
            std::string::npos)
      << linked.output;
}

TEST(Cli, NoConfigIsABadInput) {
  const auto r = run_train("");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("no config: pass --config FILE"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
}

// A flag the command line cannot take (unknown, given twice, missing its value) is one line,
// exit 2 (CLI11 added a second line, "Run with --help for more information.").
// " plan" for "plan --memory 4GiB", " bench loader" for "bench loader --batches 1", "" for flags.
std::string command_of(const std::string& args) {
  std::istringstream words(args);
  std::string first, second;
  words >> first >> second;
  if (first.rfind("--", 0) == 0) return "";
  return " " + first + (first == "bench" ? " " + second : "");
}

TEST(Cli, UnknownFlagIsABadInput) {
  // Round 5: a flag without a value given twice was taken (exit 0) where a valued one is refused.
  for (const std::string bad :
       {"--confg x.yaml", "memory --card T4 --card A100-40GB --config x", "plan --memory",
        "plan --memory 4GiB --budget ten", "cards --json --json",
        "--config x.yaml --print-config --print-config",
        "memory --config x --card H200 --card-only --card-only",
        "sweep --config x --find-max "
        "--find-max",
        "convert root --list --list"}) {
    const auto r = run_train(bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << bad << ": " << r.output;
    // The program as it was run (issue 51, the eighth pass: a bare `train` is on no PATH), and
    // the command whose flags they are (a ninth pass: `train --help` lists none of plan's).
    EXPECT_NE(r.output.find("(" + std::string(TRAIN_BINARY) + command_of(bad) +
                            " --help lists the flags)"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.rfind("[error] ", 0), 0u) << r.output;
  }
  // A value the flag cannot take says what it takes.
  for (const auto& [bad, said] : std::vector<std::pair<std::string, std::string>>{
           {"plan --memory 4GiB --budget 2.5", "--budget: expected a whole number, got '2.5'"},
           {"bench loader --batches 1.5", "--batches: expected a whole number, got '1.5'"},
           // An unknown flag is the mistake, not the required flag it may stand for (CLI11 checks
           // required flags first; the ninth pass's F16).
           {"sweep --bogus", "The following argument was not expected: --bogus"},
           {"memory --confg x.yaml", "The following arguments were not expected: x.yaml --confg"},
           {"report --bogus", "The following argument was not expected: --bogus"},
           // On one line, its control characters escaped (eighteenth pass: printed raw).
           {"report \"$(printf -- '--bo\\ngus\\vx')\"",
            "The following argument was not expected: --bo\\ngus\\x0bx"}}) {
    const auto r = run_train(bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("[error] " + said + " (" + std::string(TRAIN_BINARY) + command_of(bad) +
                            " --help lists the flags)"),
              std::string::npos)
        << r.output;
  }
  // Eighteenth pass: a path with a line break made a folder whose name broke every line naming it.
  const auto r = run_train("report \"$(printf 'runs/a\\nb')\"");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("[error] run_dir: expected a value without control characters (a line "
                          "break, a tab), got 'runs/a\\nb'"),
            std::string::npos)
      << r.output;
  // Nineteenth pass: what is written is named so that a listing shows it as itself (" x" as "x").
  for (const auto& [bad, flag] : std::vector<std::pair<std::string, std::string>>{
           {"--config x.yaml --output-dir 'runs/x '", "--output-dir"},
           {"compare a b --output ' plots'", "--output"},
           {"plan --config " PROJECT_SOURCE_DIR
            "/configs/quick_cpu.yaml --memory 4GiB --json \"$(printf 'p.json\\302\\240')\"",
            "--json"}}) {
    const auto refused = run_train(bad);
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.output;
    EXPECT_NE(refused.output.find(
                  "[error] " + flag +
                  ": expected a path whose every part starts and ends with a visible character"),
              std::string::npos)
        << refused.output;
  }
}

// `train cards --card NAME... --json`: the cards asked for, each found as --card finds it (the
// scripts ask it for a card's name instead of folding names themselves); an unknown card, or two
// values after one --card, is one line, exit 2.
TEST(Cli, CardsListsTheCardsAskedForAndRefusesAnUnknownOne) {
  const auto r = run_train("cards --json --card 'h100 sxm' --card t4 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto cards = nlohmann::json::parse(r.output).at("cards");
  ASSERT_EQ(cards.size(), 2u) << r.output;
  EXPECT_EQ(cards[0].at("name"), "H100-SXM");
  EXPECT_EQ(cards[0].at("given"), "h100 sxm");
  EXPECT_EQ(cards[1].at("name"), "T4");
  for (const auto& [bad, said] : std::vector<std::pair<std::string, std::string>>{
           {"cards --card nosuch", "[error] --card: unknown card 'nosuch' "},
           {"cards --json --card T4 A10",
            "[error] The following argument was not expected: A10"}}) {
    const auto refused = run_train(bad);
    EXPECT_EQ(refused.code, 2) << bad << ": " << refused.output;
    EXPECT_EQ(count_lines(refused.output), 1) << bad << ": " << refused.output;
    EXPECT_NE(refused.output.find(said), std::string::npos) << bad << ": " << refused.output;
  }
}

// A batch of 1 where layer4's map is 1x1 (the ImageNet stem at 32x32) does not train: BatchNorm in
// training needs more than one value per channel. Training stopped at its first step with
// LibTorch's "Expected more than 1 value per channel when training" (exit 1), and `train memory
// --card` said it fits; each is now refused where it is asked for, one line, exit 2, no folder.
TEST(Cli, ABatchOfOneThatDoesNotTrainIsRefusedWhereItIsAsked) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);  // ResNet-18, ImageNet stem, 32x32
  const std::string said =
      "1 does not train: with model.stem imagenet at data.image_size 32, layer4's feature map is "
      "1x1";
  const std::string with_config = " --config " + config.string() + " ";
  for (const auto& [command, flag] : std::vector<std::pair<std::string, std::string>>{
           {with_config + "--set training.batch_size=1 --output-dir " + (dir / "run").string(),
            "--set training.batch_size"},
           {"memory" + with_config + "--batch-size 1 --card H100-80GB --card-only --output-dir " +
                (dir / "memory").string(),
            "--batch-size"},
           {"memory" + with_config + "--batch-size 1 --output-dir " + (dir / "memory").string(),
            "--batch-size"},
           {"sweep" + with_config + "--batch-sizes 1,8 --output-dir " + (dir / "sweep").string(),
            "--batch-sizes"}}) {
    const auto r = run_train(command);
    EXPECT_EQ(r.code, 2) << command << ": " << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << command << ": " << r.output;
    const std::string key = flag == "--batch-sizes" ? "sweep.batch_sizes" : "training.batch_size";
    EXPECT_NE(r.output.find("[error] " + flag + ": " + key + ": " + said), std::string::npos)
        << command << ": " << r.output;
  }
  for (const char* folder : {"run", "memory", "sweep"}) EXPECT_FALSE(fs::exists(dir / folder));
}

// LibTorch reads PYTORCH_CUDA_ALLOC_CONF while it loads and aborts (exit 134, a stack trace) on a
// malformed value, on the CPU too: refused first, one line, exit 2; well-formed values pass.
TEST(Cli, AMalformedAllocatorConfigIsOneLineNotAnAbort) {
  for (const char* bad : {"garbage", "expandable_segments", "expandable_segments:", ",", "a:1,,",
                          "a:1 b:2", "a:[1,2", "[a:1]"}) {
    const auto r = cli::run_shell(std::string("PYTORCH_CUDA_ALLOC_CONF='") + bad +
                                  "' " TRAIN_BINARY " --help");
    EXPECT_EQ(r.code, 2) << bad << ": " << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(std::string("[error] PYTORCH_CUDA_ALLOC_CONF: expected key:value "
                                        "items separated by single commas (e.g. "
                                        "expandable_segments:True,max_split_size_mb:128), got '") +
                            bad + "'"),
              std::string::npos)
        << r.output;
  }
  // LibTorch 2.11 reads PYTORCH_ALLOC_CONF the same way.
  const auto other = cli::run_shell("PYTORCH_ALLOC_CONF=garbage " TRAIN_BINARY " --help");
  EXPECT_EQ(other.code, 2) << other.output;
  EXPECT_EQ(other.output.rfind("[error] PYTORCH_ALLOC_CONF: expected key:value", 0), 0u)
      << other.output;
  // A long value is cut short in the line.
  const auto long_value =
      cli::run_shell("PYTORCH_CUDA_ALLOC_CONF=" + std::string(100000, 'x') + " " TRAIN_BINARY);
  EXPECT_EQ(long_value.code, 2) << long_value.output.substr(0, 400);
  EXPECT_LT(long_value.output.size(), 1000u);
  EXPECT_NE(long_value.output.find(std::string(200, 'x') + "...'"), std::string::npos);
  // Cut before a character, not inside one: 1 byte and 300 two-byte characters keep 199 bytes.
  std::string umlauts = "x";
  for (int i = 0; i < 300; ++i) umlauts += "\xc3\xbc";
  const auto cut = cli::run_shell("PYTORCH_CUDA_ALLOC_CONF=" + umlauts + " " TRAIN_BINARY);
  EXPECT_EQ(cut.code, 2);
  EXPECT_NE(cut.output.find(umlauts.substr(0, 199) + "...'"), std::string::npos) << cut.output;
  // It is not read while PYTORCH_CUDA_ALLOC_CONF is set, empty too (LibTorch 2.11 reads one).
  const auto unread =
      cli::run_shell("PYTORCH_CUDA_ALLOC_CONF= PYTORCH_ALLOC_CONF=garbage " TRAIN_BINARY " --help");
  EXPECT_EQ(unread.code, 0) << unread.output;
  // LibTorch drops blanks anywhere, inside a key or a value too.
  for (const char* good :
       {"", "expandable_segments:True", " max_split_size_mb : 128 ,", "expand able_segments:Tr ue",
        "\tmax_split_size_mb:\t20\n", "roundup_power2_divisions:[1,2],expandable_segments:False",
        "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"}) {
    const auto r = cli::run_shell(std::string("PYTORCH_CUDA_ALLOC_CONF='") + good +
                                  "' " TRAIN_BINARY " --help");
    EXPECT_EQ(r.code, 0) << good << ": " << r.output;
  }
}

TEST(Cli, ConfigErrorIsOneLineNamingTheKey) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);
  const auto r = run_train("--config " + config.string() + " --set training.epoch=3 --output-dir " +
                           (dir / "run").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("unknown key 'training.epoch' (did you mean 'training.epochs'?)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "run"));  // nothing is created for a refused run
}

TEST(Cli, MissingDataIsOneLineAndCreatesNoRun) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);
  const auto r = run_train("--config " + config.string() +
                           " --set data.source=auto --set data.root=" + (dir / "nodata").string() +
                           " --output-dir " + (dir / "run").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("no CIFAR-10 found"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// training.accumulate_steps 0 or negative, a target batch of 0: one line naming the key or flag,
// exit 2, nothing created.
TEST(Cli, BadAccumulationValuesAreOneLineErrors) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);
  for (const std::string bad : {"0", "-4", "two"}) {
    const auto r =
        run_train("--config " + config.string() + " --set training.accumulate_steps=" + bad +
                  " --output-dir " + (dir / "run").string());
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find("training.accumulate_steps"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("expected an integer in [1, 65536]"), std::string::npos) << r.output;
  }
  const auto sweep = run_train("sweep --config " + config.string() +
                               " --accumulate-steps 1,0 --output-dir " + (dir / "run").string());
  EXPECT_EQ(sweep.code, 2) << sweep.output;
  EXPECT_EQ(count_lines(sweep.output), 1) << sweep.output;
  EXPECT_NE(sweep.output.find("sweep.accumulate_steps"), std::string::npos) << sweep.output;
  // train sweep measures its own axis: training.accumulate_steps is refused, not ignored.
  const auto ignored =
      run_train("sweep --config " + config.string() +
                " --set training.accumulate_steps=2 --output-dir " + (dir / "run").string());
  EXPECT_EQ(ignored.code, 2) << ignored.output;
  EXPECT_EQ(count_lines(ignored.output), 1) << ignored.output;
  EXPECT_NE(ignored.output.find("its grid's axis is sweep.accumulate_steps"), std::string::npos)
      << ignored.output;
  const auto plan = run_train("plan --memory 4GiB --target-batch 0 --config " + config.string() +
                              " --output-dir " + (dir / "run").string());
  EXPECT_EQ(plan.code, 2) << plan.output;
  EXPECT_EQ(count_lines(plan.output), 1) << plan.output;
  EXPECT_NE(plan.output.find("--target-batch: expected images per optimizer step"),
            std::string::npos)
      << plan.output;
  EXPECT_FALSE(fs::exists(dir / "run"));
}

// Issue 51, the eighth pass's "left": a file as the small sweep's folder was refused after the
// line announcing the sweep (two lines); refused first now, in one line; so too (a ninth pass) the
// sweep's own checks (a memory.limit below the weights: exit 3).
TEST(Cli, APlansSmallSweepIsCheckedBeforeItsAnnouncement) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir);
  std::ofstream(dir / "a-file") << "not a folder";
  const auto into_file = run_train("plan --memory 4GiB --config " + config.string() +
                                   " --output-dir " + (dir / "a-file").string());
  EXPECT_EQ(into_file.code, 2) << into_file.output;
  EXPECT_EQ(count_lines(into_file.output), 1) << into_file.output;
  EXPECT_NE(into_file.output.find("--output-dir: " + (dir / "a-file").string() + ": cannot create"),
            std::string::npos)
      << into_file.output;
  const auto limited = run_train("plan --memory 4GiB --config " + config.string() +
                                 " --set memory.limit=50MiB --output-dir " + (dir / "p").string());
  EXPECT_EQ(limited.code, 3) << limited.output;
  EXPECT_EQ(count_lines(limited.output), 1) << limited.output;
  EXPECT_NE(limited.output.find("memory.limit 50.00 MiB: the weights"), std::string::npos)
      << limited.output;
}

TEST(Cli, CudaWithoutAGpuIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a CUDA device";
  test_support::TempDir dir;
  const auto r = run_train("--config " + write_tiny_config(dir).string() + " --device cuda");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("training.device: 'cuda' requested, but"), std::string::npos) << r.output;
  // Thirteenth pass: "use device: cpu or auto" was neither the flag's spelling nor the key's.
  EXPECT_NE(r.output.find("; use cpu or auto instead"), std::string::npos) << r.output;
}

// memory.snapshot is the CUDA caching allocator's history: refused on the CPU, by `train` and by
// `train memory`, before anything is created.
TEST(Cli, MemorySnapshotOnTheCpuIsABadInput) {
  test_support::TempDir dir;
  const std::string config = write_tiny_config(dir).string();
  for (const std::string command : {"", "memory "}) {
    const auto r = run_train(command + "--config " + config +
                             " --set memory.snapshot=true --output-dir " + (dir / "out").string());
    EXPECT_EQ(r.code, 2) << command << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find("memory.snapshot: "), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out"));
  }
  // Thirteenth pass's review: with --card-only (on CUDA) it was taken and recorded nothing.
  const auto r = run_train("memory --config " + config + " --card T4 --card-only --set " +
                           "memory.snapshot=true --output-dir " + (dir / "out").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("and --card-only measures none"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// A graph-captured step needs a CUDA device: `train` and `train sweep` refuse it on the CPU in
// one line before anything is created; auto runs eager there.
TEST(Cli, CudaGraphOnTheCpuIsABadInput) {
  test_support::TempDir dir;
  const std::string config = write_tiny_config(dir).string();
  for (const std::string command : {"", "sweep --batch-sizes 4 "}) {
    const auto r = run_train(command + "--config " + config +
                             " --device cpu --set training.cuda_graph=on --output-dir " +
                             (dir / "out").string());
    EXPECT_EQ(r.code, 2) << command << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find("training.cuda_graph: on needs a CUDA device; this run trains on cpu"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(fs::exists(dir / "out"));
  }
  const auto r = run_train("--config " + config +
                           " --device cpu --set training.cuda_graph=auto --set "
                           "training.max_steps=2 --output-dir " +
                           (dir / "auto").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("captured in a CUDA graph"), std::string::npos) << r.output;
}

TEST(Cli, MemoryRefusesAnUnknownSetting) {
  test_support::TempDir dir;
  const auto r = run_train("memory --config " + write_tiny_config(dir).string() +
                           " --settings fp32,bf32 --output-dir " + (dir / "out").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("--settings: 'bf32' is not a setting"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

// `train plan` without --from runs a small sweep (here: one setting, two batches) and prints the
// recommended flags as its last line; a card too small for all of it is one line, exit 2.
TEST(Cli, PlanRunsASmallSweepAndRecommendsFlags) {
  test_support::TempDir dir;
  const std::string config = write_tiny_config(dir).string();
  const auto r = run_train("plan --memory 8GiB --config " + config +
                           " --batch-sizes 2,4 --set sweep.precisions=[fp32] --set "
                           "sweep.checkpointing=[false] --output-dir " +
                           (dir / "sweep").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("recommended: --set training.batch_size="), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("**recommended**"), std::string::npos) << r.output;
  const auto small = run_train("plan --memory 512MiB --from " + (dir / "sweep").string());
  EXPECT_EQ(small.code, 2) << small.output;
  EXPECT_EQ(count_lines(small.output), 1) << small.output;
  EXPECT_NE(small.output.find("needs a card of at least"), std::string::npos) << small.output;
  const auto bad = run_train("plan --memory 12XB --from " + (dir / "sweep").string());
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(count_lines(bad.output), 1) << bad.output;
  const auto empty = run_train("plan --memory 12GiB --from " + dir.path().string());
  EXPECT_EQ(empty.code, 2);
  EXPECT_NE(empty.output.find("not a sweep written by train (no .train-output marker"),
            std::string::npos)
      << empty.output;
}

TEST(Cli, PrintConfigShowsTheEffectiveConfig) {
  test_support::TempDir dir;
  const auto r = run_train("--config " + write_tiny_config(dir).string() +
                           " --set training.epochs=7 --print-config");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("  epochs: 7\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  arch: resnet18\n"), std::string::npos) << r.output;
}

// Nineteenth pass: a flag that stands for a key was pasted into YAML (`--batch-sizes '8]#,16'`
// swept [8] alone, `--memory-limit '1GiB #x'` was 1GiB), and a --set value was read as a stream of
// its own (`training.epochs=--- 2` was 2, a file's `epochs: --- 2` refused). A flag's value is one
// scalar (a list flag's items each one); a --set value is read as a file reads a key's line.
TEST(Cli, AFlagsValueIsOneScalarAndASetValueIsReadAsAFilesLine) {
  test_support::TempDir dir;
  const std::string config = "--config " + write_tiny_config(dir).string();
  for (const auto& [flags, said] : std::vector<std::pair<std::string, std::string>>{
           {"sweep --batch-sizes '8]#,16' --output-dir " + (dir / "s").string(),
            "--batch-sizes: sweep.batch_sizes: expected a non-empty list of integers in [1, "
            "1048576], got '8]#' in the list"},
           {"--memory-limit '1GiB #x' --print-config",
            "--memory-limit: memory.limit: expected a size with its unit, like 12GiB, 512MiB or "
            "1.5GB, got '1GiB #x'"},
           {"--device 'cuda: 0' --print-config",
            "--device: training.device: expected auto, cpu, cuda or cuda:<index>, got 'cuda: 0'"},
           {"--set 'training.epochs=--- 2' --print-config",
            "--set training.epochs: training.epochs: expected an integer in [1, 100000], got "
            "'--- 2'"}}) {
    const auto r = run_train(flags.substr(0, 6) == "sweep " ? "sweep " + config + flags.substr(5)
                                                            : config + " " + flags);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.output;
    EXPECT_NE(r.output.find("[error] " + said), std::string::npos) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "s"));
  // White space around a number's or an on/off flag's value is ignored, as around a key's value
  // (`--budget '300 '` was refused and `--budget ' 300'` taken); a bad one says what it takes.
  const auto padded = run_train(config + " --print-config=' true' --set 'training.epochs=\" 3\"'");
  EXPECT_EQ(padded.code, 0) << padded.output;
  EXPECT_NE(padded.output.find("  epochs: 3\n"), std::string::npos) << padded.output;
  const auto maybe = run_train("sweep " + config + " --find-max=maybe");
  EXPECT_NE(maybe.output.find("[error] --find-max: expected nothing, or true or false after '=', "
                              "got 'maybe'"),
            std::string::npos)
      << maybe.output;
  // Spaces only: a tab stays, and is refused.
  const auto tab = run_train("bench loader --batches \"$(printf '1\\t')\"");
  EXPECT_EQ(tab.code, 2) << tab.output;
  const auto number = run_train("bench loader --batches 'x '");
  EXPECT_NE(number.output.find("[error] --batches: expected a whole number, got 'x'"),
            std::string::npos)
      << number.output;
  // convert's folder is named as every folder the program creates.
  const auto convert = run_train("convert " + dir.path().string() + " ' conv'");
  EXPECT_NE(
      convert.output.find("[error] output: expected a path whose every part starts and ends with a "
                          "visible character, got ' conv'"),
      std::string::npos)
      << convert.output;
  const auto kept = run_train(config + " --set 'output.name=---' --print-config");
  EXPECT_NE(kept.output.find("  name: \"---\"\n"), std::string::npos) << kept.output;
}

TEST(Cli, TrainsWritesTheRunDirectoryAndResumes) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r =
      run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* file :
       {"config.yaml", "train.log", "metrics.jsonl", "metrics.csv", "checkpoint.pt"}) {
    EXPECT_TRUE(fs::exists(run / file)) << file;
  }
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 1);
  EXPECT_EQ(test_support::read_text(run / "metrics.csv").substr(0, 60),
            std::string(
                "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,epoch_seconds,eval_seconds")
                .substr(0, 60));
  EXPECT_NE(test_support::read_text(run / "train.log").find("epoch 1/1  step 4  train loss"),
            std::string::npos);
  EXPECT_NE(test_support::read_text(run / "config.yaml").find("source: synthetic"),
            std::string::npos);

  // Reusing the directory for a new run is refused and changes nothing.
  const auto metrics_before = test_support::read_text(run / "metrics.jsonl");
  r = run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("already holds a run"), std::string::npos) << r.output;
  EXPECT_EQ(test_support::read_text(run / "metrics.jsonl"), metrics_before);
  // Round 5: with the autos to measure first, the folder was refused only after them (exit 3
  // where the measurement ran out of memory under the limit): it is checked before any
  // measurement, as a folder that cannot be created is.
  const std::string autos =
      " --set training.memory_format=auto --set checkpointing.enabled=auto --memory-limit 1MiB";
  r = run_train("--config " + write_tiny_config(dir).string() + autos + " --output-dir " +
                run.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("already holds a run"), std::string::npos) << r.output;
  std::ofstream(dir / "a-file") << "not a folder";
  r = run_train("--config " + write_tiny_config(dir).string() + autos + " --output-dir " +
                (dir / "a-file" / "x").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(
      r.output.find("cannot create the folder (" + (dir / "a-file").string() + " is not a folder)"),
      std::string::npos)
      << r.output;
  // Issue 51, the eighth pass: an existing file as the folder was refused without the flag.
  for (const std::string& command :
       {std::string(), std::string("sweep --batch-sizes 4"), std::string("memory --settings fp32"),
        std::string("plan --card T4 --batch-sizes 4")}) {
    r = run_train(command + " --config " + write_tiny_config(dir).string() + " --output-dir " +
                  (dir / "a-file").string());
    EXPECT_EQ(r.code, 2) << command << ": " << r.output;
    EXPECT_NE(r.output.find("[error] --output-dir: " + (dir / "a-file").string() +
                            ": cannot create the folder"),
              std::string::npos)
        << command << ": " << r.output;
  }
  r = run_train("compare " + run.string() + " --output " + (dir / "a-file").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("[error] --output: " + (dir / "a-file").string() +
                          ": cannot create the folder"),
            std::string::npos)
      << r.output;
  // Below a link to nothing: named ("File exists" before, after the measurements).
  fs::create_symlink(dir / "nowhere", dir / "dangling");
  r = run_train("--config " + write_tiny_config(dir).string() + autos + " --output-dir " +
                (dir / "dangling" / "sub").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cannot create the folder (" + (dir / "dangling").string() +
                          " is a symbolic link to " + (dir / "nowhere").string()),
            std::string::npos)
      << r.output;
  EXPECT_EQ(test_support::read_text(run / "metrics.jsonl"), metrics_before);

  // Resume with a longer horizon: the stored config is used, plus the override.
  r = run_train("--resume " + run.string() + " --set training.epochs=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 2);
  EXPECT_EQ(test_support::read_text(run / "metrics.jsonl").substr(0, metrics_before.size()),
            metrics_before);
  EXPECT_NE(test_support::read_text(run / "train.log").find("resumed from"), std::string::npos);
}

// The terminal gets a short start-up summary; the full config is in config.yaml and train.log.
// training.memory_format: auto (the default) is timed on the CPU; config.yaml keeps auto, and the
// run's decisions.json and checkpoint hold the layout it chose, which a resume uses without
// timing again.
TEST(Cli, StartUpSummaryAndTheMemoryFormatChosenOnce) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_train("--config " + write_tiny_config(dir, 2).string() + " --output-dir " +
                     run.string() + " --set training.max_steps=5");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("effective config"), std::string::npos) << r.output;
  for (const char* said : {"run directory: ", "device cpu (", "data: ",
                           "model: resnet18 (imagenet "
                           "stem, 10 classes",
                           "fp32 ", "batch 32: 2 epochs of 4 steps",
                           "auto: timed here over 3 steps of 8 images, contiguous "}) {
    EXPECT_NE(r.output.find(said), std::string::npos) << said << "\n" << r.output;
  }
  const std::string log = test_support::read_text(run / "train.log");
  EXPECT_NE(log.find("config as asked:"), std::string::npos);
  EXPECT_NE(log.find("auto: timed here over 3 steps of 8 images, contiguous "), std::string::npos)
      << log;
  EXPECT_NE(test_support::read_text(run / "config.yaml").find("memory_format: auto"),
            std::string::npos);
  const auto decided = nlohmann::json::parse(test_support::read_text(run / "decisions.json"));
  const std::string layout = decided.at("memory_format").at("layout");
  EXPECT_TRUE(layout == "channels_last" || layout == "contiguous") << decided.dump();
  EXPECT_NE(decided.at("memory_format").at("reason").get<std::string>().find("auto: timed here"),
            std::string::npos);
  r = run_train("--resume " + run.string() + " --set training.max_steps=0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("auto: timed here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory format " + layout + ": auto: as this run decided before"),
            std::string::npos)
      << r.output;
  // The report says both: what was asked, and what it became.
  EXPECT_NE(test_support::read_text(run / "report.md").find("fp32 / auto: " + layout),
            std::string::npos);
}

TEST(Cli, OutOfMemoryIsExitCodeThreeAndKeepsTheCheckpoint) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r =
      run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto row = nlohmann::json::parse(test_support::read_text(run / "metrics.jsonl"));
  EXPECT_EQ(row.at("device"), "cpu");
  const int64_t peak = row.at("peak_allocated_bytes").get<int64_t>();
  EXPECT_GT(peak, 50 << 20);  // ResNet-18 weights, gradients and momentum alone are ~130 MiB
  EXPECT_NE(test_support::read_text(run / "train.log")
                .find("memory: parameters 42.65 MiB, gradients 42.65 MiB"),
            std::string::npos);

  const auto checkpoint_before = test_support::read_text(run / "checkpoint.pt");
  const auto metrics_before = test_support::read_text(run / "metrics.jsonl");
  // Eight times the batch under a limit 20% above what batch 32 needed, in a layout given (auto
  // would time both layouts at 256 under the limit and stop there, before the first step).
  r = run_train("--resume " + run.string() +
                " --set training.epochs=2 --set training.batch_size=256" +
                " --set data.synthetic_train_size=512 --set training.memory_format=contiguous" +
                " --memory-limit " + std::to_string(peak * 6 / 5) + "B");
  EXPECT_EQ(r.code, 3) << r.output;
  std::string error_line;
  int errors = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("[error]") != std::string::npos) error_line = line, ++errors;
  }
  EXPECT_EQ(errors, 1) << r.output;
  for (const std::string& part : std::vector<std::string>{
           "out of memory on cpu in epoch 2 after 4 steps (tried to allocate ", "MiB): peak",
           "(memory.limit)", "training.batch_size (now 256)", "training.precision: bf16 or fp16",
           // checkpointing is offered only where the batch's step with every block recomputed is
           // measured to fit (this CPU's kernels decide; OutOfMemory's unit tests cover both)
           "a sweep's --find-max finds the largest batch that fits (" + std::string(TRAIN_BINARY) +
               " sweep --help)"}) {
    EXPECT_NE(error_line.find(part), std::string::npos) << part << " in " << error_line;
  }
  // The steps measured after the run's folder closed are said in its train.log too (eighteenth
  // pass: on the terminal only), before the error's line.
  const std::string log = test_support::read_text(run / "train.log");
  const size_t measuring = log.rfind("out of memory: measuring a step of");
  EXPECT_NE(measuring, std::string::npos) << log;
  EXPECT_LT(measuring, log.rfind("[error] out of memory on cpu in epoch 2")) << log;
  EXPECT_EQ(test_support::read_text(run / "checkpoint.pt"), checkpoint_before);
  EXPECT_EQ(test_support::read_text(run / "metrics.jsonl"), metrics_before);
  // With the layout auto, the run's own step is timed under the limit (eighth hostile pass: at 8
  // images a layout fitted that ran out at the batch): out of memory in each layout before the
  // first step, nothing trained.
  r = run_train(
      "--resume " + run.string() + " --set training.epochs=2 --set training.batch_size=256" +
      " --set data.synthetic_train_size=512 --memory-limit " + std::to_string(peak * 6 / 5) + "B");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("in the training step timed in each layout (training.memory_format: "
                          "auto): in contiguous and in channels_last"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(test_support::read_text(run / "checkpoint.pt"), checkpoint_before);
}

// Building the model (or loading a checkpoint) can run out of memory before the first step: that
// is exit 3 with its own one line, not an internal error.
TEST(Cli, OutOfMemoryBeforeTheFirstStepIsExitCodeThree) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  // ResNet-18's weights alone are 42.65 MiB: with their gradients and momentum above the limit,
  // refused before the layout timing or the model's building (hostile pass 7), whatever the
  // layout.
  auto r = run_train("--config " + config + " --output-dir " + (dir / "small").string() +
                     " --memory-limit 20MiB");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("memory.limit 20.00 MiB: the weights and their gradients and momentum "
                          "alone take "),
            std::string::npos)
      << r.output;
  r = run_train("--config " + config + " --output-dir " + (dir / "small").string() +
                " --memory-limit 20MiB --set training.memory_format=contiguous");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("memory.limit 20.00 MiB: the weights"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "small"));
  // Thirteenth pass: a limit of a few bytes was LibTorch's out of memory (exit 1) reading the
  // labels; in bf16, autocast's copies of the weights are held whatever the batch (a limit between
  // fp32's count and bf16's was measured first and written, then out of memory at one image).
  r = run_train("--config " + config + " --output-dir " + (dir / "small").string() +
                " --memory-limit 1B");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("memory.limit 1 B: the weights"), std::string::npos) << r.output;
  const int64_t fp32_held = training::held_whatever_the_batch(
                                training::parse_config(test_support::read_text(config), config))
                                .bytes;
  r = run_train("--config " + config + " --output-dir " + (dir / "small").string() +
                " --set training.precision=bf16 --memory-limit " +
                std::to_string(fp32_held + 2 * training::kMiB) + "B");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find(" and autocast's bf16 copies of them alone take "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(", training.precision: fp32 or a smaller model.arch"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "small"));
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  // A fresh run has no checkpoint to be intact (round 5: it said so).
  EXPECT_EQ(r.output.find("checkpoint is intact"), std::string::npos) << r.output;
  // (The evaluation probe's own out of memory before the first step is no longer reached here:
  // making its batch starts again in smaller ones (Evaluator.*), and the evaluation holds less
  // than a step since it runs without the gradients; its line's words are OutOfMemory.*'s.)

  r = run_train("--config " + config + " --output-dir " + (dir / "run").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto checkpoint = test_support::read_text(dir / "run/checkpoint.pt");
  // A resume under a limit its weights, gradients and momentum exceed: refused before the
  // checkpoint's tensors are loaded (it ran out of memory loading them), the checkpoint untouched.
  r = run_train("--resume " + (dir / "run").string() +
                " --set training.epochs=2 --memory-limit 100MiB");
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("memory.limit 100.00 MiB: the weights and their gradients and momentum "
                          "alone take "),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("not a readable checkpoint"), std::string::npos) << r.output;
  EXPECT_EQ(test_support::read_text(dir / "run/checkpoint.pt"), checkpoint);
}

// Evaluation has its own batch size. One that does not fit failed the run after a whole epoch of
// training; now the first evaluation batch is tried before the first step, and what does not fit
// is evaluated in smaller chunks (the results do not depend on it), said in the log.
TEST(Cli, AnEvaluationBatchThatDoesNotFitIsSplitBeforeTheFirstStep) {
  test_support::TempDir dir;
  std::ofstream(dir / "eval.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                      "data: {source: synthetic, synthetic_train_size: 32, "
                                      "synthetic_test_size: 1024}\n"
                                      "training: {device: cpu, epochs: 1, batch_size: 16, "
                                      "eval_batch_size: 1024, log_every_steps: 1, "
                                      "memory_format: contiguous}\n";
  // The limit is derived from this CPU's own peaks (they differ between CPUs' kernels): halfway
  // between training at batch 16 and evaluating 1024 images at once. (The layout is set: `auto`
  // times both, and two runs could choose apart.)
  ASSERT_EQ(run_train("--config " + (dir / "eval.yaml").string() + " --output-dir " +
                      (dir / "whole").string())
                .code,
            0);
  const auto whole = nlohmann::json::parse(test_support::read_text(dir / "whole/metrics.jsonl"));
  const int64_t training = whole.at("train_peak_allocated_bytes");
  const int64_t evaluation = whole.at("eval_peak_allocated_bytes");
  ASSERT_GT(evaluation - training, int64_t{256} << 20) << "no room between the two peaks";
  const int64_t limit = (training + evaluation) / 2;
  const auto r =
      run_train("--config " + (dir / "eval.yaml").string() + " --output-dir " +
                (dir / "run").string() + " --memory-limit " + std::to_string(limit) + "B");
  EXPECT_EQ(r.code, 0) << r.output;
  const auto split = r.output.find(
      "memory: evaluation ran out of memory at 1024 images per forward pass; it goes on in "
      "chunks of 512 (training.eval_batch_size 1024");
  EXPECT_NE(split, std::string::npos) << r.output;
  EXPECT_LT(split, r.output.find("step 1/2")) << "said after training had started";
  EXPECT_EQ(count_lines(test_support::read_text(dir / "run/metrics.jsonl")), 1);
  // The split changes no result: the test loss and accuracy of the whole batch, to the last bit
  // (round 3: a float32 sum per chunk moved the loss's 7th digit).
  const auto chunked = nlohmann::json::parse(test_support::read_text(dir / "run/metrics.jsonl"));
  EXPECT_EQ(chunked.at("test_loss"), whole.at("test_loss"));
  EXPECT_EQ(chunked.at("test_acc"), whole.at("test_acc"));
}

TEST(Cli, BadMemoryLimitIsABadInput) {
  test_support::TempDir dir;
  const auto r =
      run_train("--config " + write_tiny_config(dir).string() + " --memory-limit 12apples");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(
      r.output.find("--memory-limit: memory.limit: expected a size with its unit, like 12GiB"),
      std::string::npos)
      << r.output;
}

TEST(Cli, SweepRefusesABadGridBeforeAnyTrial) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--batch-sizes 0,8",
            "sweep.batch_sizes: expected a non-empty list of integers in [1, 1048576], got '0' in "
            "the list"},
           {"--precisions fp32,fp64",
            "sweep.precisions: expected a non-empty list of fp32, bf16, fp16, got 'fp64' in the "
            "list"},
           {"--checkpointing maybe",
            "sweep.checkpointing: expected a non-empty list of true, false or auto, got 'maybe' in "
            "the list"},
           {"--predict-for 12GB,lots",
            "sweep.predict_for: expected a list of sizes with their unit like [12GiB, 24GiB], each "
            "at most 1024TiB, got 'lots' in the list"},
           {"--predict-for 24",
            "sweep.predict_for: '24' in the list has no unit; did you mean 24GiB or 24MiB or "
            "24B?"},
           {"--find-max", "sweep.find_max: on the CPU there is no device memory to fill"}}) {
    const auto r = run_train("sweep --config " + config + " " + flags + " --output-dir " +
                             (dir / "sweep").string());
    EXPECT_EQ(r.code, 2) << flags;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "sweep")) << flags;
  }
}

// A comma-separated flag is read one way: an empty item (a trailing comma, a leading one, two in a
// row) is refused naming the flag, never dropped (round 4 ran "fp32," with one item fewer).
TEST(Cli, AnEmptyItemInACommaListIsRefusedNotDropped) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  const std::string out = " --output-dir " + (dir / "out").string();
  for (const auto& [command, flag] : std::vector<std::pair<std::string, std::string>>{
           {"sweep --config " + config + " --precisions fp32," + out, "--precisions"},
           {"sweep --config " + config + " --batch-sizes 16," + out, "--batch-sizes"},
           {"sweep --config " + config + " --checkpointing off," + out, "--checkpointing"},
           {"sweep --config " + config + " --memory-formats ,contiguous" + out, "--memory-formats"},
           {"plan --config " + config + " --memory 1GiB --batch-sizes 8," + out, "--batch-sizes"},
           {"memory --config " + config + " --settings fp32," + out, "--settings"},
           {"bench matmul --dtypes fp32, --output " + (dir / "out").string(), "--dtypes"},
           {"bench matmul --size 64,,128 --output " + (dir / "out").string(), "--size"}}) {
    const auto r = run_train(command);
    EXPECT_EQ(r.code, 2) << command;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(flag + ": '"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("has an empty item"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out")) << command;
  }
}

// A flag's upper bound is checked with its lower one, before any work: --threads 100000 was
// taken (training.threads stops at 4096) and plan --budget 2^63-1 started the small sweep.
TEST(Cli, AFlagsBoundsAreCheckedBeforeAnyWork) {
  test_support::TempDir dir;
  const auto config = write_tiny_config(dir).string();
  for (const auto& [command, said] : std::vector<std::pair<std::string, std::string>>{
           {"bench matmul --size 8 --threads 100000 --output " + (dir / "out").string(),
            "--threads: expected 0 (LibTorch's default) to 4096, as training.threads, got 100000"},
           {"bench matmul --size 8 --threads -1 --output " + (dir / "out").string(),
            "--threads: expected 0 (LibTorch's default) to 4096, as training.threads, got -1"},
           {"plan --config " + config +
                " --memory 1GiB --budget 9223372036854775807 --output-dir " +
                (dir / "out").string(),
            "--budget: expected seconds from 1 to 604800 (7 days, as sweep.time_budget), got "
            "9223372036854775807"}}) {
    const auto r = run_train(command);
    EXPECT_EQ(r.code, 2) << command << ": " << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find("[error] " + said), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out")) << command;
  }
}

// data.image_size (issue 53 section 1): a run at 224x224 trains and evaluates, its step holds the
// larger images (its training peak grows by more than the input batch itself), and the card
// prediction follows it (a larger predicted peak and a smaller largest batch than at 32).
TEST(Cli, ARunAt224TrainsAndTheCardPredictionFollowsTheImageSize) {
  test_support::TempDir dir;
  std::ofstream(dir / "224.yaml") << "model: {arch: resnet18, stem: imagenet}\n"
                                     "data: {source: synthetic, synthetic_train_size: 8, "
                                     "synthetic_test_size: 4}\n"
                                     "training: {device: cpu, batch_size: 4, eval_batch_size: 4, "
                                     "max_steps: 1, memory_format: contiguous, threads: 1}\n"
                                     "checkpoint: {enabled: false}\n";
  auto trained_peak = [&](int64_t size) {
    const auto run = dir / ("run" + std::to_string(size));
    const auto r = run_train("--config " + (dir / "224.yaml").string() + " --output-dir " +
                             run.string() + " --set data.image_size=" + std::to_string(size));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(
        test_support::read_text(run / "config.yaml").find("image_size: " + std::to_string(size)),
        std::string::npos);
    const auto row = nlohmann::json::parse(test_support::read_text(run / "metrics.jsonl"));
    return row.at("train_peak_allocated_bytes").get<int64_t>();
  };
  EXPECT_GT(trained_peak(224) - trained_peak(32), 4 * 3 * (224 * 224 - 32 * 32) * 4);
  auto predicted = [&](int64_t size) {
    const auto out = dir / ("memory" + std::to_string(size));
    const auto r = run_train("memory --config " + (dir / "224.yaml").string() +
                             " --card H200 --card-only --settings fp32 --output-dir " +
                             out.string() + " --set data.image_size=" + std::to_string(size));
    EXPECT_EQ(r.code, 0) << r.output;
    return nlohmann::json::parse(test_support::read_text(out / "memory_breakdown.json"))
        .at("settings")
        .at(0);
  };
  const auto at_224 = predicted(224), at_32 = predicted(32);
  EXPECT_GT(at_224.at("predicted_allocated_peak_bytes").get<int64_t>(),
            at_32.at("predicted_allocated_peak_bytes").get<int64_t>());
  EXPECT_LT(at_224.at("largest_batch").get<int64_t>(), at_32.at("largest_batch").get<int64_t>());
}

TEST(Cli, ReportRewritesTheReportOfARun) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  ASSERT_EQ(
      run_train("--config " + write_tiny_config(dir).string() + " --output-dir " + run.string())
          .code,
      0);
  EXPECT_TRUE(fs::exists(run / "report.md"));  // written at the end of the run
  fs::remove(run / "report.md");
  const auto r = run_train("report " + run.string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(test_support::read_text(run / "report.md").find("## Results"), std::string::npos);
  const auto bad = run_train("report " + (dir / "nothing").string());
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("nothing: not a folder"), std::string::npos) << bad.output;
}

TEST(Cli, ReportOfABrokenMetricsFileNamesTheLine) {
  test_support::TempDir dir;
  fs::create_directories(dir / "run");
  std::ofstream(dir / "run/.train-output")
      << "run " << training::output_format(training::OutputKind::Run) << "\n";
  std::ofstream(dir / "run/metrics.jsonl") << "{\"epoch\": 1}\n{broken\n";
  const auto r = run_train("report " + (dir / "run").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find((dir / "run/metrics.jsonl").string() + ": line 2 is not JSON"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "run/report.md"));
}

TEST(Cli, MatmulBenchMatchesTheFloat64Reference) {
  test_support::TempDir dir;
  const auto out = dir / "mm.json";
  const auto r = run_train(
      "bench matmul --size 64,200 --devices cpu,cuda --dtypes fp64,fp32,bf16 --repeats 2 "
      "--peak cpu:fp32=1000 --output " +
      out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("GFLOP/s"), std::string::npos);
  const auto results = nlohmann::json::parse(test_support::read_text(out));
  ASSERT_EQ(results.size(), 12u);
  const std::map<std::string, double> tolerance = {{"fp64", 1e-12}, {"fp32", 1e-5}, {"bf16", 3e-2}};
  for (const auto& row : results) {
    if (row.at("device") == "cuda" && !row.at("available").get<bool>()) {
      EXPECT_EQ(row.at("note").get<std::string>().rfind("not available: ", 0), 0u);
      continue;
    }
    const auto dtype = row.at("dtype").get<std::string>();
    EXPECT_LT(row.at("relative_error").get<double>(), tolerance.at(dtype)) << row.dump();
    EXPECT_GT(row.at("gflops").get<double>(), 0.0);
    EXPECT_GE(row.at("memory_bytes").get<int64_t>(),
              3 * row.at("size").get<int64_t>() * row.at("size").get<int64_t>());
    if (row.at("device") == "cpu" && dtype == "fp32") {
      EXPECT_EQ(row.at("peak_source"), "given");
    }
  }
}

TEST(Cli, MatmulBenchRefusesBadArguments) {
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--dtypes fp8", "--dtypes: expected fp64, fp32, bf16 or fp16, got 'fp8'"},
           {"--size 0", "--size: expected matrix sizes in [1, 65536], got '0'"},
           {"--devices tpu", "--devices: expected cpu, cuda or cuda:N, got 'tpu'"},
           // One rule for every list: each value once (round 5).
           {"--size 64,128,64", "--size: item 3 repeats item 1; list each value once"},
           {"--devices cpu,cpu", "--devices: item 2 repeats item 1; list each value once"},
           // One device however it is spelled: cuda is cuda:0, cuda:01 is cuda:1.
           {"--devices cuda,cuda:0", "--devices: item 2 repeats item 1; list each value once"},
           {"--devices cuda:1,cpu,cuda:01",
            "--devices: item 3 repeats item 1; list each value once"},
           {"--dtypes fp32,bf16,bf16", "--dtypes: item 3 repeats item 2; list each value once"},
           {"--peak cpu=5", "--peak: expected device:dtype=GFLOPS"},
           // A device and dtype's peak given twice: the last one won in silence.
           {"--size 64 --peak cpu:fp32=100 --peak cpu:fp32=200",
            "--peak: item 2 repeats item 1; list each value once"},
           // One device however it is spelled: cuda is cuda:0.
           {"--size 64 --peak cuda:bf16=100 --peak cuda:0:bf16=200",
            "--peak: item 2 repeats item 1; list each value once"}}) {
    const auto r = run_train("bench matmul " + flags + " --output /dev/null");
    EXPECT_EQ(r.code, 2) << flags;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
  }
}

TEST(Cli, ResumeOfNothingIsABadInput) {
  test_support::TempDir dir;
  const auto r = run_train("--resume " + (dir / "none").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("no checkpoint to resume from"), std::string::npos) << r.output;
}

TEST(Cli, SigintStopsWithACheckpointThatResumes) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  const std::string config = write_tiny_config(dir, 50).string();
  const std::string out_dir = run.string();
  const std::string log = (dir / "out.txt").string();
  cli::Background train({"--config", config, "--output-dir", out_dir}, log);
  ASSERT_GT(train.pid(), 0);

  // Wait until training is under way (a progress line for step 2 reached train.log).
  cli::wait_for_text(run / "train.log", "step 2/4", 120);
  train.signal(SIGINT);
  EXPECT_EQ(train.wait(), 130) << test_support::read_text(log);
  EXPECT_NE(test_support::read_text(log).find("stopped by signal"), std::string::npos)
      << test_support::read_text(log);
  EXPECT_TRUE(fs::exists(run / "checkpoint.pt"));

  const auto r = run_train("--resume " + run.string() + " --set training.epochs=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count_lines(test_support::read_text(run / "metrics.jsonl")), 2);
}

// TensorBoard's own reader finds every epoch column under its tag with the metrics.jsonl value, and
// the progress scalars at each log interval; a resumed run adds a second file whose steps continue
// without repeating any.
TEST(Cli, TensorBoardReadsEveryColumnAndAResumeRepeatsNoStep) {
  if (!training::tensorboard_built()) GTEST_SKIP() << "built without protobuf / Boost.CRC";
  test_support::TempDir dir;
  const auto run = dir / "run";
  auto r = run_train("--config " + write_tiny_config(dir, 2).string() + " --output-dir " +
                     run.string() + " --set training.max_steps=6");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_train("--resume " + run.string() + " --set training.max_steps=0");
  ASSERT_EQ(r.code, 0) << r.output;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(run)) {
    files += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(files, 2);

  r = cli::run_shell(std::string(TEST_PYTHON) + " " + PROJECT_SOURCE_DIR +
                     "/scripts/read_tensorboard.py " + run.string() + " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto scalars = nlohmann::json::parse(r.output);
  auto value_at = [&](const std::string& tag, int64_t step) -> std::optional<double> {
    if (!scalars.contains(tag)) return std::nullopt;
    for (const auto& point : scalars.at(tag)) {
      if (point.at(0).get<int64_t>() == step) return point.at(1).get<double>();
    }
    return std::nullopt;
  };
  std::ifstream in(run / "metrics.jsonl");
  int rows = 0;
  for (std::string line; std::getline(in, line); ++rows) {
    const auto record = training::epoch_record_from_json(nlohmann::json::parse(line), "metrics");
    for (const auto& [tag, value] : training::tensorboard_scalars(record)) {
      const auto seen = value_at(tag, record.step);
      ASSERT_TRUE(seen.has_value()) << tag << " at step " << record.step;
      EXPECT_NEAR(*seen, value, 1e-6 * std::max(1.0, std::abs(value))) << tag;
    }
    EXPECT_EQ(*value_at("test/accuracy", record.step), static_cast<float>(record.test_acc));
  }
  EXPECT_EQ(rows, 2);
  // log_every_steps 1, 4 steps per epoch, 8 steps: one progress point per step, none twice.
  for (const char* tag : {"train/loss", "train/accuracy", "train/lr", "train/images_per_second"}) {
    ASSERT_TRUE(scalars.contains(tag)) << tag;
    std::vector<int64_t> steps;
    for (const auto& point : scalars.at(tag)) steps.push_back(point.at(0).get<int64_t>());
    EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8})) << tag;
  }
}

// Two runs that differ in the batch size: the table names that key (and no output.* key), a column
// per run, and the plots are drawn.
TEST(Cli, CompareShowsWhatDiffersAndDrawsTheCurves) {
  test_support::TempDir dir;
  const std::string config = write_tiny_config(dir, 2).string();
  ASSERT_EQ(run_train("--config " + config + " --output-dir " + (dir / "b32").string()).code, 0);
  auto r = run_train("--config " + config + " --output-dir " + (dir / "b16").string() +
                     " --set training.batch_size=16");
  ASSERT_EQ(r.code, 0) << r.output;
  // What memory_format: auto decided is compared too (here made to differ: b16 as decided
  // otherwise; its checkpoint, whose record compare would show instead of an edited file, gone).
  fs::remove(dir / "b16/checkpoint.pt");
  auto decided = nlohmann::json::parse(test_support::read_text(dir / "b32/decisions.json"));
  const std::string b32_layout = decided.at("memory_format").at("layout");
  const std::string other = b32_layout == "contiguous" ? "channels_last" : "contiguous";
  decided["memory_format"]["layout"] = other;
  std::ofstream(dir / "b16/decisions.json") << decided.dump();
  // An older build's config.yaml held the sweep's keys, which are no run's: not compared.
  std::ofstream(dir / "b16/config.yaml", std::ios::app) << "sweep: {batch_sizes: [8, 9]}\n";
  r = run_train("compare " + (dir / "b32").string() + " " + (dir / "b16").string() + " --output " +
                (dir / "cmp").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string md = test_support::read_text(dir / "cmp/compare.md");
  EXPECT_NE(md.find("| | b32 | b16 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `training.batch_size` | 32 | 16 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `decided.training.memory_format` | " + b32_layout + " | " + other + " |"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("output."), std::string::npos) << md;
  EXPECT_EQ(md.find("sweep."), std::string::npos) << md;
  EXPECT_EQ(md.find("different models"), std::string::npos) << md;
  EXPECT_NE(md.find("| epochs | 2 | 2 |"), std::string::npos) << md;
  const auto json = nlohmann::json::parse(test_support::read_text(dir / "cmp/compare.json"));
  EXPECT_EQ(json.at("runs").size(), 2u);
  EXPECT_EQ(json.at("runs")[1].at("config").at("training.batch_size"), "16");
  for (const char* png : {"accuracy.png", "loss.png", "memory.png"}) {
    EXPECT_TRUE(fs::exists(dir / "cmp" / png))
        << png << ": " << test_support::read_text(dir / "cmp/plot.log");
  }
  // Fourteenth pass: metrics.jsonl cut by hand (its last row gone) was reported and compared as a
  // one-epoch run; with the checkpoint's two epochs done it is refused, as --resume refuses it.
  fs::copy(dir / "b32", dir / "cut", fs::copy_options::recursive);
  fs::remove(dir / "cut/train.lock");
  const std::string rows = test_support::read_text(dir / "b32/metrics.jsonl");
  std::ofstream(dir / "cut/metrics.jsonl") << rows.substr(0, rows.find('\n') + 1);
  for (const std::string& command :
       {"report " + (dir / "cut").string(),
        "compare " + (dir / "cut").string() + " --output " + (dir / "cmp-cut").string()}) {
    r = run_train(command);
    EXPECT_EQ(r.code, 2) << command << r.output;
    EXPECT_NE(r.output.find("cut/metrics.jsonl: holds 1 of the 2 epoch(s) its checkpoint has "
                            "done (removed or cut)"),
              std::string::npos)
        << r.output;
  }
  // Fifteenth pass: emptied, it was "a run with no epoch recorded yet ... continue it with:
  // --resume", which then refused it as this does.
  std::ofstream(dir / "cut/metrics.jsonl", std::ios::trunc).flush();
  r = run_train("report " + (dir / "cut").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("cut/metrics.jsonl: holds 0 of the 2 epoch(s) its checkpoint has done"),
            std::string::npos)
      << r.output;
  // Another model is compared all the same, and flagged.
  r = run_train("--config " + config + " --output-dir " + (dir / "rn50").string() +
                " --set model.arch=resnet50 --set training.epochs=1 --set "
                "training.memory_format=contiguous --set checkpointing.enabled=auto --set "
                "'checkpointing.blocks=[layer1.0]'");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_train("compare " + (dir / "b32").string() + " " + (dir / "rn50").string() + " --output " +
                (dir / "cmp2").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string md2 = test_support::read_text(dir / "cmp2/compare.md");
  EXPECT_NE(md2.find("different models"), std::string::npos);
  // A decision one run did not make (its layout given): "-" in the table, null in compare.json
  // (it was the table's "-" there too).
  EXPECT_NE(md2.find("| `decided.training.memory_format` | " + b32_layout + " | - |"),
            std::string::npos)
      << md2;
  const auto json2 = nlohmann::json::parse(test_support::read_text(dir / "cmp2/compare.json"));
  EXPECT_TRUE(json2.at("runs")[1].at("config").at("decided.training.memory_format").is_null())
      << json2.dump();
  EXPECT_EQ(json2.at("runs")[0].at("config").at("decided.training.memory_format"), b32_layout);
  // A key one run leaves unset (checkpointing.blocks: ~) likewise: it was YAML's "~" in both.
  EXPECT_NE(md2.find("| `checkpointing.blocks` | - | [layer1.0] |"), std::string::npos) << md2;
  EXPECT_TRUE(json2.at("runs")[0].at("config").at("checkpointing.blocks").is_null());
}

TEST(Cli, CompareRefusesBadInputInOneLine) {
  test_support::TempDir dir;
  ASSERT_EQ(run_train("--config " + write_tiny_config(dir).string() + " --output-dir " +
                      (dir / "run").string())
                .code,
            0);
  const std::string run = (dir / "run").string();
  struct Case {
    std::string arguments, message;
  };
  fs::create_directories(dir / "empty");
  for (const auto& c : std::vector<Case>{
           {"compare " + run + " " + (dir / "empty").string(),
            "empty: not a run written by train (no .train-output marker in it)"},
           {"compare " + run + " " + (dir / "nowhere").string(), "not a directory"}}) {
    const auto r = run_train(c.arguments + " --output " + (dir / "out").string());
    EXPECT_EQ(r.code, 2) << c.arguments << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "out"));
  ASSERT_EQ(run_train("compare " + run + " --output " + (dir / "out").string()).code, 0);
  const auto before = test_support::read_text(dir / "out/compare.md");
  const auto r = run_train("compare " + run + " --output " + (dir / "out").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("already holds a comparison"), std::string::npos) << r.output;
  EXPECT_EQ(test_support::read_text(dir / "out/compare.md"), before);
}

// 100,000 epochs of ResNet-18 outrun an hour on any CPU: the log says so once, after the warm-up
// and three steady steps, and training goes on until it is stopped.
TEST(Cli, ALongCpuRunIsProjectedInTheLogAndGoesOn) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  cli::Background train({"--config", write_tiny_config(dir).string(), "--output-dir", run.string(),
                         "--set", "training.epochs=100000"},
                        dir / "out.txt");
  ASSERT_GT(train.pid(), 0);
  ASSERT_TRUE(cli::wait_for_text(run / "train.log", "steps take about", 120));
  ASSERT_TRUE(cli::wait_for_text(run / "train.log", "step 3/4", 120));  // still training
  train.signal(SIGINT);
  EXPECT_EQ(train.wait(), 130);
  const auto log = test_support::read_text(run / "train.log");
  EXPECT_EQ(log.find("steps take about"), log.rfind("steps take about"));  // once
  EXPECT_NE(log.find("configs/quick_cpu.yaml"), std::string::npos);
}

// Thresholds a tiny run on random labels crosses (about 10%) and one it cannot (99%): the log says
// when each crossing happened, once, and the report lists every threshold.
TEST(Cli, TimeToAccuracyIsLoggedAndReported) {
  test_support::TempDir dir;
  const auto run = dir / "run";
  const auto r = run_train("--config " + write_tiny_config(dir, 2).string() + " --output-dir " +
                           run.string() + " --set training.accuracy_thresholds=[0.01,0.99]");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto log = test_support::read_text(run / "train.log");
  const auto at = log.find("time to accuracy: 1% test accuracy first reached in epoch 1 (step 4)");
  EXPECT_NE(at, std::string::npos) << log;
  EXPECT_EQ(log.find("time to accuracy: 1%", at + 1), std::string::npos) << log;  // once
  EXPECT_EQ(log.find("time to accuracy: 99%"), std::string::npos) << log;
  const auto report = test_support::read_text(run / "report.md");
  EXPECT_NE(report.find("| time to accuracy (training + evaluation) | 1%: "), std::string::npos)
      << report;
  EXPECT_NE(report.find("(epoch 1), 99%: not reached |"), std::string::npos) << report;
  EXPECT_EQ(
      run_train("--config " + write_tiny_config(dir).string() +
                " --set training.accuracy_thresholds=[1.5] --output-dir " + (dir / "bad").string())
          .code,
      2);
}

}  // namespace
