// A data-parallel worker for the equivalence test: K training steps of a small ResNet through the
// project's own pieces (process group, sharded loader, train_step with c10d's reducer), with
// BatchNorm in eval mode so per-rank batch statistics do not enter (the comparable mode). Rank 0
// (or the single process) saves the final parameters to argv[1]. With ACCUMULATE, each step is
// that many micro-batches of BATCH_PER_RANK; every rank prints "gradient reductions: N".
#include <torch/torch.h>

#include <iostream>

#include "data/dataset.h"
#include "data/loader.h"
#include "training/config/config.h"
#include "training/parts/setup.h"
#include "training/platform/distributed.h"
#include "training/step/optim.h"
#include "training/step/step.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: ddp_worker OUT.pt BATCH_PER_RANK STEPS [ACCUMULATE]\n";
    return 2;
  }
  const int64_t batch = std::stoll(argv[2]), steps = std::stoll(argv[3]);
  const int64_t accumulate = argc == 5 ? std::stoll(argv[4]) : 1;
  torch::set_num_threads(1);
  auto config = training::parse_config(
      "model: {arch: resnet18, stem: imagenet}\n"
      "data: {source: synthetic, synthetic_train_size: 256, augment: false}\n"
      "training: {device: cpu, seed: 7}\n"
      // A small rate: with BatchNorm frozen at its initial statistics, large steps make training
      // unstable, and instability would amplify rounding differences into real ones.
      "optimizer: {lr: 0.01, weight_decay: 5.0e-4}\n",
      "ddp_worker");
  const auto env = training::launch_env_from_environment();
  std::unique_ptr<training::ProcessGroup> group;
  if (env && env->world_size > 1)
    group = training::join_group(*env, config.distributed, torch::kCPU);

  auto options = config.data.dataset;
  options.synthetic_seed(7);
  data::BatchLoader loader(data::load_split(options, data::SplitName::Train),
                           data::LoaderOptions()
                               .batch_size(batch)
                               .augment(false)
                               .prefetch(0)
                               .seed(7)
                               .shard_index(group ? group->rank() : 0)
                               .shard_count(group ? group->world_size() : 1));
  // Rank 0's weights everywhere: perturb the others first so the broadcast has work to do.
  torch::manual_seed(group ? 1000 + group->rank() : 1000);
  models::ResNet model(config.model);
  if (!group || group->is_main()) {
    torch::manual_seed(7);
    model = models::ResNet(config.model);
  }
  if (group) group->broadcast_from_main(*model);
  model->eval();
  training::StepParts parts{model, training::make_sgd(*model, config.optimizer),
                            training::GradScaler(false, torch::kCPU), nullptr};
  auto averager = group ? group->gradient_averager(*model) : nullptr;
  loader.start_epoch(1);
  const auto step_options =
      training::StepOptions().averager(averager.get()).accumulate_steps(accumulate);
  for (int64_t step = 0; step < steps; ++step) {
    for (int64_t micro = 0; micro < accumulate; ++micro) {
      auto b = loader.next();
      training::train_step(parts, b->images, b->labels, step_options, micro);
    }
  }
  if (averager) std::cout << "gradient reductions: " << averager->reductions() << std::endl;
  if (!group || group->is_main()) {
    std::vector<torch::Tensor> params;
    for (const auto& p : model->parameters()) params.push_back(p.detach().clone());
    torch::save(params, argv[1]);
  }
  return 0;
}
