// Single-producer single-consumer ring of variable-size records in a sealed memfd.
//
// Thread-safety: a RingProducer belongs to one producer thread, a RingConsumer to one
// consumer thread; the two may live in different processes. All cross-process state is in
// RingControl (ipc/ring_format.h) and every atomic access below states its memory order.
//
// The consumer never trusts the producer: it keeps its own copy of the capacity, copies each
// record header before checking it, and reports a corrupt ring as an error (never a crash).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "base/result.h"
#include "base/unique_fd.h"
#include "ipc/ring_format.h"

namespace dumpd::ipc {

// Whole record length (header + body, 64-byte aligned) for a body of `body_bytes`.
inline constexpr uint64_t recordLength(uint64_t body_bytes) {
  return alignUp(sizeof(RecordHeader) + body_bytes, kRecordAlign);
}

class RingMapping {
 public:
  RingMapping() = default;
  RingMapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~RingMapping();
  RingMapping(RingMapping&& o) noexcept;
  RingMapping& operator=(RingMapping&& o) noexcept;
  RingMapping(const RingMapping&) = delete;
  RingMapping& operator=(const RingMapping&) = delete;

  std::byte* base() const { return static_cast<std::byte*>(base_); }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

class RingProducer {
 public:
  // Creates a memfd of kRingControlBytes + capacity (rounded up to 4 KiB pages), seals it
  // against shrinking and growing, maps it and pre-faults every page by writing it once
  // (fresh shared pages are ~25x slower to touch than warm ones).
  static Result<RingProducer> create(uint64_t capacity_bytes);

  int memfd() const { return memfd_.get(); }
  uint64_t capacity() const { return capacity_; }
  uint64_t mappedBytes() const { return map_.bytes(); }
  // Largest body a single record can carry.
  uint64_t maxBodyBytes() const { return capacity_ - sizeof(RecordHeader); }

  // Reserves space for one record with `body_bytes` after its header and returns a pointer
  // to the body, or nullptr when the ring lacks space right now or the daemon is closing the
  // session (closing() tells which). At most one reservation is open at a time.
  // REQUIRES: body_bytes <= maxBodyBytes().
  std::byte* tryReserve(RecordKind kind, uint64_t body_bytes);
  // Publishes the open reservation (and any wrap padding before it); wakes the consumer only
  // if it declared it is sleeping. Returns the record's sequence number.
  uint64_t commit();
  // Drops the open reservation; nothing is published.
  void abandon();

  // Sleeps until a record with `body_bytes` could be reserved, the daemon closes the session,
  // or timeout_ms (>= 0) passes. Returns true when it fits now.
  bool waitForSpace(uint64_t body_bytes, int timeout_ms);
  bool fits(uint64_t body_bytes) const;
  // True once the daemon marked the session closing: no record can be started any more.
  bool closing() const;

  uint64_t usedBytes() const;
  uint64_t lastSequence() const { return sequence_; }
  RingControl* control() const { return reinterpret_cast<RingControl*>(map_.base()); }

 private:
  RingProducer(UniqueFd fd, RingMapping map, uint64_t capacity);
  // Bytes needed from head for a record of `length`, including wrap padding.
  uint64_t neededFor(uint64_t length) const;

  UniqueFd memfd_;
  RingMapping map_;
  uint64_t capacity_ = 0;
  std::byte* data_ = nullptr;
  uint64_t head_ = 0;  // local copy of control()->head (the producer is its only writer)
  uint64_t sequence_ = 0;
  // Open reservation.
  bool reserved_ = false;
  uint64_t res_pad_ = 0;
  uint64_t res_length_ = 0;
  uint64_t res_body_ = 0;
  RecordKind res_kind_ = RecordKind::kOp;
};

class RingConsumer {
 public:
  struct Record {
    RecordKind kind;
    uint64_t sequence;  // 0 for pad records
    uint64_t end;       // position to release once this record is done
    const std::byte* body;
    uint32_t body_bytes;
  };

  // Maps a ring the client created. Checks that `memfd` is a memfd sealed against shrinking
  // and growing (so the client cannot truncate it under us: no SIGBUS), exactly
  // `claimed_bytes` long, not above `max_ring_bytes`, wholly allocated (the client pre-faults
  // its ring, so the daemon never faults in, nor is charged for, a sparse memfd), with a
  // valid control block. No MAP_POPULATE: mapping costs the daemon no page faults.
  static Result<RingConsumer> attach(UniqueFd memfd, uint64_t claimed_bytes,
                                     uint64_t max_ring_bytes);
  RingConsumer(RingConsumer&& o) noexcept
      : memfd_(std::move(o.memfd_)),
        map_(std::move(o.map_)),
        capacity_(o.capacity_),
        data_(o.data_),
        read_(o.read_),
        released_(o.released_.load(std::memory_order_relaxed)),
        expect_sequence_(o.expect_sequence_) {}
  RingConsumer& operator=(RingConsumer&&) = delete;

  // The next committed record after the read cursor (pad records included, so their space
  // is released in order); nullopt when none is committed; an error when the ring is corrupt.
  Result<std::optional<Record>> next();
  // Releases every byte before `end` to the producer. Returns true when the producer declared
  // it is waiting for space: the caller then calls wakeProducer(), outside any lock.
  // REQUIRES: calls serialised by the caller (any thread) with `end` non-decreasing.
  [[nodiscard]] bool release(uint64_t end);
  void wakeProducer();
  // Sleeps until data is committed, wakeConsumer() is called, or timeout_ms passes.
  void waitForData(int timeout_ms);
  // Wakes waitForData (from any thread of the daemon).
  void wakeConsumer();
  bool hasData() const;
  // Marks the session closing (the producer starts no new record) and wakes both sides.
  void setClosing();
  // True while the producer is between checking `closing` and committing a record.
  bool producerBusy() const;

  uint64_t capacity() const { return capacity_; }
  uint64_t usedBytes() const;  // committed and not yet released
  uint64_t droppedRecords() const;
  uint64_t droppedTensors() const;

 private:
  RingConsumer(UniqueFd fd, RingMapping map, uint64_t capacity);

  UniqueFd memfd_;
  RingMapping map_;
  uint64_t capacity_ = 0;
  const std::byte* data_ = nullptr;
  uint64_t read_ = 0;  // read cursor: position of the next record
  // Local copy of control()->tail. Atomic because release() may run on a writer thread
  // (serialised by the caller) while next() runs on the consumer thread.
  std::atomic<uint64_t> released_{0};
  uint64_t expect_sequence_ = 1;
  RingControl* control() const { return reinterpret_cast<RingControl*>(map_.base()); }
};

}  // namespace dumpd::ipc
