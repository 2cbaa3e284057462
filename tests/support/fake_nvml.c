/* A stand-in for libnvidia-ml.so.1 with fixed readings, for the sampler's tests. Set
 * FAKE_NVML_FAIL_INIT=1 to make nvmlInit_v2 fail like a machine without a driver. */
#include <stdlib.h>

typedef struct {
  unsigned int gpu, memory;
} Utilization;
typedef struct {
  unsigned long long total, free, used;
} Memory;

int nvmlInit_v2(void) {
  return getenv("FAKE_NVML_FAIL_INIT") ? 9 : 0;
}
int nvmlShutdown(void) {
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index != 0) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = (void*)0x1;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  (void)device;
  u->gpu = 42;
  u->memory = 17;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
  (void)device;
  m->total = 80ULL << 30;
  m->used = 1ULL << 30;
  m->free = m->total - m->used;
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
