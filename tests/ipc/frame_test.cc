#include <random>
#include <string>

#include <gtest/gtest.h>

#include "ipc/frame.h"

namespace dumpd::ipc {
namespace {

v1::Envelope helloEnvelope(const std::string& config) {
  v1::Envelope env;
  env.mutable_hello()->set_protocol_major(1);
  env.mutable_hello()->set_rank(3);
  env.mutable_hello()->set_job_config(config);
  return env;
}

TEST(Frame, LengthPrefixIsLittleEndian) {
  auto f = encodeFrame(helloEnvelope("x"));
  ASSERT_TRUE(f.has_value());
  const std::string& s = f.value();
  const uint32_t n = static_cast<unsigned char>(s[0]) | static_cast<unsigned char>(s[1]) << 8 |
                     static_cast<unsigned char>(s[2]) << 16 |
                     static_cast<unsigned char>(s[3]) << 24;
  EXPECT_EQ(n, s.size() - 4);
}

TEST(Frame, DecodesFramesSplitAtEveryByte) {
  std::string stream = encodeFrame(helloEnvelope("a")).value() +
                       encodeFrame(helloEnvelope(std::string(1000, 'b'))).value();
  FrameDecoder d;
  int frames = 0;
  for (char c : stream) {
    d.append(&c, 1);
    auto e = d.next();
    ASSERT_TRUE(e.has_value());
    if (e.value()) {
      ++frames;
      EXPECT_EQ(e.value()->hello().rank(), 3u);
    }
  }
  EXPECT_EQ(frames, 2);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(Frame, OversizedLengthIsRejectedBeforeBuffering) {
  FrameDecoder d;
  const unsigned char prefix[4] = {0x01, 0x00, 0x00, 0x01};  // 16 MiB + 1
  d.append(prefix, 4);
  auto e = d.next();
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.error().message.find("exceeds the limit"), std::string::npos);
  EXPECT_FALSE(d.next().has_value()) << "a failed decoder stays failed";
}

TEST(Frame, GarbageIsAProtocolError) {
  FrameDecoder d;
  const unsigned char frame[] = {4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  d.append(frame, sizeof frame);
  auto e = d.next();
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().code, ErrorCode::kProtocol);
}

TEST(Frame, EncodeRefusesMessagesOverTheLimit) {
  auto f = encodeFrame(helloEnvelope(std::string(2000, 'x')), 1000);
  ASSERT_FALSE(f.has_value());
  EXPECT_EQ(f.error().code, ErrorCode::kResourceExhausted);
}

TEST(Frame, RandomStreamsNeverCrash) {
  std::mt19937 rng(99);
  for (int i = 0; i < 2000; ++i) {
    FrameDecoder d(1 << 16);
    std::string junk(rng() % 300, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    d.append(junk.data(), junk.size());
    for (int k = 0; k < 10; ++k) {
      auto e = d.next();
      if (!e.has_value() || !e.value()) break;
    }
  }
  SUCCEED();
}

}  // namespace
}  // namespace dumpd::ipc
