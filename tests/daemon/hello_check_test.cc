#include "daemon/hello_check.h"

#include <gtest/gtest.h>

#include "ipc/frame.h"

namespace dumpd::daemon {
namespace {

v1::Hello validHello() {
  v1::Hello h;
  h.set_protocol_major(ipc::kProtocolMajor);
  h.set_job_config("{}");
  h.set_device_target("GPU");
  return h;
}

TEST(HelloCheck, AValidHelloPasses) { EXPECT_FALSE(checkHello(validHello(), 2).has_value()); }

TEST(HelloCheck, OtherProtocolVersionsAreRefusedByName) {
  v1::Hello h = validHello();
  h.set_protocol_major(1);
  auto e = checkHello(h, 2);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, v1::Error::UNSUPPORTED_VERSION);
  EXPECT_NE(e->message.find("protocol version 1 is not supported"), std::string::npos);
}

TEST(HelloCheck, ExactlyTwoDescriptors) {
  for (size_t n : {0u, 1u, 3u, 4u}) {
    auto e = checkHello(validHello(), n);
    ASSERT_TRUE(e.has_value()) << n;
    EXPECT_EQ(e->code, v1::Error::PROTOCOL);
    EXPECT_NE(e->message.find("needs 2 file descriptors"), std::string::npos);
  }
}

TEST(HelloCheck, OversizedFieldsAreRefused) {
  v1::Hello h = validHello();
  h.set_job_config(std::string(kMaxJobConfigBytes + 1, ' '));
  EXPECT_TRUE(checkHello(h, 2).has_value());
  h = validHello();
  h.set_producer_name(std::string(kMaxProducerBytes + 1, 'p'));
  EXPECT_TRUE(checkHello(h, 2).has_value());
  h = validHello();
  h.set_ms_diagnostic_data_path(std::string(kMaxPathBytes + 1, '/'));
  EXPECT_TRUE(checkHello(h, 2).has_value());
  h = validHello();
  h.set_job_config(std::string(kMaxJobConfigBytes, ' '));
  EXPECT_FALSE(checkHello(h, 2).has_value());
}

TEST(HelloCheck, UnknownDeviceTargetAndBackpressureAreRefused) {
  v1::Hello h = validHello();
  h.set_device_target("TPU");
  EXPECT_TRUE(checkHello(h, 2).has_value());
  h = validHello();
  h.set_backpressure(static_cast<v1::Backpressure>(7));
  EXPECT_TRUE(checkHello(h, 2).has_value());
}

}  // namespace
}  // namespace dumpd::daemon
