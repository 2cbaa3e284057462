// An in-process `nvidia-smi -l 1`: a thread appends a JSON line per period to <run>/gpu.jsonl
// (time, epoch, step) from NVML, dlopen'ed so the binary runs without it, or on the CPU from the
// process's CPU utilisation and RSS. Per-epoch summaries go into the epoch metrics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace training {

struct Sample {
  std::optional<double> utilization;    // 0..1: GPU busy fraction, or process CPU / usable_cpus()
  std::optional<int64_t> memory_used;   // bytes: NVML's used memory, or the process's RSS
  std::optional<int64_t> memory_total;  // bytes: the card's, or the machine's
  std::optional<double> power_watts;
  std::optional<double> sm_clock_mhz;
  std::optional<double> temperature_c;
};

class Probe {
 public:
  virtual ~Probe() = default;
  virtual std::string device() const = 0;  // "cuda:0" / "cpu"
  virtual Sample read() = 0;
};

// The process's CPU utilisation (CPU / wall time / usable_cpus(), since the last read), RSS.
std::unique_ptr<Probe> make_cpu_probe();
// The CPUs this process may run on: its affinity mask (not every CPU online: a process limited
// to some of them is busy when it keeps those busy).
int usable_cpus();

// NVML (`library`; tests pass a fake) for the GPU at `pci_bus_id` (NVML ignores
// CUDA_VISIBLE_DEVICES, so an index could name another GPU), labelled `device`. Power, SM clock and
// temperature where the library has them; nullptr and `why_not` without it, a required symbol
// (utilisation, memory) or the GPU.
std::unique_ptr<Probe> make_nvml_probe(const std::string& device, const std::string& pci_bus_id,
                                       const std::string& library, std::string* why_not);

struct SamplerSummary {
  int64_t samples = 0;
  std::optional<double> utilization_mean, utilization_max;
  std::optional<int64_t> memory_used_max;
};

class Sampler {
 public:
  // Samples `probe` every `period_seconds`, at once first, a whole line each appended to `file`.
  Sampler(std::unique_ptr<Probe> probe, double period_seconds, std::filesystem::path file);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Where training is, for the stamps (cheap: two atomic stores).
  void set_position(int64_t epoch, int64_t step) {
    epoch_.store(epoch);
    step_.store(step);
  }
  // Takes one sample now (also used at epoch ends, so short epochs get one).
  void sample_now();
  // What was sampled since the previous call.
  SamplerSummary take_summary();

 private:
  void loop();
  void record(const Sample& sample);

  std::unique_ptr<Probe> probe_;
  double period_;
  std::filesystem::path file_;
  std::atomic<int64_t> epoch_{0}, step_{0};
  std::mutex mutex_;  // guards the probe, the file and the summary
  std::condition_variable wake_;
  bool stopping_ = false;
  bool write_failed_ = false;  // said once: the run goes on without its samples
  SamplerSummary summary_;
  double utilization_sum_ = 0;
  int64_t utilization_count_ = 0;
  std::thread thread_;
};

}  // namespace training
