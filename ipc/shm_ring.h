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
#include <memory>
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
  RingProducer(RingProducer&&) noexcept;
  RingProducer& operator=(RingProducer&&) noexcept;
  ~RingProducer();

  int memfd() const { return memfd_.get(); }
  uint64_t capacity() const { return capacity_; }
  uint64_t mappedBytes() const { return map_.bytes(); }
  std::byte* mappedBase() const { return map_.base(); }
  // Largest body a single record can carry.
  uint64_t maxBodyBytes() const { return capacity_ - sizeof(RecordHeader); }

  // Threading: tryReserve, abandon, fits and waitForSpace belong to the producer thread.
  // commit(seq), voidRecord and the read-only queries may also run on one other thread (the
  // client's device-copy completion thread); they serialise on an internal mutex.

  // Reserves space for one record with `body_bytes` after its header and returns a pointer
  // to the body, or nullptr when the ring lacks space right now or the daemon is closing the
  // session (closing() tells which). Several reservations may be open; their sequence
  // numbers follow reservation order and the daemon sees them in that order, each once it
  // and every earlier one are committed. REQUIRES: body_bytes <= maxBodyBytes().
  std::byte* tryReserve(RecordKind kind, uint64_t body_bytes);
  // Sequence number of the newest reservation.
  uint64_t reservedSequence() const { return reserved_sequence_; }
  // Ring position after the newest reservation: the daemon has released that record once
  // RingControl::tail reaches it.
  uint64_t reservedEnd() const { return reserve_head_; }
  // Commits the newest reservation (the host-copy path). Returns its sequence number.
  uint64_t commit();
  // Marks reservation `sequence` filled; publishes it with every filled reservation after
  // it up to the first one still open, and wakes the consumer if it sleeps.
  void commit(uint64_t sequence);
  // Turns reservation `sequence` into a kVoid record (its device copy failed) carrying the
  // number of tensors lost, and commits it. REQUIRES: its body has room for 4 bytes.
  void voidRecord(uint64_t sequence, uint32_t tensors_lost);
  // Drops the newest reservation, which must still be open; nothing is published.
  void abandon();
  // Wakes the daemon's consumer whatever it waits for (it fetched tensors kept on the
  // device, and they are filled now). Any thread; never blocks.
  void wakeConsumer();
  // Publishes the iteration of the step mark just committed (RingControl::producer_step).
  void publishStep(uint32_t iteration);

  // Sleeps until a record with `body_bytes` could be reserved, the daemon closes the session,
  // or timeout_ms (>= 0) passes. Returns true when it fits now.
  bool waitForSpace(uint64_t body_bytes, int timeout_ms);
  bool fits(uint64_t body_bytes) const;
  // True once the daemon marked the session closing: no record can be started any more.
  bool closing() const;

  uint64_t usedBytes() const;  // reserved or committed, not yet released by the daemon
  // Sequence number of the last record the daemon can see (every one before it too).
  uint64_t lastSequence() const;
  // Reservations not yet published.
  size_t openReservations() const;
  RingControl* control() const { return reinterpret_cast<RingControl*>(map_.base()); }

 private:
  struct Pending {
    uint64_t sequence;
    uint64_t start;  // position of the record's header (after any wrap pad)
    uint64_t end;    // reserve head after this record
    bool filled;
  };
  struct Shared;  // the mutex and the open reservations (heap: RingProducer stays movable)

  RingProducer(UniqueFd fd, RingMapping map, uint64_t capacity);
  // Bytes needed from the reserve head for a record of `length`, including wrap padding.
  uint64_t neededFor(uint64_t length) const;

  UniqueFd memfd_;
  RingMapping map_;
  uint64_t capacity_ = 0;
  std::byte* data_ = nullptr;
  uint64_t reserve_head_ = 0;  // end of the newest reservation (producer thread)
  uint64_t reserved_sequence_ = 0;
  std::unique_ptr<Shared> shared_;
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
  // Sleeps until data is committed, wakeConsumer() is called, or timeout_ms passes; with
  // `wake_on_producer_wait`, also when the producer waits for space (a daemon holding records
  // can then free some: the flight recorder). The producer wakes a sleeping consumer when it
  // starts to wait, so that wake is not missed.
  void waitForData(int timeout_ms, bool wake_on_producer_wait = false);
  // The producer is (about to be) asleep waiting for space.
  bool producerWaiting() const;
  // Wakes waitForData (from any thread of the daemon).
  void wakeConsumer();
  // The wake word's value now, and a sleep until it changes (the producer bumps it after a
  // commit it sees the consumer wait for, and after filling fetched tensors), at most
  // timeout_ms. The consumer's thread.
  uint32_t wakeValue() const;
  void waitForWake(uint32_t seen, int timeout_ms);
  bool hasData() const;
  // Marks the session closing (the producer starts no new record) and wakes both sides.
  void setClosing();
  // True while the producer is between checking `closing` and committing a record.
  bool producerBusy() const;
  // The flight recorder's fetch (RingControl::fetch_*): asks the producer for the tensors it
  // keeps on its device for records from `from_sequence` on, and to keep none of iterations
  // up to `through_iteration` any more. The consumer's thread.
  void requestFetch(uint64_t from_sequence, uint32_t through_iteration);

  uint64_t capacity() const { return capacity_; }
  uint64_t usedBytes() const;  // committed and not yet released
  // Ring position of the end of the last record committed (the producer's head, which the
  // client writes: capped at one ring beyond what was released). Any thread.
  uint64_t committedPosition() const;
  // Bytes of records next() has returned that are not released yet (the consumer's thread).
  uint64_t readNotReleased() const { return read_ - released_.load(std::memory_order_acquire); }
  uint64_t droppedRecords() const;
  uint64_t droppedTensors() const;
  // The iteration of the job's last step mark as the client says (untrusted: status only);
  // nullopt before its first one, or from a client that does not say. Any thread.
  std::optional<uint32_t> producerStep() const;

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
  uint32_t fetch_generation_ = 0;
  RingControl* control() const { return reinterpret_cast<RingControl*>(map_.base()); }
};

}  // namespace dumpd::ipc
