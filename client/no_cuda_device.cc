// cudaDevice() of a build without CUDA (DUMPD_CUDA=OFF, or no nvcc found).
#include "client/device_api.h"

namespace dumpd::client {

Result<std::shared_ptr<DeviceApi>> cudaDevice() {
  return makeError(ErrorCode::kUnavailable,
                   "CUDA tensors cannot be dumped: this dumpd client was built without CUDA "
                   "(configure with -DDUMPD_CUDA=ON and nvcc available)");
}

}  // namespace dumpd::client
