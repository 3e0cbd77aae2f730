#include <random>
#include <string>

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include "ipc/frame.h"
#include "ipc/proto_utf8.h"

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

// Random streams, most of them valid frames with a bit flipped, cut short or followed by
// junk, some pure junk: each next() yields an envelope that round-trips, asks for more bytes
// holding less than one frame, or fails with a reason and stays failed. All three outcomes
// must occur, or the decoder accepts (or rejects) everything.
TEST(Frame, RandomStreamsDecodeOrFailWithAReason) {
  constexpr uint32_t kLimit = 1 << 16;
  google::protobuf::LogSilencer quiet;  // flipped bits make invalid UTF-8, which protobuf logs
  std::mt19937 rng(99);
  int decoded = 0;
  int need_more = 0;
  int failed = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string stream;
    if (i % 4 != 3) {
      for (int frames = 1 + rng() % 3; frames > 0; --frames) {
        stream += encodeFrame(helloEnvelope(std::string(rng() % 200, 'c'))).value();
      }
      switch (rng() % 3) {
        case 0:
          stream[rng() % stream.size()] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:
          stream.resize(rng() % stream.size());
          break;
        default:
          for (int n = rng() % 300; n > 0; --n) stream += static_cast<char>(rng());
      }
    } else {
      stream.resize(rng() % 300);
      for (char& c : stream) c = static_cast<char>(rng());
    }
    FrameDecoder d(kLimit);
    d.append(stream.data(), stream.size());
    for (int k = 0; k < 10; ++k) {
      auto e = d.next();
      if (!e.has_value()) {
        ++failed;
        EXPECT_EQ(e.error().code, ErrorCode::kProtocol);
        EXPECT_FALSE(e.error().message.empty());
        EXPECT_FALSE(d.next().has_value()) << "a failed decoder stays failed";
        break;
      }
      if (!e.value()) {
        ++need_more;
        EXPECT_LT(d.buffered(), kLimit + 4u) << "more than one partial frame held";
        break;
      }
      ++decoded;
      auto again = encodeFrame(*e.value());
      ASSERT_TRUE(again.has_value());
      FrameDecoder back;
      back.append(again->data(), again->size());
      auto round_trip = back.next();
      ASSERT_TRUE(round_trip.has_value() && round_trip.value());
      EXPECT_EQ(round_trip.value()->SerializeAsString(), e.value()->SerializeAsString());
    }
  }
  EXPECT_GT(decoded, 0);
  EXPECT_GT(need_more, 0);
  EXPECT_GT(failed, 0);
}

TEST(FrameDecoder, AStringFieldThatIsNotUtf8IsNamed) {
  // Issue 48: such a frame was "not a dumpd.v1 message", with no word of what to fix.
  v1::Envelope env;
  env.mutable_session_command()->mutable_trigger()->set_reason(std::string("ok \xff", 4));
  std::string bytes = env.SerializeAsString();
  const auto len = static_cast<uint32_t>(bytes.size());
  std::string frame(reinterpret_cast<const char*>(&len), 4);
  frame += bytes;
  FrameDecoder d;
  d.append(frame.data(), frame.size());
  auto e = d.next();
  ASSERT_FALSE(e.has_value());
  EXPECT_EQ(e.error().message, "frame of " + std::to_string(len) +
                                   " bytes: its string field dumpd.v1.Trigger.reason is not "
                                   "valid UTF-8 (protobuf strings must be)");
  // Bytes that are no message at all still say so.
  FrameDecoder junk;
  const std::string bad = std::string("\x03\0\0\0", 4) + "\xff\xff\xff";
  junk.append(bad.data(), bad.size());
  auto j = junk.next();
  ASSERT_FALSE(j.has_value());
  EXPECT_EQ(j.error().message, "frame of 3 bytes is not a dumpd.v1 message");
}

// Each string field a client sends, set to bytes that are not UTF-8 through the generated
// code, is named by invalidUtf8Field (its table in ipc/proto_utf8.cc follows the schema).
TEST(InvalidUtf8Field, NamesEveryStringFieldAClientSends) {
  const std::string bad("x\xff", 2);
  const auto envelope = [&](auto set) {
    v1::Envelope e;
    set(e);
    return invalidUtf8Field(WireMessage::kEnvelope, e.SerializeAsString());
  };
  const auto control = [&](auto set) {
    v1::Control c;
    set(c);
    return invalidUtf8Field(WireMessage::kControl, c.SerializeAsString());
  };
  EXPECT_EQ(envelope([&](v1::Envelope& e) { e.mutable_hello()->set_job_config(bad); }),
            "dumpd.v1.Hello.job_config");
  EXPECT_EQ(envelope([&](v1::Envelope& e) { e.mutable_hello()->set_producer_name(bad); }),
            "dumpd.v1.Hello.producer_name");
  EXPECT_EQ(envelope([&](v1::Envelope& e) { e.mutable_hello()->set_producer_version(bad); }),
            "dumpd.v1.Hello.producer_version");
  EXPECT_EQ(envelope([&](v1::Envelope& e) { e.mutable_hello()->set_device_target(bad); }),
            "dumpd.v1.Hello.device_target");
  EXPECT_EQ(envelope([&](v1::Envelope& e) { e.mutable_hello()->set_config_path(bad); }),
            "dumpd.v1.Hello.config_path");
  EXPECT_EQ(envelope([&](v1::Envelope& e) { e.mutable_hello()->set_ms_diagnostic_data_path(bad); }),
            "dumpd.v1.Hello.ms_diagnostic_data_path");
  EXPECT_EQ(envelope([&](v1::Envelope& e) { e.mutable_hello()->set_ms_format(bad); }),
            "dumpd.v1.Hello.ms_format");
  EXPECT_EQ(envelope([&](v1::Envelope& e) {
              e.mutable_session_command()->mutable_target()->set_net_name(bad);
            }),
            "dumpd.v1.SessionSelector.net_name");
  EXPECT_EQ(envelope([&](v1::Envelope& e) {
              e.mutable_session_command()->mutable_control()->set_iteration(bad);
            }),
            "dumpd.v1.ControlChange.iteration");
  EXPECT_EQ(control([&](v1::Control& c) { c.mutable_trigger()->set_reason(bad); }),
            "dumpd.v1.Trigger.reason");
  EXPECT_EQ(control([&](v1::Control& c) { c.mutable_execution_order()->add_op_names(bad); }),
            "dumpd.v1.ExecutionOrder.op_names");
  EXPECT_EQ(control([&](v1::Control& c) { c.mutable_kernel_args()->set_op_type(bad); }),
            "dumpd.v1.KernelArgs.op_type");
  EXPECT_EQ(control([&](v1::Control& c) { c.mutable_kernel_args()->set_op_name(bad); }),
            "dumpd.v1.KernelArgs.op_name");
  EXPECT_EQ(control([&](v1::Control& c) { (*c.mutable_kernel_args()->mutable_args())["k"] = bad; }),
            "dumpd.v1.KernelArgs.ArgsEntry.value");
  EXPECT_EQ(control([&](v1::Control& c) { c.mutable_constant()->set_data_id(bad); }),
            "dumpd.v1.Constant.data_id");
  // Bytes fields may hold anything; valid text is not named.
  EXPECT_EQ(control([&](v1::Control& c) { c.mutable_graph()->set_ir_text(bad); }), "");
  EXPECT_EQ(control([&](v1::Control& c) { c.mutable_trigger()->set_reason("ok"); }), "");
}

}  // namespace
}  // namespace dumpd::ipc
