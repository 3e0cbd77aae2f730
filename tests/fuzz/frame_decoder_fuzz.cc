// Fuzz target: ipc::FrameDecoder over an arbitrary byte stream, delivered in pieces.
//
// Input: [chunk][limit][stream...]. `chunk` is how many stream bytes each append() carries
// (0: the whole stream at once); `limit` picks the decoder's max frame size (0: the real
// 16 MiB limit, else limit * 16 bytes, so oversized frames are easy to reach).
//
// The decoder is checked against a model that reads the same stream directly: a 4-byte
// little-endian length, then that many bytes parsed with Envelope::ParseFromArray.
//
// Invariants (abort on violation):
//  * next() yields exactly the envelopes the model reads, errors exactly where the model finds
//    a length over the limit or bytes that do not parse (with a non-empty message), and asks
//    for more bytes exactly when the model lacks a whole frame;
//  * after an error the decoder stays failed: every later next() errors, even after more
//    bytes arrive;
//  * buffered() is the count of bytes not yet consumed, so it stays below max frame + 4;
//  * encodeFrame re-encodes a decoded envelope within the limit whenever the message's
//    canonical size fits, refuses it otherwise, and the frame decodes back to the same
//    message. (The wire size does not bound the canonical size: the parser accepts a negative
//    int32 as a 5-byte varint, which protobuf itself writes in 10 bytes.)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "ipc/frame.h"
#include "tests/fuzz/fuzz_util.h"

namespace dumpd::ipc {
namespace {

std::string canonical(const v1::Envelope& env) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    FUZZ_CHECK(env.SerializeToCodedStream(&coded));
  }
  return out;
}

void checkReencodes(const v1::Envelope& env, uint32_t max) {
  const size_t size = env.ByteSizeLong();
  auto frame = encodeFrame(env, max);
  if (size > max) {
    FUZZ_CHECK(!frame.has_value() && frame.error().code == ErrorCode::kResourceExhausted);
    return;
  }
  FUZZ_CHECK(frame.has_value() && frame->size() == size + 4);
  FrameDecoder again(max);
  again.append(frame->data(), frame->size());
  auto back = again.next();
  FUZZ_CHECK(back.has_value() && back->has_value());
  FUZZ_CHECK(again.buffered() == 0);
  FUZZ_CHECK(canonical(**back) == canonical(env));
}

// What the decoder must do with `stream`, of which [0, consumed) was taken out already.
class Model {
 public:
  Model(const uint8_t* stream, uint32_t max) : stream_(stream), max_(max) {}

  // Bytes appended and not yet taken out as envelopes.
  size_t left(size_t available) const { return available - consumed_; }

  // Checks one next() result against the bytes [consumed_, available).
  // Returns false when the stream has failed or needs more bytes.
  bool check(const Result<std::optional<v1::Envelope>>& got, const FrameDecoder& dec,
             size_t available) {
    const size_t left = available - consumed_;
    if (left < 4) {
      FUZZ_CHECK(got.has_value() && !got->has_value());
      return false;
    }
    const uint8_t* p = stream_ + consumed_;
    const uint32_t len =
        uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
    if (len > max_) {
      FUZZ_CHECK(!got.has_value() && !got.error().message.empty());
      return false;
    }
    if (left - 4 < len) {
      FUZZ_CHECK(got.has_value() && !got->has_value());
      FUZZ_CHECK(dec.buffered() < uint64_t{max_} + 4);
      return false;
    }
    v1::Envelope expected;
    if (!expected.ParseFromArray(p + 4, static_cast<int>(len))) {
      FUZZ_CHECK(!got.has_value() && !got.error().message.empty());
      return false;
    }
    FUZZ_CHECK(got.has_value() && got->has_value());
    FUZZ_CHECK(canonical(**got) == canonical(expected));
    consumed_ += 4 + len;
    FUZZ_CHECK(dec.buffered() == available - consumed_);
    return true;
  }

 private:
  const uint8_t* stream_;
  uint32_t max_;
  size_t consumed_ = 0;
};

}  // namespace
}  // namespace dumpd::ipc

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dumpd::fuzz::quietProtobuf();
  using namespace dumpd::ipc;
  if (size < 2) return 0;
  const size_t chunk = data[0] == 0 ? size : data[0];
  const uint32_t max = data[1] == 0 ? kMaxFrameBytes : uint32_t{data[1]} * 16;
  const uint8_t* stream = data + 2;
  const size_t stream_size = size - 2;
  FrameDecoder dec(max);
  Model model(stream, max);
  bool failed = false;
  for (size_t available = 0; available < stream_size;) {
    const size_t n = std::min(chunk, stream_size - available);
    dec.append(stream + available, n);
    available += n;
    if (failed) {
      FUZZ_CHECK(!dec.next().has_value());  // more bytes do not revive a failed decoder
      continue;
    }
    while (true) {
      FUZZ_CHECK(dec.buffered() == model.left(available));
      auto next = dec.next();
      const bool more = model.check(next, dec, available);
      if (!next.has_value()) {
        failed = true;
        FUZZ_CHECK(!dec.next().has_value());  // stays failed
        break;
      }
      if (!more) break;
      checkReencodes(**next, max);
    }
  }
  return 0;
}
