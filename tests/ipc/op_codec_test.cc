#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "ipc/op_codec.h"

namespace dumpd::ipc {
namespace {

struct Encoded {
  std::vector<std::byte> body;
  std::vector<std::byte*> payloads;
};

Encoded encode(const OpSpec& op) {
  Encoded e;
  e.body.resize(opBodyBytes(op));
  e.payloads.resize(op.tensors.size());
  writeOpDescriptors(e.body.data(), op, e.payloads);
  return e;
}

TEST(OpCodec, RoundTripsNamesShapesFormatsAndPayloads) {
  const int64_t s0[] = {2, 3};
  TensorSpec t[2];
  t[0].io = 0;
  t[0].dtype = 10;
  t[0].slot = 1;
  t[0].shape = s0;
  t[0].format = "NCHW";
  t[0].timestamp_us = 123456789;
  t[0].data_bytes = 24;
  t[1].io = 1;
  t[1].dtype = 4;
  t[1].shape = {};  // scalar
  t[1].data_bytes = 8;
  OpSpec op;
  op.graph_id = 3;
  op.iteration = 42;
  op.task_id = 7;
  op.stream_id = 9;
  op.flags = kOpMarked;
  op.op_type = "Add";
  op.op_name = "Default/network/Add-op0";
  op.tensors = t;
  ASSERT_TRUE(checkOpSpec(op).has_value());
  Encoded e = encode(op);
  std::memset(e.payloads[0], 0x11, 24);
  std::memset(e.payloads[1], 0x22, 8);
  for (std::byte* p : e.payloads) {
    // Payloads are 64-byte aligned relative to the record start (body is at +32).
    EXPECT_EQ((p - e.body.data() + 32) % 64, 0);
  }

  DecodedOp d;
  ASSERT_TRUE(decodeOp(e.body.data(), e.body.size(), d).has_value());
  EXPECT_EQ(d.graph_id, 3u);
  EXPECT_EQ(d.iteration, 42u);
  EXPECT_EQ(d.task_id, 7u);
  EXPECT_EQ(d.stream_id, 9u);
  EXPECT_EQ(d.flags, kOpMarked);
  EXPECT_EQ(d.opType(), "Add");
  EXPECT_EQ(d.opName(), "Default/network/Add-op0");
  ASSERT_EQ(d.tensors.size(), 2u);
  EXPECT_EQ(d.tensors[0].io, 0);
  EXPECT_EQ(d.tensors[0].slot, 1u);
  EXPECT_EQ(d.tensors[0].timestamp_us, 123456789u);
  EXPECT_EQ(d.format(d.tensors[0]), "NCHW");
  ASSERT_EQ(d.shape(d.tensors[0]).size(), 2u);
  EXPECT_EQ(d.shape(d.tensors[0])[1], 3);
  EXPECT_EQ(d.shape(d.tensors[1]).size(), 0u);
  EXPECT_EQ(d.tensors[0].data_bytes, 24u);
  EXPECT_EQ(d.tensors[0].data[23], std::byte{0x11});
  EXPECT_EQ(d.tensors[1].data[0], std::byte{0x22});
}

TEST(OpCodec, CheckRejectsLimits) {
  TensorSpec t;
  std::vector<int64_t> dims(kMaxDims + 1, 1);
  t.shape = dims;
  OpSpec op;
  op.op_type = "A";
  op.op_name = "B";
  op.tensors = std::span<const TensorSpec>(&t, 1);
  EXPECT_FALSE(checkOpSpec(op).has_value());
  OpSpec empty = op;
  empty.tensors = {};
  EXPECT_FALSE(checkOpSpec(empty).has_value());
  std::string long_name(kMaxNameBytes + 1, 'x');
  OpSpec named = op;
  t.shape = {};
  named.op_name = long_name;
  EXPECT_FALSE(checkOpSpec(named).has_value());
}

TEST(OpCodec, StatisticsPayloadsRoundTripTheirKindAndAreExactlyOneStatsPayload) {
  const int64_t shape[] = {1000, 3};
  TensorSpec t[2];
  t[0].io = 0;
  t[0].shape = shape;
  t[0].data_bytes = 12000;
  t[1].io = 1;
  t[1].shape = shape;
  t[1].payload = PayloadKind::kStatistics;
  t[1].data_bytes = sizeof(StatsPayload);
  OpSpec op;
  op.op_type = "MatMul";
  op.op_name = "Default/MatMul-op2";
  op.tensors = t;
  ASSERT_TRUE(checkOpSpec(op).has_value());
  Encoded e = encode(op);
  StatsPayload p{};
  p.count = 3000;
  p.max = 2.5;
  std::memcpy(e.payloads[1], &p, sizeof p);
  DecodedOp d;
  ASSERT_TRUE(decodeOp(e.body.data(), e.body.size(), d).has_value());
  EXPECT_EQ(d.tensors[0].payload, PayloadKind::kBytes);
  EXPECT_EQ(d.tensors[0].io, 0);
  EXPECT_EQ(d.tensors[1].payload, PayloadKind::kStatistics);
  EXPECT_EQ(d.tensors[1].io, 1) << "the kind bits are not part of io";
  ASSERT_EQ(d.tensors[1].data_bytes, sizeof(StatsPayload));
  StatsPayload back;
  std::memcpy(&back, d.tensors[1].data, sizeof back);
  EXPECT_EQ(back.count, 3000u);
  EXPECT_EQ(back.max, 2.5);

  // A statistics payload of any other size is refused on both sides.
  t[1].data_bytes = sizeof(StatsPayload) + 8;
  EXPECT_FALSE(checkOpSpec(op).has_value());
  Encoded wrong = encode(op);
  auto s = decodeOp(wrong.body.data(), wrong.body.size(), d);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("statistics payload"), std::string::npos) << s.error().message;
}

TEST(OpCodec, AStatisticsPayloadCountsExactlyTheTensorsElementsAndHasNoReservedBits) {
  StatsPayload p{};
  p.count = 6;
  p.nan = 1;
  p.negative_inf = 1;
  p.negative = 3;
  p.positive = 2;
  p.zero = 1;
  EXPECT_EQ(statsPayloadProblem(p, 6), "");
  EXPECT_EQ(statsPayloadProblem(p, 7), "counts 6 elements of 7");
  StatsPayload wrap = p;
  wrap.nan = wrap.negative_inf = uint64_t{1} << 63;  // nan + negative_inf wraps to 0
  EXPECT_EQ(statsPayloadProblem(wrap, 6), "counts 9223372036854775808 nan elements of 6");
  for (uint64_t StatsPayload::*field : {&StatsPayload::positive_inf, &StatsPayload::zero,
                                        &StatsPayload::negative, &StatsPayload::positive}) {
    StatsPayload over = p;
    over.*field = 7;
    EXPECT_NE(statsPayloadProblem(over, 6).find("counts 7 "), std::string::npos);
  }
  StatsPayload flagged = p;
  flagged.flags = kStatsAverage;
  EXPECT_EQ(statsPayloadProblem(flagged, 6), "");
  flagged.flags = 2;
  EXPECT_EQ(statsPayloadProblem(flagged, 6), "has unknown flags 2");
}

TEST(OpCodec, SameAsReferencesAndMemoFlagsRoundTrip) {
  const int64_t shape[] = {8, 2};
  TensorSpec t[3];
  t[0].io = 0;
  t[0].shape = shape;
  t[0].payload = PayloadKind::kSame;
  t[0].data_bytes = sizeof(SamePayload);
  t[1].io = 1;
  t[1].shape = shape;
  t[1].memo = true;
  t[1].data_bytes = 64;
  t[2].io = 1;
  t[2].shape = shape;
  t[2].data_bytes = 64;
  OpSpec op;
  op.op_type = "Add";
  op.op_name = "Default/Add-op1";
  op.tensors = t;
  ASSERT_TRUE(checkOpSpec(op).has_value());
  Encoded e = encode(op);
  const SamePayload ref{41, 3, 0};
  std::memcpy(e.payloads[0], &ref, sizeof ref);
  DecodedOp d;
  ASSERT_TRUE(decodeOp(e.body.data(), e.body.size(), d).has_value());
  EXPECT_EQ(d.tensors[0].payload, PayloadKind::kSame);
  EXPECT_EQ(d.tensors[0].io, 0);
  EXPECT_FALSE(d.tensors[0].memo);
  EXPECT_TRUE(d.tensors[1].memo);
  EXPECT_EQ(d.tensors[1].io, 1) << "the memo bit is not part of io";
  EXPECT_FALSE(d.tensors[2].memo);
  SamePayload back;
  std::memcpy(&back, d.tensors[0].data, sizeof back);
  EXPECT_EQ(back.sequence, 41u);
  EXPECT_EQ(back.tensor, 3u);

  t[0].data_bytes = sizeof(SamePayload) - 8;
  EXPECT_FALSE(checkOpSpec(op).has_value());
  Encoded wrong = encode(op);
  auto s = decodeOp(wrong.body.data(), wrong.body.size(), d);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("same-as payload"), std::string::npos) << s.error().message;
}

TEST(OpCodec, UnknownPayloadKindsAndStrayIoBitsAreRejected) {
  const int64_t shape[] = {4};
  TensorSpec t;
  t.shape = shape;
  t.data_bytes = 16;
  OpSpec op;
  op.op_type = "Relu";
  op.op_name = "n";
  op.tensors = std::span<const TensorSpec>(&t, 1);
  // The io byte of tensor 0 is the first byte of its descriptor: body offset 32 + 8.
  // 0x08: "found a NaN" without "looked"; 0x1d: scan bits on a statistics payload.
  for (uint8_t io : {uint8_t{0x08}, uint8_t{0x1d}, uint8_t{0x41}, uint8_t{0xf0}}) {
    Encoded e = encode(op);
    std::memcpy(e.body.data() + 40, &io, 1);
    DecodedOp d;
    auto s = decodeOp(e.body.data(), e.body.size(), d);
    ASSERT_FALSE(s.has_value()) << "io byte " << int{io};
    EXPECT_NE(s.error().message.find("io value"), std::string::npos);
  }
  // Kind 3 (kept on the device) is known, but its payload starts with a 128-byte header.
  Encoded e = encode(op);
  const uint8_t deferred = 0x31;
  std::memcpy(e.body.data() + 40, &deferred, 1);
  DecodedOp d;
  auto s = decodeOp(e.body.data(), e.body.size(), d);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().message.find("io value"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("deferred payload of tensor 0 is 16 bytes"), std::string::npos)
      << s.error().message;
}

TEST(OpCodec, TheProducersNonFiniteScanRoundTripsThroughTheIoByte) {
  const int64_t shape[] = {4};
  TensorSpec t[2];
  for (TensorSpec& x : t) {
    x.shape = shape;
    x.data_bytes = 16;
  }
  OpSpec op;
  op.op_type = "Relu";
  op.op_name = "n";
  op.tensors = t;
  std::vector<std::byte> body(opBodyBytes(op));
  std::byte* payloads[2];
  std::byte* descriptors[2];
  writeOpDescriptors(body.data(), op, payloads, descriptors);
  DecodedOp d;
  ASSERT_TRUE(decodeOp(body.data(), body.size(), d).has_value());
  EXPECT_FALSE(d.tensors[0].checked);
  EXPECT_FALSE(d.tensors[1].checked);
  *descriptors[0] |= std::byte{kCheckedBit};
  *descriptors[1] |= std::byte{kCheckedBit | kNonFiniteBit};
  auto s = decodeOp(body.data(), body.size(), d);
  ASSERT_TRUE(s.has_value()) << s.error().message;
  EXPECT_TRUE(d.tensors[0].checked);
  EXPECT_FALSE(d.tensors[0].non_finite);
  EXPECT_TRUE(d.tensors[1].checked);
  EXPECT_TRUE(d.tensors[1].non_finite);
  EXPECT_EQ(d.tensors[1].io, 1u);  // the scan bits are not the io
  EXPECT_EQ(d.tensors[1].payload, PayloadKind::kBytes);
}

TEST(OpCodec, TruncatedBodiesAreRejected) {
  const int64_t shape[] = {4};
  TensorSpec t;
  t.shape = shape;
  t.data_bytes = 16;
  OpSpec op;
  op.op_type = "Relu";
  op.op_name = "Default/Relu-op1";
  op.tensors = std::span<const TensorSpec>(&t, 1);
  Encoded e = encode(op);
  DecodedOp d;
  for (size_t n = 0; n < e.body.size(); ++n) {
    EXPECT_FALSE(decodeOp(e.body.data(), n, d).has_value()) << "length " << n;
  }
  EXPECT_TRUE(decodeOp(e.body.data(), e.body.size(), d).has_value());
}

TEST(OpCodec, PayloadOffsetOutsideRecordIsRejected) {
  const int64_t shape[] = {4};
  TensorSpec t;
  t.shape = shape;
  t.data_bytes = 16;
  OpSpec op;
  op.op_type = "Relu";
  op.op_name = "n";
  op.tensors = std::span<const TensorSpec>(&t, 1);
  Encoded e = encode(op);
  // data_offset of tensor 0 sits at body offset 32 (OpHeader) + 8 (names) + 16.
  uint64_t huge = ~0ull - 4;
  std::memcpy(e.body.data() + 32 + 8 + 16, &huge, sizeof huge);
  DecodedOp d;
  auto s = decodeOp(e.body.data(), e.body.size(), d);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("runs past the record"), std::string::npos);
}

// Checks what decodeOp promises for a body it accepted: limits hold and every view (names,
// shapes, formats, payloads) lies inside the decoded copy or [body, body + n).
void expectDecodedWithinBody(const DecodedOp& d, const std::byte* body, size_t n) {
  EXPECT_EQ(d.opType().size(), d.op_type_len);
  EXPECT_EQ(d.opName().size(), d.op_name_len);
  EXPECT_LE(d.op_type_len, kMaxNameBytes);
  EXPECT_LE(d.op_name_len, kMaxNameBytes);
  ASSERT_GE(d.tensors.size(), 1u);
  ASSERT_LE(d.tensors.size(), kMaxTensorsPerRecord);
  for (const DecodedTensor& t : d.tensors) {
    EXPECT_LE(t.io, 1);
    EXPECT_LE(t.ndim, kMaxDims);
    EXPECT_EQ(d.shape(t).size(), t.ndim);
    for (int64_t dim : d.shape(t)) EXPECT_GE(dim, 0);
    EXPECT_EQ(d.format(t).size(), t.format_len);
    EXPECT_LE(t.format_len, kMaxFormatBytes);
    EXPECT_GE(t.data, body);
    EXPECT_LE(t.data, body + n);
    EXPECT_LE(t.data_bytes, static_cast<uint64_t>(body + n - t.data));
  }
}

// Random bodies, half of them a valid record with a few bits flipped or cut short, half
// random bytes with a plausible header: each is either decoded within its bounds or rejected
// with a reason. Both outcomes must occur, or the decoder accepts (or rejects) everything.
TEST(OpCodec, CorruptBodiesAreDecodedWithinBoundsOrRejectedWithAReason) {
  const int64_t s0[] = {2, 3};
  const int64_t s1[] = {4};
  TensorSpec t[2];
  t[0].io = 0;
  t[0].shape = s0;
  t[0].format = "NCHW";
  t[0].data_bytes = 24;
  t[1].shape = s1;
  t[1].data_bytes = 16;
  OpSpec op;
  op.op_type = "MatMul";
  op.op_name = "Default/fc1-Dense/MatMul-op3";
  op.tensors = t;
  const Encoded valid = encode(op);

  std::mt19937_64 rng(1234);
  DecodedOp d;
  int decoded = 0;
  int rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::byte> buf;
    if (i % 2 == 0) {
      buf = valid.body;
      for (int flips = 1 + rng() % 3; flips > 0; --flips) {
        buf[rng() % buf.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
      }
      if (i % 8 == 0) buf.resize(rng() % buf.size());
    } else {
      buf.resize(rng() % 4096);
      for (std::byte& b : buf) b = static_cast<std::byte>(rng());
      if (buf.size() >= 32) {
        // A plausible header, so the decoding reaches the tensor descriptors.
        uint32_t count = 1 + rng() % 3;
        std::memcpy(buf.data() + 16, &count, 4);
        uint16_t small = rng() % 16;
        std::memcpy(buf.data() + 20, &small, 2);
        std::memcpy(buf.data() + 22, &small, 2);
      }
    }
    const Status s = decodeOp(buf.data(), buf.size(), d);
    if (s) {
      ++decoded;
      expectDecodedWithinBody(d, buf.data(), buf.size());
    } else {
      ++rejected;
      EXPECT_EQ(s.error().code, ErrorCode::kProtocol);
      EXPECT_TRUE(s.error().message.starts_with("malformed op record: ")) << s.error().message;
      EXPECT_GT(s.error().message.size(), std::string_view("malformed op record: ").size());
    }
    if (HasFailure()) break;  // one input's failures are enough to read
  }
  EXPECT_GT(decoded, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace dumpd::ipc
