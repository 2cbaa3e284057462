// A long phase says it is still going, from a thread of its own (one long call is covered too):
// a line after kFirstLineSeconds (10 s), then every kEverySeconds (30 s), as loop/progress.h.
//
//   Heartbeat beat("evaluation", batches, "batches");   // "evaluation: 12/20 batches, 500 img/s
//   for (...) { ...; beat.advance(done, images); }      //  (12.3 s so far, about 0:08 left)"
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace training {

class Heartbeat {
 public:
  static constexpr double kFirstLineSeconds = 10.0;
  static constexpr double kEverySeconds = 30.0;

  // `total` units of `unit` to do (0: not known, the line says the time so far only).
  Heartbeat(std::string what, int64_t total = 0, std::string unit = "");
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // `done` units of `total` are done, `images` images so far (0: no rate in the line).
  void advance(int64_t done, int64_t images = 0);

  // The line for `done` of `total` after `seconds` (what the thread logs).
  static std::string line(const std::string& what, int64_t done, int64_t total,
                          const std::string& unit, int64_t images, double seconds);
  // For tests: the first line after `first` s, then every `every` s (0, 0: the defaults).
  static void set_intervals(double first, double every);

 private:
  void loop();

  std::string what_, unit_;
  int64_t total_;
  int64_t done_ = 0, images_ = 0;
  bool stopping_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace training
