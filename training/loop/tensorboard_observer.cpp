#include "training/loop/tensorboard_observer.h"

#include <algorithm>
#include <iterator>

namespace training {

namespace {

// The scalars written at each log interval (the epoch's are tensorboard_scalars).
constexpr const char* kStepTags[] = {"train/loss", "train/accuracy", "train/lr",
                                     "train/images_per_second"};

bool is_step_tag(const std::string& tag) {
  return std::find(std::begin(kStepTags), std::end(kStepTags), tag) != std::end(kStepTags);
}

}  // namespace

TensorBoardObserver::TensorBoardObserver(const std::filesystem::path& run_dir)
    : run_dir_(run_dir), earlier_events_(last_event_step(run_dir) >= 0), events_(run_dir) {}

void TensorBoardObserver::on_fit_start(const TrainState& state, bool trains_on) {
  if (!earlier_events_) return;
  // A resumed run: TensorBoard drops the dead session's points from this step on, which this one
  // writes again; this step's own points stay, written again here, except a part-trained epoch's
  // evaluation when this run trains on (it replaces that row of metrics.jsonl).
  auto kept = scalars_at(run_dir_, state.step);
  if (state.batch_in_epoch > 0 && trains_on) {
    kept.erase(std::remove_if(kept.begin(), kept.end(),
                              [](const auto& scalar) { return !is_step_tag(scalar.first); }),
               kept.end());
  }
  events_.start_session(state.step);
  events_.add_scalars(state.step, kept);
  earlier_events_ = false;
}

void TensorBoardObserver::on_interval(const Interval& i) {
  events_.add_scalars(i.step, {{kStepTags[0], i.loss},
                               {kStepTags[1], i.accuracy},
                               {kStepTags[2], i.lr},
                               {kStepTags[3], i.images_per_second}});
  events_.flush();
}

void TensorBoardObserver::on_epoch_end(const EpochRecord& record) {
  events_.add_scalars(record.step, tensorboard_scalars(record));
  events_.flush();
}

}  // namespace training
