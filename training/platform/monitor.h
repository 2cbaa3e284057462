// An in-process `nvidia-smi -l 1`: a background thread samples the device every period and
// appends one JSON line per sample to <run>/gpu.jsonl, stamped with time, epoch and step.
// On CUDA the probe reads NVML, loaded at run time (dlopen of libnvidia-ml.so.1), so the binary
// runs where NVML is absent; on the CPU it reads the process's CPU utilisation and RSS, in the
// same format. Per-epoch summaries go into the epoch metrics.
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

// The process's CPU utilisation (CPU time / wall time / usable_cpus(), since the previous read)
// and RSS.
std::unique_ptr<Probe> make_cpu_probe();
// The CPUs this process may run on: its affinity mask (not every CPU online: a process limited
// to some of them is busy when it keeps those busy).
int usable_cpus();

// NVML for the GPU at PCI bus id `pci_bus_id` (device.h's pci_bus_id(): NVML numbers GPUs
// physically and ignores CUDA_VISIBLE_DEVICES, so an index would name the wrong GPU), labelled
// `device` ("cuda:0") in the samples, from `library` (default "libnvidia-ml.so.1"; a test can
// hand in a fake). Utilisation and memory are required; power, SM clock and temperature are read
// when the library has them. nullptr with the reason in `why_not` when the library, a required
// symbol or the GPU is unavailable.
std::unique_ptr<Probe> make_nvml_probe(const std::string& device, const std::string& pci_bus_id,
                                       const std::string& library, std::string* why_not);

struct SamplerSummary {
  int64_t samples = 0;
  std::optional<double> utilization_mean, utilization_max;
  std::optional<int64_t> memory_used_max;
};

class Sampler {
 public:
  // Samples `probe` every `period_seconds` (the first sample at once) into `file` (appended,
  // one whole line per sample).
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
  SamplerSummary summary_;
  double utilization_sum_ = 0;
  int64_t utilization_count_ = 0;
  std::thread thread_;
};

}  // namespace training
