/* A stand-in for libnvidia-ml.so.1 with fixed readings, for the sampler's tests. Two GPUs, found
 * by PCI bus id as a real driver numbers them: 0000:3B:00.0 uses 1 GiB, 0000:5E:00.0 uses 2 GiB.
 * The driver reserves 256 MiB more: nvmlDeviceGetMemoryInfo counts it as used, as real drivers do,
 * nvmlDeviceGetMemoryInfo_v2 reports it apart (nvidia-smi's figure is the second's `used`).
 * Set FAKE_NVML_FAIL_INIT=1 to make nvmlInit_v2 fail like a machine without a driver. Built a
 * second time with FAKE_NVML_MINIMAL: no power, clock, temperature or memory-v2 entry points, like
 * older drivers (and virtual GPUs) that lack them. */
#include <stdlib.h>
#include <string.h>

typedef struct {
  unsigned int gpu, memory;
} Utilization;
typedef struct {
  unsigned long long total, free, used;
} Memory;
typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} MemoryV2;

static const unsigned long long kReserved = 256ULL << 20;
static unsigned long long used_by(void* device) {
  return device == (void*)0x1 ? 1ULL << 30 : 2ULL << 30;
}

int nvmlInit_v2(void) {
  return getenv("FAKE_NVML_FAIL_INIT") ? 9 : 0;
}
int nvmlShutdown(void) {
  return 0;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  /* NVML accepts 4- and 8-digit PCI domains. */
  if (!strcmp(bus_id, "0000:3B:00.0") || !strcmp(bus_id, "00000000:3B:00.0")) {
    *device = (void*)0x1;
    return 0;
  }
  if (!strcmp(bus_id, "0000:5E:00.0") || !strcmp(bus_id, "00000000:5E:00.0")) {
    *device = (void*)0x2;
    return 0;
  }
  return 6; /* NVML_ERROR_NOT_FOUND */
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  u->gpu = device == (void*)0x1 ? 42 : 7;
  u->memory = 17;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
  m->total = 80ULL << 30;
  m->used = used_by(device) + kReserved;
  m->free = m->total - m->used;
  return 0;
}
#ifndef FAKE_NVML_MINIMAL
int nvmlDeviceGetMemoryInfo_v2(void* device, MemoryV2* m) {
  if (m->version != (sizeof(MemoryV2) | (2u << 24)))
    return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
  m->total = 80ULL << 30;
  m->reserved = kReserved;
  m->used = used_by(device);
  m->free = m->total - m->reserved - m->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  (void)device;
  *milliwatts = 300000;
  return 0;
}
int nvmlDeviceGetClockInfo(void* device, int type, unsigned int* mhz) {
  (void)device;
  *mhz = type == 1 ? 1980 : 0;
  return 0;
}
int nvmlDeviceGetTemperature(void* device, int sensor, unsigned int* celsius) {
  (void)device, (void)sensor;
  *celsius = 55;
  return 0;
}
#endif
