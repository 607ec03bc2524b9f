// A stand-in libnvidia-ml.so.1 for CPU machines: two GPUs with fixed readings, so the code
// that turns NVML's answers into the dashboard's GPU rows, /metrics' DCGM-exporter series and
// `trainbox smi`'s table runs in tests without a GPU (tests/integration/dashboard_gpu.py).
// Only the entry points those read; env/nvml.cpp treats every other one as absent (NVML
// answers NOT_SUPPORTED for many on real boards too). Layouts as nvml.h (API v11+).
#include <cstring>

extern "C" {

typedef int nvmlReturn_t;
struct nvmlDevice_st;
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;

static struct nvmlDevice_st {
  const char* name;
  const char* uuid;
  unsigned util_gpu, util_mem, temp_c, power_mw;
  unsigned long long mem_total, mem_used;
} gpus[2] = {
    {"NVIDIA H200 (stand-in)", "GPU-00000000-0000-0000-0000-000000000000", 37, 21, 51, 312500, 150754820096ULL,
     12884901888ULL},
    {"NVIDIA H200 (stand-in)", "GPU-11111111-1111-1111-1111-111111111111", 88, 64, 67, 655000, 150754820096ULL,
     103079215104ULL},
};

static int copy(char* out, unsigned n, const char* s) {
  if (std::strlen(s) + 1 > n) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
  std::memcpy(out, s, std::strlen(s) + 1);
  return 0;
}
nvmlReturn_t nvmlInit_v2(void) { return 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char* nvmlErrorString(nvmlReturn_t r) { return r == 0 ? "Success" : "Not Supported"; }
nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned n) { return copy(v, n, "580.95.05"); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char* v, unsigned n) { return copy(v, n, "13.580.95.05"); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  *v = 13000;
  return 0;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* n) {
  *n = 2;
  return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t* d) {
  if (i >= 2) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *d = &gpus[i];
  return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* s, unsigned n) { return copy(s, n, d->name); }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* s, unsigned n) { return copy(s, n, d->uuid); }
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  m->total = d->mem_total;
  m->used = d->mem_used;
  m->free = d->mem_total - d->mem_used;
  return 0;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  u->gpu = d->util_gpu;
  u->memory = d->util_mem;
  return 0;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned* t) {
  (void)sensor;
  *t = d->temp_c;
  return 0;
}
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned* mw) {
  *mw = d->power_mw;
  return 0;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major, int* minor) {
  (void)d;
  *major = 9;
  *minor = 0;
  return 0;
}
}  // extern "C"
