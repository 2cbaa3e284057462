// `train memory --card NAME --snapshot FILE`: the card's predicted allocator in PyTorch's
// memory-snapshot format, read by PyTorch's own viewer (torch.cuda._memory_viz, where the build's
// Python has torch); its refusals; a stop while it is written.
#include "training/cards/card_snapshot.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "app/cli_support.h"
#include "test_support.h"
#include "training/platform/errors.h"
#include "training/studies/memory_report.h"

namespace training {
namespace {

namespace fs = std::filesystem;

fs::path snapshot_config(const test_support::TempDir& dir, int batch) {
  std::ofstream(dir / "memory.yaml") << "model: {arch: resnet18, stem: cifar}\n"
                                        "training: {device: cpu, batch_size: "
                                     << batch << ", memory_format: contiguous}\n";
  return dir / "memory.yaml";
}

// The build's Python, when it has torch: PyTorch's viewer is torch.cuda._memory_viz.
bool viewer_here() {
  return cli::run_shell(std::string(TEST_PYTHON) + " -c 'import torch.cuda._memory_viz'").code == 0;
}

// What PyTorch's viewer makes of `file`: its trace_plot and segment_plot pages are written, its
// `stats` accounting (segsum: every segment's blocks add up) and `trace` pass, and the segments'
// total bytes.
int64_t segments_total_as_pytorch_reads(const fs::path& file) {
  const std::string python = std::string(TEST_PYTHON) + " -W ignore ";
  for (const std::string plot : {"trace_plot", "segment_plot"}) {
    const fs::path page = file.string() + "." + plot + ".html";
    const auto r = cli::run_shell(python + "-m torch.cuda._memory_viz " + plot + " " +
                                  file.string() + " -o " + page.string());
    EXPECT_EQ(r.code, 0) << plot << ": " << r.output;
    EXPECT_GT(fs::exists(page) ? fs::file_size(page) : 0, 1000u) << plot;
  }
  const auto r =
      cli::run_shell(python +
                     "-c \"import pickle, sys; from torch.cuda import _memory_viz as v; "
                     "d = pickle.load(open(sys.argv[1], 'rb')); v.segsum(d); v.trace(d); "
                     "names = {e['frames'][0]['name'] for e in d['device_traces'][0]}; "
                     "assert 'step2 backward' in names, names; "
                     "print(sum(s['total_size'] for s in d['segments']))\" " +
                     file.string());
  EXPECT_EQ(r.code, 0) << r.output;
  return r.code == 0 ? std::stoll(r.output) : -1;
}

// On a T4 the step fits: the snapshot's segments are the predicted reserved peak. On a card of
// 1 GiB (253 MiB for the allocator) batch 128 does not fit: the prediction's figures are what the
// step needs, and the snapshot is drawn under that limit; two settings, a file each.
TEST(CardSnapshot, PyTorchsViewerReadsItAndItsSegmentsAreThePredictedReservedPeak) {
  if (!viewer_here()) {
    GTEST_SKIP() << TEST_PYTHON << " has no torch: PyTorch's viewer (torch.cuda._memory_viz) "
                 << "cannot be run here to read the snapshot";
  }
  test_support::TempDir dir;
  struct Case {
    std::string card, settings;
    int batch;
    std::vector<std::string> files;
  };
  for (const Case& c : {Case{"T4", "fp32", 8, {"card.pickle"}},
                        Case{"1GiB",
                             "fp32,fp32+checkpointing",
                             128,
                             {"card-fp32.pickle", "card-fp32+checkpointing.pickle"}}}) {
    MemoryRequest request;
    request.config_path = snapshot_config(dir, c.batch).string();
    request.settings = c.settings;
    request.card = c.card;
    request.card_only = true;
    request.output_dir = (dir / ("study-" + c.card)).string();
    request.snapshot = (dir / "card.pickle").string();
    std::ostringstream log;  // the line that says how to view it
    const auto previous = spdlog::default_logger();
    spdlog::set_default_logger(std::make_shared<spdlog::logger>(
        "captured", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
    const int code = memory_command(request);
    spdlog::set_default_logger(previous);
    ASSERT_EQ(code, kExitOk);
    // Sixteenth pass: the advised viewer command named a bare `python`, which had no torch; typed
    // back as the log gives it, it writes the page.
    std::smatch view;
    const std::string said = log.str();
    ASSERT_TRUE(std::regex_search(said, view, std::regex("view it with `([^`]*)`"))) << said;
    EXPECT_EQ(cli::run_shell(view[1].str()).code, 0) << view[1];
    std::ifstream in(dir / ("study-" + c.card) / "memory_breakdown.json");
    const auto settings = nlohmann::json::parse(in).at("settings");
    ASSERT_EQ(settings.size(), c.files.size());
    for (size_t i = 0; i < c.files.size(); ++i) {
      EXPECT_EQ(settings[i].at("fits").get<bool>(), c.card == "T4");
      EXPECT_EQ(segments_total_as_pytorch_reads(dir / c.files[i]),
                settings[i].at("predicted_reserved_peak_bytes").get<int64_t>())
          << c.card << " " << c.files[i];
    }
  }
}

// Refused in one line, exit 2, before anything is written: without --card, in a folder that does
// not exist, a folder in its place, a file that is no snapshot (a config).
TEST(CardSnapshot, BadPathsAndAMissingCardAreOneLineAndNothingIsWritten) {
  test_support::TempDir dir;
  const std::string memory = "memory --config " + snapshot_config(dir, 8).string() +
                             " --settings fp32 --output-dir " + (dir / "study").string() + " ";
  fs::create_directory(dir / "folder.pickle");
  const struct {
    std::string arguments, says;
  } cases[] = {
      {"--snapshot " + (dir / "s.pickle").string(),
       "--snapshot: draws the step predicted on a "
       "card; give the card with --card"},
      {"--card T4 --snapshot " + (dir / "missing" / "s.pickle").string(),
       "--snapshot: " + (dir / "missing").string() + " does not exist"},
      {"--card T4 --snapshot " + (dir / "folder.pickle").string(),
       "--snapshot: " + (dir / "folder.pickle").string() + " is a folder"},
      {"--card T4 --snapshot " + (dir / "memory.yaml").string(),
       "--snapshot: " + (dir / "memory.yaml").string() + " exists and is not a snapshot"},
      // A pickle of the user's own (protocol 2, {"w": [1]}) was replaced: only its first byte was
      // read.
      {"--card T4 --snapshot " + (dir / "mine.pickle").string(),
       "--snapshot: " + (dir / "mine.pickle").string() + " exists and is not a snapshot"},
  };
  const std::string mine(
      "\x80\x02}q\x00X\x01\x00\x00\x00wq\x01]q\x02K\x01"
      "as.",
      21);
  std::ofstream(dir / "mine.pickle", std::ios::binary) << mine;
  const std::string config_before = test_support::read_text(dir / "memory.yaml");
  for (const auto& c : cases) {
    const auto r = cli::run_train(memory + c.arguments);
    EXPECT_EQ(r.code, kExitBadInput) << r.output;
    EXPECT_EQ(cli::count_lines(r.output), 1) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "study")) << c.arguments;
    EXPECT_FALSE(fs::exists(dir / "s.pickle"));
  }
  EXPECT_EQ(test_support::read_text(dir / "memory.yaml"), config_before);
  EXPECT_EQ(test_support::read_text(dir / "mine.pickle"), mine);
  // Round 5: with several settings a folder was taken as the name to write beside (folder-fp32,
  // ...): refused as with one.
  const auto r = cli::run_train("memory --config " + (dir / "memory.yaml").string() +
                                " --settings fp32,fp32+channels_last --output-dir " +
                                (dir / "study").string() + " --card T4 --card-only --snapshot " +
                                (dir / "folder.pickle").string());
  EXPECT_EQ(r.code, kExitBadInput) << r.output;
  EXPECT_NE(r.output.find("--snapshot: " + (dir / "folder.pickle").string() + " is a folder"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir / "folder-fp32.pickle"));
  EXPECT_FALSE(fs::exists(dir / "study"));
  // Twelfth pass's review: beside a device or a pipe (/dev/null) the named files were made, in
  // /dev as root: refused with several settings (one setting is written into it).
  ASSERT_EQ(::mkfifo((dir / "pipe").c_str(), 0600), 0);
  const auto piped = cli::run_train("memory --config " + (dir / "memory.yaml").string() +
                                    " --settings fp32,fp32+channels_last --output-dir " +
                                    (dir / "study").string() +
                                    " --card T4 --card-only --snapshot " + (dir / "pipe").string());
  EXPECT_EQ(piped.code, kExitBadInput) << piped.output;
  EXPECT_NE(piped.output.find("--snapshot: " + (dir / "pipe").string() +
                              " is not a file, and with 2 settings"),
            std::string::npos)
      << piped.output;
  EXPECT_FALSE(fs::exists(dir / "pipe-fp32.pickle"));
  // Round 5, a sixth pass: inside the study's own --output-dir, existing and empty, the snapshot
  // was written among the study's files; refused before anything runs, naming both flags.
  fs::create_directory(dir / "empty");
  const auto own =
      cli::run_train("memory --config " + (dir / "memory.yaml").string() +
                     " --settings fp32 --output-dir " + (dir / "empty").string() +
                     " --card T4 --card-only --snapshot " + (dir / "empty/s.pickle").string());
  EXPECT_EQ(own.code, kExitBadInput) << own.output;
  EXPECT_EQ(cli::count_lines(own.output), 1) << own.output;
  EXPECT_NE(own.output.find("--snapshot: " + (dir / "empty/s.pickle").string() + " is inside " +
                            (dir / "empty").string() +
                            ", the folder --output-dir gives this command; give a path outside it"),
            std::string::npos)
      << own.output;
  EXPECT_TRUE(fs::is_empty(dir / "empty"));
}

// A stop (SIGINT) while the snapshot is written: the write finishes, then train exits 130 in one
// line; the file is whole and no temporary is left beside it.
TEST(CardSnapshot, AStopWhileItIsWrittenLeavesItWholeAndNoTemporary) {
  test_support::TempDir dir;
  const fs::path file = dir / "t4.pickle";
  const auto r = cli::run_shell("TRAIN_TEST_STOP_AT='card snapshot' " + std::string(TRAIN_BINARY) +
                                " memory --config " + snapshot_config(dir, 8).string() +
                                " --settings fp32 --card T4 --card-only --output-dir " +
                                (dir / "study").string() + " --snapshot " + file.string());
  EXPECT_EQ(r.code, kExitStopped) << r.output;
  EXPECT_NE(r.output.find("[stopped] by a signal (exit 130); nothing is half-written\n"),
            std::string::npos)
      << r.output;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".t4.pickle.tmp"), std::string::npos)
        << "a temporary was left: " << entry.path();
  }
  ASSERT_TRUE(fs::exists(file));
  const std::string pickled = test_support::read_text(file);
  ASSERT_GE(pickled.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(pickled[0]), 0x80);
  EXPECT_EQ(pickled.back(), '.');  // pickle's STOP: the last byte written
  if (viewer_here()) {
    EXPECT_GT(segments_total_as_pytorch_reads(file), 0);
  }
  // A snapshot train wrote is replaced by the next (the same command again).
  const auto again = cli::run_train("memory --config " + (dir / "memory.yaml").string() +
                                    " --settings fp32 --card T4 --card-only --output-dir " +
                                    (dir / "study2").string() + " --snapshot " + file.string());
  EXPECT_EQ(again.code, kExitOk) << again.output;
  // Fourteenth pass: the viewing command it advises split a path with a space or a quote; each
  // path is one shell word.
  fs::create_directories(dir / "snap dir");
  const fs::path odd = dir / "snap dir" / "it's.pickle";
  const auto quoted =
      cli::run_train("memory --config " + (dir / "memory.yaml").string() +
                     " --settings fp32 --card T4 --card-only --output-dir " +
                     (dir / "study3").string() + " --snapshot " + shell_word(odd.string()));
  EXPECT_EQ(quoted.code, kExitOk) << quoted.output;
  fs::path page = odd;
  page.replace_extension(".html");
  EXPECT_NE(quoted.output.find("trace_plot " + shell_word(odd.string()) + " -o " +
                               shell_word(page.string()) + "`"),
            std::string::npos)
      << quoted.output;
}

}  // namespace
}  // namespace training
