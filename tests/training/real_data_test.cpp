// The acceptance test on real data: configs/quick_cpu.yaml (ResNet-18, ImageNet stem, first
// 10,000 real training images, 4 epochs on CPU) must reach >= 45% top-1 on the first 2,000 real
// test images. A plain PyTorch loop reaches about 51% there.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "test_support.h"
#include "training/run/run_dir.h"
#include "training/train_command.h"

namespace {

TEST(RealData, QuickCpuConfigReaches45PercentTop1) {
  REAL_DATA_ROOT_OR_SKIP(root);
  test_support::TempDir dir;
  training::TrainRequest request;
  request.config_path = std::string(PROJECT_SOURCE_DIR) + "/configs/quick_cpu.yaml";
  request.overrides = {"data.root=" + root.string(), "data.source=images"};
  request.output_dir = (dir / "run").string();

  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(training::train_command(request), training::kExitOk);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::ifstream metrics(dir / "run/metrics.jsonl");
  std::string line, last;
  int rows = 0;
  while (std::getline(metrics, line)) last = line, ++rows;
  ASSERT_EQ(rows, 4);
  const auto final_row = nlohmann::json::parse(last);
  const double accuracy = final_row.at("test_acc").get<double>();
  std::cout << "real-data result: top-1 " << 100 * accuracy << "% on 2000 test images after 4 "
            << "epochs on 10000 train images, " << seconds << " s in all, "
            << final_row.at("images_per_second").get<double>() << " img/s in the last epoch\n";
  RecordProperty("top1_percent", std::to_string(100 * accuracy));
  EXPECT_GE(accuracy, 0.45);
}

}  // namespace
