// The rules a client shares with the daemon: the socket path and backpressure names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "ipc/backpressure.h"
#include "ipc/backpressure_wire.h"
#include "ipc/socket_path.h"

namespace dumpd::ipc {
namespace {

using ::testing::HasSubstr;

TEST(ClientRulesTest, BackpressureNamesRoundTrip) {
  for (auto b : {Backpressure::kBlock, Backpressure::kDrop}) {
    EXPECT_EQ(*parseBackpressure(backpressureName(b)), b);
  }
  auto bad = parseBackpressure("Block");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("but got: Block"));
}

TEST(ClientRulesTest, BackpressureOnTheWireRoundTrips) {
  for (auto b : {Backpressure::kBlock, Backpressure::kDrop}) {
    EXPECT_EQ(backpressureFromWire(backpressureToWire(b)), b);
  }
  EXPECT_EQ(backpressureToWire(Backpressure::kDrop), v1::BACKPRESSURE_DROP);
  // The job did not choose (the daemon's default applies), or a value from a newer peer.
  EXPECT_EQ(backpressureFromWire(v1::BACKPRESSURE_DEFAULT), std::nullopt);
  EXPECT_EQ(backpressureFromWire(static_cast<v1::Backpressure>(77)), std::nullopt);
}

TEST(ClientRulesTest, ResolveSocketPath) {
  ::setenv("DUMPD_SOCKET", "/tmp/env.sock", 1);
  EXPECT_EQ(resolveSocketPath("/tmp/explicit.sock"), "/tmp/explicit.sock");
  EXPECT_EQ(resolveSocketPath(""), "/tmp/env.sock");
  ::setenv("DUMPD_SOCKET", "", 1);
  EXPECT_EQ(resolveSocketPath(""), "/run/dumpd/dumpd.sock");
  ::unsetenv("DUMPD_SOCKET");
  EXPECT_EQ(resolveSocketPath(""), "/run/dumpd/dumpd.sock");
}

}  // namespace
}  // namespace dumpd::ipc
