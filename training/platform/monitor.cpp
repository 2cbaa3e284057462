#include "training/platform/monitor.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <type_traits>

#include "training/platform/duration.h"
#include "training/platform/json_rows.h"

namespace training {

namespace fs = std::filesystem;

namespace {

class CpuProbe : public Probe {
 public:
  std::string device() const override { return "cpu"; }

  Sample read() override {
    Sample sample;
    const double now = monotonic();
    const double cpu = process_cpu_seconds();
    if (last_wall_ > 0 && now > last_wall_) {
      const double cores = static_cast<double>(usable_cpus());
      sample.utilization = std::min(1.0, (cpu - last_cpu_) / (now - last_wall_) / cores);
    }
    last_wall_ = now;
    last_cpu_ = cpu;
    std::ifstream statm("/proc/self/statm");
    int64_t size_pages = 0, resident_pages = 0;
    if (statm >> size_pages >> resident_pages)
      sample.memory_used = resident_pages * ::sysconf(_SC_PAGESIZE);
    sample.memory_total = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
    return sample;
  }

 private:
  static double monotonic() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // utime + stime of the whole process (all threads), from /proc/self/stat.
  static double process_cpu_seconds() {
    std::ifstream in("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');  // the command name may contain spaces
    if (close == std::string::npos) return 0;
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; fields >> field; ++i) {  // field 3 is the state
      if (i == 14) utime = std::stod(field);
      if (i == 15) {
        stime = std::stod(field);
        break;
      }
    }
    return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  }

  double last_wall_ = 0, last_cpu_ = 0;
};

// The few NVML entry points used, declared here so no NVML header is needed at build time.
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};
// nvmlMemory_v2_t: `used` leaves out the memory the driver reserves, as nvidia-smi shows it; the
// first version counts that reservation as used (about 600 MiB more on an H200).
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
constexpr unsigned int kNvmlMemoryV2Version = sizeof(NvmlMemoryV2) | (2u << 24);
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;
constexpr int kNvmlTemperatureGpu = 0;

class NvmlProbe : public Probe {
 public:
  NvmlProbe(void* library, std::string device)
      : library_(library), device_name_(std::move(device)) {}
  ~NvmlProbe() override {
    if (initialized_) shutdown_();
    ::dlclose(library_);
  }

  bool bind(const std::string& pci_bus_id, std::string* why_not) {
    // Required, the first five (nothing to sample without them); the rest optional (some drivers
    // and virtual GPUs lack power or clock readings): a missing one costs one column.
    auto find = [&](auto& entry, const char* name, bool required) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(::dlsym(library_, name));
      if (!entry && required && why_not->empty()) *why_not = std::string("NVML has no ") + name;
    };
    find(init_, "nvmlInit_v2", true);
    find(shutdown_, "nvmlShutdown", true);
    find(handle_by_bus_id_, "nvmlDeviceGetHandleByPciBusId_v2", true);
    find(utilization_, "nvmlDeviceGetUtilizationRates", true);
    find(memory_, "nvmlDeviceGetMemoryInfo", true);
    find(memory_v2_, "nvmlDeviceGetMemoryInfo_v2", false);
    find(power_, "nvmlDeviceGetPowerUsage", false);
    find(clock_, "nvmlDeviceGetClockInfo", false);
    find(temperature_, "nvmlDeviceGetTemperature", false);
    if (!why_not->empty()) return false;
    if (init_() != kNvmlSuccess) return *why_not = "nvmlInit failed (no NVIDIA driver?)", false;
    initialized_ = true;
    if (handle_by_bus_id_(pci_bus_id.c_str(), &device_) != kNvmlSuccess) {
      return *why_not = "NVML has no GPU at PCI bus id " + pci_bus_id, false;
    }
    return true;
  }

  std::string device() const override { return device_name_; }

  Sample read() override {
    Sample sample;
    NvmlUtilization utilization{};
    if (utilization_(device_, &utilization) == kNvmlSuccess)
      sample.utilization = utilization.gpu / 100.0;
    NvmlMemoryV2 memory_v2{};
    memory_v2.version = kNvmlMemoryV2Version;
    NvmlMemory memory{};
    if (memory_v2_ && memory_v2_(device_, &memory_v2) == kNvmlSuccess) {
      sample.memory_used = static_cast<int64_t>(memory_v2.used);
      sample.memory_total = static_cast<int64_t>(memory_v2.total);
    } else if (memory_(device_, &memory) == kNvmlSuccess) {
      sample.memory_used = static_cast<int64_t>(memory.used);
      sample.memory_total = static_cast<int64_t>(memory.total);
    }
    unsigned value = 0;
    if (power_ && power_(device_, &value) == kNvmlSuccess) sample.power_watts = value / 1000.0;
    if (clock_ && clock_(device_, kNvmlClockSm, &value) == kNvmlSuccess)
      sample.sm_clock_mhz = value;
    if (temperature_ && temperature_(device_, kNvmlTemperatureGpu, &value) == kNvmlSuccess)
      sample.temperature_c = value;
    return sample;
  }

 private:
  void* library_;
  std::string device_name_;
  bool initialized_ = false;
  nvmlDevice_t device_ = nullptr;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*handle_by_bus_id_)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlReturn_t (*memory_v2_)(nvmlDevice_t, NvmlMemoryV2*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*clock_)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*temperature_)(nvmlDevice_t, int, unsigned*) = nullptr;
};

}  // namespace

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
}

std::unique_ptr<Probe> make_cpu_probe() {
  return std::make_unique<CpuProbe>();
}

std::unique_ptr<Probe> make_nvml_probe(const std::string& device, const std::string& pci_bus_id,
                                       const std::string& library, std::string* why_not) {
  why_not->clear();
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    *why_not = "cannot load " + library + " (" + ::dlerror() + ")";
    return nullptr;
  }
  auto probe = std::make_unique<NvmlProbe>(handle, device);
  if (!probe->bind(pci_bus_id, why_not)) return nullptr;
  return probe;
}

Sampler::Sampler(std::unique_ptr<Probe> probe, double period_seconds, fs::path file)
    : probe_(std::move(probe)), period_(period_seconds), file_(std::move(file)) {
  sample_now();  // the first sample before the thread starts, so it is never missed
  thread_ = std::thread([this] { loop(); });
}

Sampler::~Sampler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Sampler::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::duration<double>(period_), [&] { return stopping_; })) {
    record(probe_->read());
  }
}

void Sampler::sample_now() {
  std::lock_guard<std::mutex> lock(mutex_);
  record(probe_->read());
}

// Called with mutex_ held.
void Sampler::record(const Sample& sample) {
  nlohmann::ordered_json line = {{"time", wall_seconds()},
                                 {"epoch", epoch_.load()},
                                 {"step", step_.load()},
                                 {"device", probe_->device()},
                                 {"utilization", optional_json(sample.utilization)},
                                 {"memory_used_bytes", optional_json(sample.memory_used)},
                                 {"memory_total_bytes", optional_json(sample.memory_total)},
                                 {"power_watts", optional_json(sample.power_watts)},
                                 {"sm_clock_mhz", optional_json(sample.sm_clock_mhz)},
                                 {"temperature_c", optional_json(sample.temperature_c)}};
  // One write() per line with O_APPEND: a crash cannot leave half a line between two others.
  const std::string text = line.dump() + "\n";
  const int fd = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  int error = fd < 0 ? errno : 0;
  bool written = false;
  if (fd >= 0) {
    const ssize_t wrote = ::write(fd, text.data(), text.size());
    written = wrote == static_cast<ssize_t>(text.size());
    if (!written) error = wrote < 0 ? errno : ENOSPC;  // a short write: the device is full
    ::close(fd);
  }
  if (!written && !write_failed_) {  // once: the run goes on, its samples are not recorded
    write_failed_ = true;
    spdlog::warn("monitor: cannot write {} ({}): its device samples are not recorded",
                 file_.string(), std::strerror(error));
  }
  ++summary_.samples;
  if (sample.utilization) {
    utilization_sum_ += *sample.utilization;
    ++utilization_count_;
    summary_.utilization_mean = utilization_sum_ / static_cast<double>(utilization_count_);
    summary_.utilization_max =
        std::max(summary_.utilization_max.value_or(0.0), *sample.utilization);
  }
  if (sample.memory_used) {
    summary_.memory_used_max = std::max(summary_.memory_used_max.value_or(0), *sample.memory_used);
  }
}

SamplerSummary Sampler::take_summary() {
  std::lock_guard<std::mutex> lock(mutex_);
  SamplerSummary summary = summary_;
  summary_ = {};
  utilization_sum_ = 0;
  utilization_count_ = 0;
  return summary;
}

}  // namespace training
