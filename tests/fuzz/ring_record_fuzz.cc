// Fuzz target: the daemon's reading of a ring a hostile client filled.
//
// Input: [head: u64 little-endian][bytes for the start of the data area...]. A real 64 KiB
// ring is created once (RingProducer); per input its data area is zeroed, the input bytes
// are copied to its start and control()->head is set, then a fresh RingConsumer attached to
// a dup of the memfd reads records until none is left or it reports corruption. Op records
// go through ipc::decodeOp and every accessor of the decoded op (of payloads, the first and
// last byte); control records are parsed as the daemon does (u32 length at the body,
// dumpd.v1.Control at body + 8, a constant's payload 8-aligned after it).
//
// Invariants (abort on violation): records come out in order, each a whole number of
// 64-byte units inside [0, head), never straddling the end of the data area, their body
// inside the record, pads ending at the wrap, sequences 1, 2, 3...; the body pointer shows
// the bytes the ring holds there; decodeOp reads nothing outside the body (it decodes an
// exact-size heap copy, so ASan reports an overread) and decodes that copy and the ring
// bytes alike; every decoded tensor's payload lies inside the body. Errors carry messages.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/element_count.h"
#include "base/unique_fd.h"
#include "ipc/control_codec.h"
#include "ipc/op_codec.h"
#include "ipc/ring_format.h"
#include "ipc/shm_ring.h"
#include "proto/dumpd.pb.h"
#include "tests/fuzz/fuzz_util.h"

namespace dumpd::ipc {
namespace {

constexpr uint64_t kRingBytes = 64 * 1024;
constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;

volatile uint8_t g_sink;

// Reads every byte of [p, p + n), so ASan sees each access.
void touch(const std::byte* p, uint64_t n) {
  uint8_t x = 0;
  for (uint64_t i = 0; i < n; ++i) x ^= static_cast<uint8_t>(p[i]);
  g_sink = x;
}

// Reads the first and the last byte of [p, p + n): enough to catch a range reaching outside
// its buffer, and cheap for the thousands of tensors (up to 64 KiB each) a record can name.
void touchEnds(const std::byte* p, uint64_t n) {
  if (n == 0) return;
  g_sink = static_cast<uint8_t>(p[0]) ^ static_cast<uint8_t>(p[n - 1]);
}

bool sameDecode(const DecodedOp& a, const std::byte* a_body, const DecodedOp& b,
                const std::byte* b_body) {
  if (a.strings != b.strings || a.dims != b.dims || a.tensors.size() != b.tensors.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const DecodedTensor& x = a.tensors[i];
    const DecodedTensor& y = b.tensors[i];
    if (x.data - a_body != y.data - b_body || x.data_bytes != y.data_bytes || x.io != y.io ||
        x.payload != y.payload || x.memo != y.memo || x.dtype != y.dtype || x.ndim != y.ndim ||
        x.format_len != y.format_len) {
      return false;
    }
  }
  return a.graph_id == b.graph_id && a.iteration == b.iteration && a.flags == b.flags &&
         a.op_type_len == b.op_type_len && a.op_name_len == b.op_name_len;
}

void readOp(const RingConsumer::Record& r) {
  // An exact-size copy: any read past the body is a heap overflow ASan reports.
  std::vector<std::byte> copy(r.body, r.body + r.body_bytes);
  static DecodedOp decoded;  // reused like the daemon's buffers, across inputs too
  static DecodedOp in_ring;
  const Status s = decodeOp(copy.data(), copy.size(), decoded);
  const Status s_ring = decodeOp(r.body, r.body_bytes, in_ring);
  FUZZ_CHECK(s.has_value() == s_ring.has_value());
  if (!s) {
    FUZZ_CHECK(!s.error().message.empty());
    FUZZ_CHECK(s.error().message == s_ring.error().message);
    return;
  }
  FUZZ_CHECK(sameDecode(decoded, copy.data(), in_ring, r.body));
  const std::byte* const end = copy.data() + copy.size();
  touch(reinterpret_cast<const std::byte*>(decoded.opType().data()), decoded.opType().size());
  touch(reinterpret_cast<const std::byte*>(decoded.opName().data()), decoded.opName().size());
  FUZZ_CHECK(decoded.opType().size() <= kMaxNameBytes && decoded.opName().size() <= kMaxNameBytes);
  FUZZ_CHECK(!decoded.tensors.empty() && decoded.tensors.size() <= kMaxTensorsPerRecord);
  for (const DecodedTensor& t : decoded.tensors) {
    FUZZ_CHECK(t.io <= 1 && t.ndim <= kMaxDims && t.format_len <= kMaxFormatBytes);
    const auto shape = decoded.shape(t);
    FUZZ_CHECK(shape.size() == t.ndim);
    for (const int64_t d : shape) FUZZ_CHECK(d >= 0);
    const auto format = decoded.format(t);
    FUZZ_CHECK(format.size() == t.format_len);
    touch(reinterpret_cast<const std::byte*>(format.data()), format.size());
    FUZZ_CHECK(t.data >= copy.data() && t.data <= end &&
               t.data_bytes <= static_cast<uint64_t>(end - t.data));
    touchEnds(t.data, t.data_bytes);
    // The daemon's size check (RingDrain::handleOp) on top of the decoder's, and its check
    // of device statistics: a payload it accepts counts no category beyond the elements.
    if (dtypeValid(t.dtype)) {
      const auto elements = elementCount(shape);
      if (elements) (void)sourceBytes(static_cast<DType>(t.dtype), *elements);
      if (elements && t.payload == PayloadKind::kStatistics) {
        StatsPayload p;
        std::memcpy(&p, t.data, sizeof p);
        const std::string why = statsPayloadProblem(p, *elements);
        const bool counts_fit = p.count == *elements && p.nan <= p.count &&
                                p.negative_inf <= p.count && p.positive_inf <= p.count &&
                                p.zero <= p.count && p.negative <= p.count && p.positive <= p.count;
        FUZZ_CHECK(why.empty() == (counts_fit && (p.flags & ~kStatsAverage) == 0));
      }
    }
  }
}

void readControlRecord(const RingConsumer::Record& r) {
  std::vector<std::byte> copy(r.body, r.body + r.body_bytes);
  auto view = dumpd::ipc::readControl(copy);  // the daemon's reader of the layout
  if (!view) return;
  v1::Control ctl;
  if (!ctl.ParseFromArray(view->message.data(), static_cast<int>(view->message.size()))) return;
  switch (ctl.msg_case()) {
    case v1::Control::kStep:
      (void)ctl.step().graph_id();
      break;
    case v1::Control::kGraph:
      touch(reinterpret_cast<const std::byte*>(ctl.graph().ir_text().data()),
            ctl.graph().ir_text().size());
      break;
    case v1::Control::kExecutionOrder:
      for (const std::string& name : ctl.execution_order().op_names()) {
        touch(reinterpret_cast<const std::byte*>(name.data()), name.size());
      }
      break;
    case v1::Control::kKernelArgs:
      for (const auto& [key, value] : ctl.kernel_args().args()) {
        touch(reinterpret_cast<const std::byte*>(value.data()), value.size());
      }
      break;
    case v1::Control::kConstant: {
      const uint64_t bytes = ctl.constant().data_bytes();
      if (view->payload && bytes <= view->payload->size()) touchEnds(view->payload->data(), bytes);
      break;
    }
    case v1::Control::kTrigger:
      touch(reinterpret_cast<const std::byte*>(ctl.trigger().reason().data()),
            ctl.trigger().reason().size());
      break;
    case v1::Control::kLoss:
      (void)ctl.loss().value();
      break;
    case v1::Control::kReplicaMismatch: {
      const v1::ReplicaMismatch& m = ctl.replica_mismatch();
      touch(reinterpret_cast<const std::byte*>(m.tensor().data()), m.tensor().size());
      uint64_t sum = 0;
      for (uint64_t d : m.digests()) sum += d;
      for (uint32_t rank : m.ranks()) sum += rank;
      (void)sum;
      break;
    }
    case v1::Control::MSG_NOT_SET:
      break;
  }
}

RingProducer& ring() {
  static RingProducer* producer = [] {
    auto p = RingProducer::create(kRingBytes);
    FUZZ_CHECK(p.has_value());
    return new RingProducer(std::move(p).value());  // lives for the whole run
  }();
  return *producer;
}

}  // namespace
}  // namespace dumpd::ipc

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dumpd::fuzz::quietProtobuf();
  using namespace dumpd;
  using namespace dumpd::ipc;
  if (size < 8) return 0;
  RingProducer& producer = ring();
  auto* const base = reinterpret_cast<std::byte*>(producer.control());
  std::byte* const area = base + kRingControlBytes;
  const uint64_t capacity = producer.mappedBytes() - kRingControlBytes;
  uint64_t head;
  std::memcpy(&head, data, sizeof head);
  const size_t n = std::min<uint64_t>(size - 8, capacity);
  std::memset(area, 0, capacity);
  std::memcpy(area, data + 8, n);
  producer.control()->tail.store(0, std::memory_order_relaxed);
  producer.control()->head.store(head, std::memory_order_relaxed);

  auto consumer = RingConsumer::attach(UniqueFd(::dup(producer.memfd())), producer.mappedBytes(),
                                       kMaxRingBytes);
  FUZZ_CHECK(consumer.has_value());
  uint64_t read = 0;
  uint64_t sequence = 0;
  while (true) {
    auto next = consumer->next();
    if (!next) {
      FUZZ_CHECK(!next.error().message.empty());
      break;
    }
    if (!next->has_value()) {
      FUZZ_CHECK(read == head);
      break;
    }
    const RingConsumer::Record& r = **next;
    const uint64_t length = r.end - read;
    const uint64_t off = read % capacity;
    FUZZ_CHECK(r.end > read && r.end <= head);
    FUZZ_CHECK(length % kRecordAlign == 0 && off + length <= capacity);
    if (r.kind == RecordKind::kPad) {
      FUZZ_CHECK(r.end % capacity == 0 && r.sequence == 0);
    } else {
      FUZZ_CHECK(r.kind == RecordKind::kOp || r.kind == RecordKind::kControl ||
                 r.kind == RecordKind::kVoid);
      FUZZ_CHECK(r.sequence == ++sequence);
      FUZZ_CHECK(sizeof(RecordHeader) + r.body_bytes <= length);
      // Same memfd, another mapping: the body must show the bytes at its ring offset.
      FUZZ_CHECK(std::memcmp(r.body, area + off + sizeof(RecordHeader), r.body_bytes) == 0);
      if (r.kind == RecordKind::kOp) {
        readOp(r);
      } else if (r.kind == RecordKind::kControl) {
        readControlRecord(r);
      }  // kVoid: the daemon reads at most a u32 count from its body (body_bytes checked)
    }
    read = r.end;
  }
  return 0;
}
