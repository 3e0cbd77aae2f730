// DeviceApi over the CUDA runtime (linked statically: a kit needs no libcudart).
#include <cuda_runtime_api.h>

#include "base/mutex.h"
#include "client/device_api.h"
#include "client/device_copy.h"
#include "client/device_fingerprint.h"
#include "client/device_stats.h"

namespace dumpd::client {
namespace {

Error cudaError(const char* what, cudaError_t e) {
  return makeError(ErrorCode::kIo, std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                                       cudaGetErrorString(e) + ")");
}

Status check(const char* what, cudaError_t e) {
  if (e != cudaSuccess) return cudaError(what, e);
  return {};
}

class CudaDevice final : public DeviceApi {
 public:
  std::string name() const override { return "CUDA"; }

  Result<int> deviceCount() override {
    int n = 0;
    if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
      return cudaError("no usable CUDA device", e);
    }
    return n;
  }

  Result<int> setDevice(int device) override {
    int prev = 0;
    if (cudaError_t e = cudaGetDevice(&prev); e != cudaSuccess)
      return cudaError("cudaGetDevice", e);
    if (prev != device) {
      if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
        return cudaError("cudaSetDevice", e);
      }
    }
    return prev;
  }

  Result<void*> allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return cudaError("cudaMalloc", e);
    return p;
  }
  void free(void* p) override { (void)cudaFree(p); }

  Status registerHost(void* host, size_t bytes) override {
    // Portable: pinned for every device of the process (one ring serves them all); mapped:
    // the statistics kernels write their results straight into the record.
    return check("cudaHostRegister of the shared-memory ring",
                 cudaHostRegister(host, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  }
  void unregisterHost(void* host) override { (void)cudaHostUnregister(host); }
  Result<void*> hostDevicePointer(void* host) override {
    void* device = nullptr;
    if (cudaError_t e = cudaHostGetDevicePointer(&device, host, 0); e != cudaSuccess) {
      return cudaError("cudaHostGetDevicePointer of the shared-memory ring", e);
    }
    return device;
  }

  Result<StreamHandle> createStream() override {
    cudaStream_t s = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
      return cudaError("cudaStreamCreateWithFlags", e);
    }
    return static_cast<StreamHandle>(s);
  }
  void destroyStream(StreamHandle s) override {
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }

  Result<EventHandle> createEvent(bool blocking_sync) override {
    cudaEvent_t ev = nullptr;
    const unsigned flags = cudaEventDisableTiming | (blocking_sync ? cudaEventBlockingSync : 0);
    if (cudaError_t e = cudaEventCreateWithFlags(&ev, flags); e != cudaSuccess) {
      return cudaError("cudaEventCreateWithFlags", e);
    }
    return static_cast<EventHandle>(ev);
  }
  void destroyEvent(EventHandle e) override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(e)); }

  Status copyAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    return check("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                                    static_cast<cudaStream_t>(stream)));
  }
  Status snapshotAsync(void* dst, const void* src, size_t bytes, StreamHandle stream) override {
    return check("snapshot copy kernel",
                 launchDeviceCopy(dst, src, bytes, static_cast<cudaStream_t>(stream)));
  }
  uint64_t statisticsScratchBytes(uint64_t elements) override {
    return deviceStatisticsScratch(elements);
  }
  Status statisticsAsync(void* result, void* scratch, uint32_t* counter, const void* src,
                         uint64_t elements, DType dtype, StreamHandle stream) override {
    return check("statistics kernel",
                 launchDeviceStatistics(result, scratch, counter, src, elements, dtype,
                                        static_cast<cudaStream_t>(stream)));
  }
  Status fingerprintAsync(uint64_t* result, uint64_t* scratch, const void* src, uint64_t bytes,
                          StreamHandle stream) override {
    return check(
        "replica digest kernel",
        launchDeviceFingerprint(result, scratch, src, bytes, static_cast<cudaStream_t>(stream)));
  }
  Result<uint32_t*> counterWords(size_t count) override {
    void* p = nullptr;
    const size_t bytes = count * sizeof(uint32_t);
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return cudaError("cudaMalloc", e);
    if (cudaError_t e = cudaMemset(p, 0, bytes); e != cudaSuccess) {
      (void)cudaFree(p);
      return cudaError("cudaMemset", e);
    }
    return static_cast<uint32_t*>(p);
  }
  Status recordEvent(EventHandle e, StreamHandle stream) override {
    return check("cudaEventRecord",
                 cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(stream)));
  }
  Status streamWaitEvent(StreamHandle stream, EventHandle e) override {
    return check("cudaStreamWaitEvent", cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                                            static_cast<cudaEvent_t>(e), 0));
  }
  Status waitEvent(EventHandle e) override {
    return check("cudaEventSynchronize", cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
  }
  Result<int> pointerDevice(const void* p) override {
    cudaPointerAttributes a{};
    if (cudaError_t e = cudaPointerGetAttributes(&a, p); e != cudaSuccess) {
      return cudaError("cudaPointerGetAttributes", e);
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) {
      return makeError(ErrorCode::kInvalidArgument, "pointer is not CUDA device memory");
    }
    return a.device;
  }
};

// The process's one CUDA device API, made at the first call (or why there is none).
struct CudaDeviceSlot {
  Mutex mu;
  std::shared_ptr<DeviceApi> device GUARDED_BY(mu);
  std::string failure GUARDED_BY(mu);
};

}  // namespace

Result<std::shared_ptr<DeviceApi>> cudaDevice() {
  static CudaDeviceSlot slot;
  MutexLock lock(&slot.mu);
  if (slot.device) return slot.device;
  if (!slot.failure.empty()) return makeError(ErrorCode::kUnavailable, slot.failure);
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    slot.failure = std::string("CUDA tensors cannot be dumped here: ") +
                   (e != cudaSuccess ? std::string(cudaGetErrorString(e)) : "no CUDA device");
    return makeError(ErrorCode::kUnavailable, slot.failure);
  }
  slot.device = std::make_shared<CudaDevice>();
  return slot.device;
}

}  // namespace dumpd::client
