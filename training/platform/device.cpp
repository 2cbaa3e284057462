#include "training/platform/device.h"

#include <ATen/Version.h>
#include <ATen/cpu/Utils.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <regex>

#include "build_config.h"
#include "training/platform/errors.h"

#ifdef TRAIN_WITH_CUDA
#include "training/platform/device_cuda.h"
// Returns cuda::call's result where `device` is a GPU.
#define ON_CUDA(device, call) \
  if ((device).is_cuda()) return cuda::call
#else
#define ON_CUDA(device, call) (void)(device)
#endif

namespace training {

std::string cuda_unavailable_reason(int64_t index) {
#ifndef TRAIN_WITH_CUDA
  return "this build uses a CPU-only LibTorch";
#endif
  if (!torch::cuda::is_available()) {
    return "no CUDA device is available on this machine (no GPU or no driver)";
  }
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (index >= count) return "this machine has " + std::to_string(count) + " CUDA device(s)";
  return "";
}

#ifndef TRAIN_WITH_CUDA
// Without CUDA there is no graph to capture (device_cuda.cpp holds the CUDA build's version).
struct DeviceGraph::State {};

DeviceGraph::DeviceGraph(const torch::Device& device) {
  throw UserError("CUDA graphs need a CUDA device; this run trains on " + device.str() +
                  " and this build uses a CPU-only LibTorch");
}
DeviceGraph::~DeviceGraph() = default;
void DeviceGraph::warm_up(const std::function<void()>& /*work*/) {}
void DeviceGraph::capture(const std::function<void()>& /*work*/) {}
void DeviceGraph::replay() {}
bool DeviceGraph::captured() const {
  return false;
}
int64_t DeviceGraph::pool_bytes() const {
  return 0;
}
int64_t DeviceGraph::stream_id() const {
  return 0;
}
#endif

std::optional<DeviceSpec> parse_device_spec(const std::string& text) {
  static const std::regex kGrammar("(auto)|(cpu)|cuda(:0*([0-9]{1,4}))?");
  std::smatch match;
  if (!std::regex_match(text, match, kGrammar)) return std::nullopt;
  if (match[1].matched) return DeviceSpec{DeviceSpec::Kind::Auto, 0};
  if (match[2].matched) return DeviceSpec{DeviceSpec::Kind::Cpu, 0};
  return DeviceSpec{DeviceSpec::Kind::Cuda, match[4].matched ? std::stoll(match[4].str()) : 0};
}

std::string device_spec_text(const std::string& text) {
  const auto spec = parse_device_spec(text);
  if (!spec || spec->kind != DeviceSpec::Kind::Cuda || text.find(':') == std::string::npos) {
    return text;
  }
  return "cuda:" + std::to_string(spec->index);
}

torch::Device resolve_device(const std::string& spec) {
  const auto parsed = parse_device_spec(spec);
  if (!parsed) {
    throw UserError("expected auto, cpu, cuda or cuda:<index>, got '" + spec + "'");
  }
  if (parsed->kind == DeviceSpec::Kind::Cpu) return torch::kCPU;
  if (parsed->kind == DeviceSpec::Kind::Auto) {
    return cuda_unavailable_reason(0).empty() ? torch::Device(torch::kCUDA, 0)
                                              : torch::Device(torch::kCPU);
  }
  const int64_t index = parsed->index;
  const std::string why = cuda_unavailable_reason(index);
  if (!why.empty()) {
    throw UserError("'" + spec + "' requested, but " + why + "; use cpu or auto instead");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

torch::Device rank_device(const torch::Device& configured, int64_t local_rank) {
  if (!configured.is_cuda()) return configured;
  const std::string why = cuda_unavailable_reason(local_rank);
  if (!why.empty()) {
    throw UserError("local rank " + std::to_string(local_rank) + " trains on cuda:" +
                    std::to_string(local_rank) + " (one GPU per local rank), but " + why +
                    "; start at most one process per GPU on each machine");
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

void make_current(const torch::Device& device) {
  ON_CUDA(device, make_current(device.index()));
}

std::string pci_bus_id(const torch::Device& device) {
  ON_CUDA(device, pci_bus_id(device.index()));
  return "";
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

std::string describe_device(const torch::Device& device) {
#ifdef TRAIN_WITH_CUDA
  if (device.is_cuda()) return device.str() + " (" + cuda::describe(device.index()) + ")";
#endif
  return device.str() + " (" + std::to_string(torch::get_num_threads()) + " threads)";
}

namespace {

// ", NAME=value" where the variable is set, else "".
std::string variable_text(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(", ") + name + "=" + value : "";
}

// /proc/cpuinfo's CPU model, read once.
const std::string& cpu_model_name() {
  static const std::string name = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    return cpu_model(cpuinfo);
  }();
  return name;
}

}  // namespace

std::string device_identity(const torch::Device& device) {
#ifdef TRAIN_WITH_CUDA
  if (device.is_cuda()) {
    return "cuda (" + cuda::describe(device.index()) + variable_text("CUBLAS_WORKSPACE_CONFIG") +
           ")";
  }
#endif
  return "cpu (" + cpu_model_name() + ", " + at::get_cpu_capability() + ", bf16 " +
         (cpu_has_native_bf16() ? "native" : "emulated") + variable_text("ONEDNN_MAX_CPU_ISA") +
         variable_text("DNNL_MAX_CPU_ISA") + ")";
}

std::string cpu_model(std::istream& cpuinfo) {
  std::string arm;  // the first processor's Arm fields, in the order they come
  for (std::string line; std::getline(cpuinfo, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) {
      if (!arm.empty()) break;  // the first processor's entry has ended
      continue;
    }
    const auto start = line.find_first_not_of(" \t", colon + 1);
    const std::string value = start == std::string::npos ? "" : line.substr(start);
    if (line.rfind("model name", 0) == 0 && !value.empty()) return value;
    for (const char* field : {"CPU implementer", "CPU part", "CPU variant", "CPU revision"}) {
      if (line.rfind(field, 0) == 0 && !value.empty())
        arm += (arm.empty() ? "" : ", ") + std::string(field) + " " + value;
    }
  }
  return arm.empty() ? "model unknown" : arm;
}

void set_cpu_threads(int64_t threads) {
  if (threads > 0) torch::set_num_threads(static_cast<int>(threads));
}

void set_cuda_math(bool cudnn_benchmark, bool allow_tf32) {
  at::globalContext().setBenchmarkCuDNN(cudnn_benchmark);
  at::globalContext().setAllowTF32CuBLAS(allow_tf32);
  at::globalContext().setAllowTF32CuDNN(allow_tf32);
}

void seed_everything(uint64_t seed) {
  torch::manual_seed(seed);  // also seeds every CUDA generator when CUDA is present
}

MemoryStats memory_stats(const torch::Device& device) {
  ON_CUDA(device, memory_stats(device.index()));
  return TrackingCpuAllocator::instance().stats();
}

void reset_peak_memory(const torch::Device& device) {
  ON_CUDA(device, reset_peak_memory(device.index()));
  TrackingCpuAllocator::instance().reset_peak();
}

void trace_allocations(const torch::Device& device, MemoryTimeline* timeline) {
  ON_CUDA(device, trace_allocations(device.index(), timeline));
  TrackingCpuAllocator::instance().set_timeline(timeline);
}

void check_memory_history_supported(const torch::Device& device) {
  if (!device.is_cuda()) {
    throw UserError("the allocator history is the CUDA caching allocator's; " + device.str() +
                    " has none (on the CPU, `train memory` draws the step's memory timeline)");
  }
}

void start_memory_history(const torch::Device& device, int64_t max_entries) {
  check_memory_history_supported(device);
#ifdef TRAIN_WITH_CUDA
  cuda::start_memory_history(device.index(), max_entries);
#endif
  (void)max_entries;
}

std::string memory_snapshot_pickle(const torch::Device& device) {
  check_memory_history_supported(device);
#ifdef TRAIN_WITH_CUDA
  return cuda::memory_snapshot_pickle();
#endif
  return {};
}

void stop_memory_history(const torch::Device& device) {
  check_memory_history_supported(device);
#ifdef TRAIN_WITH_CUDA
  cuda::stop_memory_history();
#endif
}

int64_t memory_outside_allocator(const torch::Device& device) {
  ON_CUDA(device, memory_outside_allocator(device.index()));
  return 0;
}

int64_t total_memory(const torch::Device& device) {
  ON_CUDA(device, total_memory(device.index()));
  return static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
}

void check_memory_limit(const torch::Device& device, int64_t bytes) {
  const int64_t total = total_memory(device);
  if (bytes > total) {
    const auto [asked, has] = format_bytes_apart(bytes, total);
    throw UserError(asked + " is more than " + device.str() + " has (" + has + ")");
  }
}

void set_memory_limit(const torch::Device& device, int64_t bytes) {
  check_memory_limit(device, bytes);
  const int64_t total = total_memory(device);
#ifdef TRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const double fraction =
        bytes > 0 ? static_cast<double>(bytes) / static_cast<double>(total) : 1.0;
    return cuda::set_memory_fraction(device.index(), fraction);
  }
#endif
  TrackingCpuAllocator::instance().set_limit(bytes);
}

bool is_out_of_memory_message(const std::string& message) {
  // Exactly the allocation failures: CUDA's own (cudaErrorMemoryAllocation), cuBLAS's and cuDNN's.
  // And memory.limit's on the CPU where another error carries it (a torch::data worker's rethrow).
  for (const char* marker : {"CUDA error: out of memory", "CUBLAS_STATUS_ALLOC_FAILED",
                             "CUDNN_STATUS_ALLOC_FAILED", "CPU out of memory (tracked)"}) {
    if (message.find(marker) != std::string::npos) return true;
  }
  return false;
}

bool is_out_of_memory(const std::exception& error) {
  return dynamic_cast<const c10::OutOfMemoryError*>(&error) ||
         dynamic_cast<const OutOfMemory*>(&error) || is_out_of_memory_message(error_line(error));
}

bool has_native_bf16(const std::unordered_map<std::string, c10::IValue>& capabilities) {
  for (const char* key : {"avx512_bf16", "amx_bf16"}) {
    const auto found = capabilities.find(key);
    if (found != capabilities.end() && found->second.isBool() && found->second.toBool())
      return true;
  }
  return false;
}

bool onednn_isa_has_bf16(const char* max_isa) {
  if (max_isa == nullptr || *max_isa == '\0') return true;
  std::string isa(max_isa);
  std::transform(isa.begin(), isa.end(), isa.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  for (const char* below :
       {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}) {
    if (isa == below) return false;
  }
  return true;
}

bool cpu_has_native_bf16() {
  static const bool native = [] {
    const char* max_isa = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (max_isa == nullptr) max_isa = std::getenv("DNNL_MAX_CPU_ISA");
    return has_native_bf16(at::cpu::get_cpu_capabilities()) && onednn_isa_has_bf16(max_isa);
  }();
  return native;
}

bool has_fast_bf16(const torch::Device& device) {
  ON_CUDA(device, compute_capability_major(device.index()) >= 8);
  return device.is_cpu() && cpu_has_native_bf16();
}

void check_bf16_supported(const torch::Device& device, const std::string& key) {
#ifdef TRAIN_WITH_CUDA
  if (device.is_cuda()) {
    const int major = cuda::compute_capability_major(device.index());
    if (major < 8) {
      throw UserError(key + ": bf16 needs a GPU of compute capability 8.0 or newer; " +
                      device.str() + " is " + std::to_string(major) + ".x (use fp16 or fp32)");
    }
  }
#endif
  (void)device, (void)key;
}

}  // namespace training

#undef ON_CUDA  // (unity builds)
