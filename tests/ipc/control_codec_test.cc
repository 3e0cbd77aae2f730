// ipc/control_codec.h: the control record layout the client writes and the daemon reads.
#include "ipc/control_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace dumpd::ipc {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> encode(const v1::Control& ctl, std::string_view payload) {
  const uint64_t bytes = ctl.ByteSizeLong();
  std::vector<std::byte> body(controlBodyBytes(bytes, payload.size()), std::byte{0x5a});
  std::byte* to = writeControl(body.data(), ctl, bytes);
  EXPECT_EQ(to - body.data(), static_cast<ptrdiff_t>(controlPayloadOffset(bytes)));
  std::memcpy(to, payload.data(), payload.size());
  return body;
}

TEST(ControlCodec, AMessageAndItsPayloadRoundTrip) {
  v1::Control ctl;
  ctl.mutable_constant()->set_data_id("w1");
  ctl.mutable_constant()->set_data_bytes(5);
  const std::vector<std::byte> body = encode(ctl, "hello");
  // The prefix: the message's length, then a zero reserved word; the payload 8-aligned.
  uint32_t len = 0;
  std::memcpy(&len, body.data(), 4);
  EXPECT_EQ(len, ctl.ByteSizeLong());
  EXPECT_EQ(body[4], std::byte{0});
  EXPECT_EQ(body[7], std::byte{0});
  EXPECT_EQ(controlPayloadOffset(len) % 8, 0u);

  auto view = readControl(body);
  ASSERT_TRUE(view) << view.error().message;
  v1::Control back;
  ASSERT_TRUE(back.ParseFromArray(view->message.data(), static_cast<int>(view->message.size())));
  EXPECT_EQ(back.constant().data_id(), "w1");
  ASSERT_TRUE(view->payload);
  EXPECT_EQ(
      std::string_view(reinterpret_cast<const char*>(view->payload->data()), view->payload->size()),
      "hello");
}

TEST(ControlCodec, NoPayloadIsAnEmptyOneWhenTheBodyReachesItsOffset) {
  v1::Control ctl;
  ctl.mutable_step()->set_iteration(7);
  auto view = readControl(encode(ctl, ""));
  ASSERT_TRUE(view);
  ASSERT_TRUE(view->payload);
  EXPECT_TRUE(view->payload->empty());
  // A body cut right after the message (no padding): no room for a payload at all.
  std::vector<std::byte> cut = encode(ctl, "");
  cut.resize(8 + ctl.ByteSizeLong());
  if (cut.size() % 8 != 0) {
    auto short_view = readControl(cut);
    ASSERT_TRUE(short_view);
    EXPECT_FALSE(short_view->payload);
  }
}

TEST(ControlCodec, MalformedBodiesAreNamed) {
  std::vector<std::byte> tiny(7);
  EXPECT_THAT(readControl(tiny).error().message, HasSubstr("shorter than 8 bytes"));
  std::vector<std::byte> body(16);
  const uint32_t len = 9;  // one byte more than the 8 after the prefix
  std::memcpy(body.data(), &len, 4);
  EXPECT_THAT(readControl(body).error().message, HasSubstr("runs past its record"));
}

}  // namespace
}  // namespace dumpd::ipc
