// data::Cifar10Dataset in a plain LibTorch program, the torch::data way:
//   build/cifar10_torch_data datasets/cifar10
// counts the training images of one shuffled, augmented epoch in batches of 128.
#include <torch/torch.h>

#include <iostream>

#include "data/torch_data.h"

int main(int argc, char** argv) {
  if (argc != 2) return std::cerr << "usage: cifar10_torch_data DATA_ROOT\n", 2;
  try {
    auto dataset = data::Cifar10Dataset(argv[1], data::SplitName::Train)
                       .map(data::RandomCropFlip(/*seed=*/0))
                       .map(data::cifar10_normalize())
                       .map(torch::data::transforms::Stack<>());
    auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
        std::move(dataset), torch::data::DataLoaderOptions().batch_size(128).workers(1));
    int64_t images = 0;
    for (auto& batch : *loader) images += batch.data.size(0);
    std::cout << images << " training images, " << (images + 127) / 128 << " batches\n";
  } catch (const data::DataError& e) {
    return std::cerr << e.what() << "\n", 2;  // the same one line as `train` prints
  }
  return 0;
}
