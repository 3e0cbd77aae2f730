// The shared-memory ring's binary layout. Both processes map the same memfd; the layout is
// pinned by the static_asserts below and tests/ipc/ring_test.cc, so any change here is a protocol
// change.
//
//   [0, 4096)           RingControl: identity + cache-line-separated atomics
//   [4096, 4096 + cap)  data area: records, each 64-byte aligned, never straddling the end
//
// Positions (head, tail) are monotonic 64-bit byte counts; a position's offset in the data
// area is pos % capacity. Shared memory holds offsets only, never pointers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace dumpd::ipc {

inline constexpr uint64_t kRingMagic = 0x31676e6952445044ull;  // "DPDRing1" little-endian
// 2: futex wake words, closing/busy flags. 3: kVoid records (reservations committed out of
// order by the client's device pipeline, and given up when a device copy fails). 4: tensor
// payload kinds (TensorDesc::io bits 4..7): statistics computed on the device. 5: dump-once
// references (PayloadKind::kSame, TensorDesc::io bit 1). 6: tensors kept on the device
// (PayloadKind::kDeferred) and the daemon's fetch request (RingControl::fetch_*). 7: the
// producer's NaN/inf scan made while copying (TensorDesc::io kCheckedBit, kNonFiniteBit);
// statistics of host tensors computed by the client (StatsPayload::flags kStatsAverage).
inline constexpr uint32_t kRingVersion = 7;
inline constexpr size_t kRingControlBytes = 4096;
inline constexpr size_t kRecordAlign = 64;
inline constexpr uint64_t kMinRingBytes = 64 * 1024;

static_assert(std::atomic<uint64_t>::is_always_lock_free, "ring needs lock-free 64-bit atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "ring needs lock-free 32-bit atomics");

struct RingControl {
  // Written once by the producer before the memfd is passed; read once by the consumer,
  // which keeps its own copy (the producer could change these later).
  uint64_t magic;
  uint32_t version;
  uint32_t control_bytes;  // kRingControlBytes
  uint64_t capacity;       // data area bytes, multiple of kRecordAlign
  uint64_t reserved0[5];

  // Producer-owned: bytes committed (end of the last whole record). Release-stored after the
  // record's bytes are written, so a consumer that acquire-loads it sees whole records only.
  alignas(64) std::atomic<uint64_t> head;
  // Consumer-owned: bytes released (the producer may reuse everything before it).
  alignas(64) std::atomic<uint64_t> tail;
  // 1 while the consumer is (about to be) asleep on data_wake.
  alignas(64) std::atomic<uint32_t> consumer_waiting;
  // Futex word the consumer sleeps on; the producer bumps it and FUTEX_WAKEs after a commit
  // when consumer_waiting is set. The daemon also bumps it to wake its own consumer.
  std::atomic<uint32_t> data_wake;
  // 1 while the producer is (about to be) asleep on space_wake.
  alignas(64) std::atomic<uint32_t> producer_waiting;
  // Futex word the producer sleeps on; the consumer bumps it and FUTEX_WAKEs after a release
  // when producer_waiting is set.
  std::atomic<uint32_t> space_wake;
  // Producer-owned counters for the drop policy (untrusted by the daemon: informational).
  alignas(64) std::atomic<uint64_t> dropped_records;
  std::atomic<uint64_t> dropped_tensors;
  // Daemon-owned: 1 once the session is closing (SIGTERM, or the client hung up). The
  // producer starts no record after it sees it.
  alignas(64) std::atomic<uint32_t> closing;
  // Producer-owned: 1 from just before the producer checks `closing` for a new record until
  // every record it reserved is committed or abandoned (several may be in flight while
  // device copies fill them). With `closing` it forms a Dekker handshake: either
  // the producer sees closing and refuses, or the daemon sees busy and waits for the commit.
  alignas(64) std::atomic<uint32_t> producer_busy;
  // Daemon-owned: the flight recorder's fetch request (docs/recorder.md, "Keeping CUDA
  // tensors on the device"), a seqlock: the daemon stores an odd generation, the fields,
  // then the next even one (release; 0: none yet); the producer takes fields read under one
  // even generation. The client then copies every tensor it keeps on the device for a record
  // at or after from_sequence into that record, and keeps no tensor of an iteration up to
  // through_iteration on the device any more.
  alignas(64) std::atomic<uint32_t> fetch_generation;
  std::atomic<uint32_t> fetch_through_iteration;
  std::atomic<uint64_t> fetch_from_sequence;
  // Producer-owned, informational (untrusted, for status only): the iteration of the job's
  // last step mark plus one, stored once the mark is committed (0: none yet, or a client
  // older than this field, whose memfd leaves it zero).
  alignas(64) std::atomic<uint64_t> producer_step;
};
static_assert(sizeof(RingControl) <= kRingControlBytes);
static_assert(offsetof(RingControl, head) == 64);
static_assert(offsetof(RingControl, tail) == 128);
static_assert(offsetof(RingControl, consumer_waiting) == 192);
static_assert(offsetof(RingControl, producer_waiting) == 256);
static_assert(offsetof(RingControl, data_wake) == 196);
static_assert(offsetof(RingControl, space_wake) == 260);
static_assert(offsetof(RingControl, dropped_records) == 320);
static_assert(offsetof(RingControl, closing) == 384);
static_assert(offsetof(RingControl, producer_busy) == 448);
static_assert(offsetof(RingControl, fetch_generation) == 512);
static_assert(offsetof(RingControl, fetch_through_iteration) == 516);
static_assert(offsetof(RingControl, fetch_from_sequence) == 520);

enum class RecordKind : uint16_t {
  kPad = 1,      // skip to the start of the data area (wrap-around filler)
  kOp = 2,       // one op execution: OpHeader, names, TensorDescs, payloads
  kControl = 3,  // a dumpd.v1.Control and its payload: ipc/control_codec.h
  kVoid = 4,     // a reserved record the client could not fill: u32 count of tensors lost
};

inline constexpr uint32_t kRecordMagic = 0x52445044;  // "DPDR"

struct RecordHeader {
  uint32_t magic;
  uint16_t kind;  // RecordKind
  uint16_t flags;
  uint32_t reserved;
  uint32_t body_bytes;  // meaningful bytes after this header (<= length - sizeof header)
  uint64_t length;      // whole record incl. header and padding; multiple of kRecordAlign
  uint64_t sequence;    // 1, 2, 3... per session (pad records carry 0)
};
static_assert(sizeof(RecordHeader) == 32);

// kOp body, right after RecordHeader.
struct OpHeader {
  uint32_t graph_id;
  uint32_t iteration;
  uint32_t task_id;
  uint32_t stream_id;
  uint32_t tensor_count;
  uint16_t op_type_len;
  uint16_t op_name_len;
  uint32_t flags;  // kOpMarked
  uint32_t reserved;
};
static_assert(sizeof(OpHeader) == 32);
inline constexpr uint32_t kOpMarked = 1;  // set_dump mark (dump_mode 2)
// A Trigger control record's reason: dumpd keeps at most this many bytes of it (the client
// cuts it between characters before sending).
inline constexpr size_t kMaxTriggerReasonBytes = 1024;
// A ReplicaMismatch control record compares at most this many ranks (docs/replicas.md).
inline constexpr size_t kMaxReplicaGroup = 65536;

// Then op_type and op_name bytes (no terminator), padded to 8 bytes; then tensor_count
// TensorDescs, each followed by ndim int64 dims and format_len bytes, padded to 8. Payloads
// follow at data_offset (from the record start), each 64-byte aligned.
struct TensorDesc {
  uint8_t io;     // bit 0: 0 input, 1 output; bit 1: kMemoBit; bits 2, 3: kCheckedBit,
                  // kNonFiniteBit; bits 4..7: PayloadKind
  uint8_t dtype;  // DType wire value
  uint8_t ndim;
  uint8_t format_len;
  uint32_t slot;
  uint64_t timestamp_us;
  uint64_t data_offset;
  uint64_t data_bytes;
};
static_assert(sizeof(TensorDesc) == 32);

// What a tensor's payload holds.
enum class PayloadKind : uint8_t {
  kBytes = 0,       // the tensor's bytes (sourceBytes(dtype, elements))
  kStatistics = 1,  // one StatsPayload: the producer computed the statistics
  kSame = 2,        // one SamePayload: the bytes of an earlier tensor of the same step
  // A DeferredPayload, then the tensor's bytes once its state says so: a flight recorder
  // keeps the tensor on the device until a trigger asks for it.
  kDeferred = 3,
};
inline constexpr uint8_t kIoBit = 0x01;
// Dump once: later tensors of the same step may name this one in a SamePayload. The daemon
// remembers what it wrote for flagged tensors only, at most kMaxMemoTensorsPerStep per step.
inline constexpr uint8_t kMemoBit = 0x02;
// PayloadKind::kBytes only: the producer looked for NaN and inf while it copied the bytes
// (kCheckedBit) and found one (kNonFiniteBit). Without kCheckedBit the daemon looks itself.
// Untrusted like everything in the ring: a lie only changes what its own job's recorder sees.
inline constexpr uint8_t kCheckedBit = 0x04;
inline constexpr uint8_t kNonFiniteBit = 0x08;
inline constexpr int kPayloadKindShift = 4;
inline constexpr uint32_t kMaxMemoTensorsPerStep = 16384;

// PayloadKind::kSame: this tensor has exactly the bytes (and dtype and shape) of tensor
// `tensor` (its index in the record) of the earlier record `sequence` of the same step, which
// was sent with kMemoBit. The daemon writes its file and statistics row from that tensor's.
struct SamePayload {
  uint64_t sequence;
  uint32_t tensor;
  uint32_t reserved;  // zero
};
static_assert(sizeof(SamePayload) == 16);

// PayloadKind::kStatistics: the sums behind statistic.csv, over every element converted to
// double (bool 0/1; float16/bfloat16/int4 decoded), computed by the device (CUDA tensors) or
// by the client (host tensors whose selected output is only statistics: kStatsAverage). max/min
// ignore NaN (they stay -inf/+inf when every element is NaN); the daemon derives the printed values
// (NaN rules, avg, l2norm).
struct StatsPayload {
  uint64_t count;  // elements; must equal the shape's element count
  uint64_t nan;
  uint64_t negative_inf;
  uint64_t positive_inf;
  uint64_t zero;  // x == 0 (-0.0 included)
  uint64_t negative;
  uint64_t positive;
  double max;
  double min;
  double sum;
  double sum_squares;
  uint64_t flags;  // kStatsAverage; other bits zero
};
static_assert(sizeof(StatsPayload) == 96);
// StatsPayload::flags: `sum` is the average by the job's ms_format rule and `sum_squares` that
// rule's sum of squares (the client computed a host tensor's statistics with dumpd's own
// library, storage/format/stat_values.h), not plain sums.
inline constexpr uint64_t kStatsAverage = 1;

// PayloadKind::kDeferred: the producer's device computed the statistics (for the recorder's
// NaN/infinity check) and keeps a snapshot of the bytes, which it copies to
// kDeferredHeaderBytes after this header when the daemon fetches them (RingControl::fetch_*),
// then release-stores `state` kDeferredFilled. kDeferredLost: the snapshot was given up for
// device staging space. The daemon reads `state` with acquire and never trusts it further
// than "the bytes are there now".
struct DeferredPayload {
  StatsPayload stats;
  uint64_t state;  // kDeferredOnDevice, kDeferredFilled, kDeferredLost (std::atomic_ref)
  uint64_t reserved[3];
};
static_assert(sizeof(DeferredPayload) == 128);
inline constexpr uint64_t kDeferredHeaderBytes = sizeof(DeferredPayload);
inline constexpr uint64_t kDeferredOnDevice = 0;
inline constexpr uint64_t kDeferredFilled = 1;
inline constexpr uint64_t kDeferredLost = 2;

inline constexpr uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace dumpd::ipc
