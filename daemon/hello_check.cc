#include "daemon/hello_check.h"

#include <string>

#include "ipc/frame.h"

namespace dumpd::daemon {

std::optional<HelloError> checkHello(const v1::Hello& h, size_t fd_count) {
  const auto protocol = [](std::string m) {
    return std::optional<HelloError>(HelloError{v1::Error::PROTOCOL, std::move(m)});
  };
  if (h.protocol_major() != ipc::kProtocolMajor) {
    return HelloError{v1::Error::UNSUPPORTED_VERSION, "protocol version " +
                                                          std::to_string(h.protocol_major()) +
                                                          " is not supported; this dumpd speaks " +
                                                          std::to_string(ipc::kProtocolMajor)};
  }
  if (fd_count != kHelloFdCount) {
    return protocol("Hello needs 2 file descriptors (ring memfd, dump root), got " +
                    std::to_string(fd_count));
  }
  if (h.job_config().size() > kMaxJobConfigBytes) {
    return protocol("job config of " + std::to_string(h.job_config().size()) +
                    " bytes exceeds the limit of " + std::to_string(kMaxJobConfigBytes));
  }
  if (h.producer_name().size() > kMaxProducerBytes ||
      h.producer_version().size() > kMaxProducerBytes) {
    return protocol("producer name or version longer than " + std::to_string(kMaxProducerBytes) +
                    " bytes");
  }
  if (h.config_path().size() > kMaxPathBytes ||
      h.ms_diagnostic_data_path().size() > kMaxPathBytes) {
    return protocol("a path in the Hello is longer than " + std::to_string(kMaxPathBytes) +
                    " bytes");
  }
  if (h.ms_format().size() > 16) return protocol("ms_format longer than 16 bytes");
  const std::string& t = h.device_target();
  if (!t.empty() && t != "CPU" && t != "GPU" && t != "Ascend") {
    return protocol("device_target must be CPU, GPU or Ascend");
  }
  if (h.backpressure() != v1::BACKPRESSURE_DEFAULT && h.backpressure() != v1::BACKPRESSURE_BLOCK &&
      h.backpressure() != v1::BACKPRESSURE_DROP) {
    return protocol("unknown backpressure policy " + std::to_string(h.backpressure()));
  }
  return std::nullopt;
}

}  // namespace dumpd::daemon
