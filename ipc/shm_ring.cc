#include "ipc/shm_ring.h"

#include "base/mutex.h"
#include "ipc/futex.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <new>
#include <string>

namespace dumpd::ipc {
namespace {

constexpr uint64_t kPage = 4096;

Error sysError(const char* what) {
  return makeError(ErrorCode::kIo, std::string(what) + ": " + strerror(errno));
}

}  // namespace

RingMapping::~RingMapping() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}
RingMapping::RingMapping(RingMapping&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
RingMapping& RingMapping::operator=(RingMapping&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// ---------------------------------------------------------------- producer

struct RingProducer::Shared {
  mutable Mutex mu;
  std::deque<Pending> pending GUARDED_BY(mu);  // open reservations, oldest first
  uint64_t head GUARDED_BY(mu) = 0;            // published head (local copy of control()->head)
  uint64_t sequence GUARDED_BY(mu) = 0;        // last published sequence

  // Publishes the filled prefix of `pending`: moves the ring's head, wakes a waiting consumer.
  void publish(RingControl* control) REQUIRES(mu);
};

RingProducer::RingProducer(UniqueFd fd, RingMapping map, uint64_t capacity)
    : memfd_(std::move(fd)),
      map_(std::move(map)),
      capacity_(capacity),
      shared_(std::make_unique<Shared>()) {
  data_ = map_.base() + kRingControlBytes;
}
RingProducer::RingProducer(RingProducer&&) noexcept = default;
RingProducer& RingProducer::operator=(RingProducer&&) noexcept = default;
RingProducer::~RingProducer() = default;

Result<RingProducer> RingProducer::create(uint64_t capacity_bytes) {
  if (capacity_bytes < kMinRingBytes) {
    return makeError(ErrorCode::kInvalidArgument, "ring size " + std::to_string(capacity_bytes) +
                                                      " is below the minimum " +
                                                      std::to_string(kMinRingBytes));
  }
  const uint64_t capacity = alignUp(capacity_bytes, kPage);
  const uint64_t total = kRingControlBytes + capacity;
  UniqueFd fd(::memfd_create("dumpd-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return sysError("memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(total)) != 0) return sysError("ftruncate ring");
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return sysError("seal ring");
  }
  void* base = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return sysError("mmap ring");
  RingMapping map(base, total);
  // Pre-fault: write every page once so neither the first burst nor the consumer pays for
  // page allocation. MAP_POPULATE alone leaves write faults on shmem here.
  auto* bytes = static_cast<volatile std::byte*>(base);
  for (uint64_t off = 0; off < total; off += kPage) bytes[off] = std::byte{0};

  auto* ctl = new (base) RingControl{};
  ctl->magic = kRingMagic;
  ctl->version = kRingVersion;
  ctl->control_bytes = kRingControlBytes;
  ctl->capacity = capacity;
  // Relaxed is enough: the memfd reaches the consumer through sendmsg, a full barrier.
  ctl->head.store(0, std::memory_order_relaxed);
  ctl->tail.store(0, std::memory_order_relaxed);
  return RingProducer(std::move(fd), std::move(map), capacity);
}

uint64_t RingProducer::neededFor(uint64_t length) const {
  const uint64_t off = reserve_head_ % capacity_;
  const uint64_t pad = (off + length > capacity_) ? capacity_ - off : 0;
  return pad + length;
}

bool RingProducer::fits(uint64_t body_bytes) const {
  const uint64_t length = recordLength(body_bytes);
  if (length > capacity_) return false;
  // Acquire: the consumer released these bytes after it finished reading them; our writes to
  // them must not be reordered before that release.
  const uint64_t tail = control()->tail.load(std::memory_order_acquire);
  return neededFor(length) <= capacity_ - (reserve_head_ - tail);
}

std::byte* RingProducer::tryReserve(RecordKind kind, uint64_t body_bytes) {
  // seq_cst store then seq_cst load: Dekker handshake with RingConsumer::setClosing (closing
  // store, then producerBusy load). Either we see closing and start nothing, or the daemon
  // sees busy and waits for this record's commit before its final drain.
  control()->producer_busy.store(1, std::memory_order_seq_cst);
  if (control()->closing.load(std::memory_order_seq_cst) != 0 || !fits(body_bytes)) {
    MutexLock lock(&shared_->mu);
    // Release: nothing of ours is in flight; pairs with the daemon's seq_cst load.
    if (shared_->pending.empty()) control()->producer_busy.store(0, std::memory_order_release);
    return nullptr;
  }
  const uint64_t length = recordLength(body_bytes);
  const uint64_t off = reserve_head_ % capacity_;
  const uint64_t pad = (off + length > capacity_) ? capacity_ - off : 0;
  if (pad != 0) {
    RecordHeader p{};
    p.magic = kRecordMagic;
    p.kind = static_cast<uint16_t>(RecordKind::kPad);
    p.length = pad;
    std::memcpy(data_ + off, &p, sizeof p);
  }
  const uint64_t start = reserve_head_ + pad;
  // The header is complete now: the consumer reads nothing before the published head.
  RecordHeader h{};
  h.magic = kRecordMagic;
  h.kind = static_cast<uint16_t>(kind);
  h.body_bytes = static_cast<uint32_t>(body_bytes);
  h.length = length;
  h.sequence = ++reserved_sequence_;
  std::byte* record = data_ + start % capacity_;
  std::memcpy(record, &h, sizeof h);
  reserve_head_ = start + length;
  {
    MutexLock lock(&shared_->mu);
    shared_->pending.push_back(Pending{reserved_sequence_, start, reserve_head_, false});
  }
  return record + sizeof(RecordHeader);
}

void RingProducer::abandon() {
  MutexLock lock(&shared_->mu);
  auto& pending = shared_->pending;
  if (pending.empty() || pending.back().filled) return;
  pending.pop_back();
  // Rewind to the end of the previous reservation (or the published head); any wrap pad
  // written for the dropped one is simply overwritten later.
  reserve_head_ = pending.empty() ? shared_->head : pending.back().end;
  --reserved_sequence_;
  if (pending.empty()) control()->producer_busy.store(0, std::memory_order_release);
}

bool RingProducer::closing() const {
  return control()->closing.load(std::memory_order_acquire) != 0;
}

uint64_t RingProducer::commit() {
  const uint64_t seq = reserved_sequence_;
  commit(seq);
  return seq;
}

void RingProducer::commit(uint64_t sequence) {
  MutexLock lock(&shared_->mu);
  auto& pending = shared_->pending;
  if (pending.empty() || sequence < pending.front().sequence) return;
  const uint64_t index = sequence - pending.front().sequence;
  if (index >= pending.size()) return;
  pending[index].filled = true;
  shared_->publish(control());
}

void RingProducer::wakeConsumer() { futexBumpAndWake(control()->data_wake); }

void RingProducer::publishStep(uint32_t iteration) {
  control()->producer_step.store(uint64_t{iteration} + 1, std::memory_order_relaxed);
}

void RingProducer::voidRecord(uint64_t sequence, uint32_t tensors_lost) {
  {
    MutexLock lock(&shared_->mu);
    auto& pending = shared_->pending;
    if (pending.empty() || sequence < pending.front().sequence) return;
    const uint64_t index = sequence - pending.front().sequence;
    if (index >= pending.size() || pending[index].filled) return;
    std::byte* header = data_ + pending[index].start % capacity_;
    RecordHeader h;
    std::memcpy(&h, header, sizeof h);
    h.kind = static_cast<uint16_t>(RecordKind::kVoid);
    h.body_bytes = 4;
    std::memcpy(header, &h, sizeof h);
    std::memcpy(header + sizeof h, &tensors_lost, 4);
  }
  commit(sequence);
}

void RingProducer::Shared::publish(RingControl* control) {
  bool moved = false;
  while (!pending.empty() && pending.front().filled) {
    head = pending.front().end;
    sequence = pending.front().sequence;
    pending.pop_front();
    moved = true;
  }
  if (!moved) return;
  // seq_cst (not just release): together with the consumer's seq_cst store of
  // consumer_waiting and load of head, this is a Dekker handshake. Either we see its flag
  // and wake it, or it sees our head and does not sleep. Release semantics publish the bytes
  // (the device pipeline's completion thread acquired them from the copy's completion).
  control->head.store(head, std::memory_order_seq_cst);
  // After head, seq_cst: a daemon whose seq_cst load sees busy == 0 from this store also
  // sees the head stored above (pairs with RingConsumer::producerBusy).
  if (pending.empty()) control->producer_busy.store(0, std::memory_order_seq_cst);
  if (control->consumer_waiting.load(std::memory_order_seq_cst) != 0) {
    futexBumpAndWake(control->data_wake);
  }
}

bool RingProducer::waitForSpace(uint64_t body_bytes, int timeout_ms) {
  if (recordLength(body_bytes) > capacity_) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!fits(body_bytes) && !closing()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    // Read the wake word before declaring we wait: a release after this load changes it, so
    // the futex wait below returns at once instead of missing the wake.
    const uint32_t seen = control()->space_wake.load(std::memory_order_seq_cst);
    // Dekker handshake with RingConsumer::release (seq_cst on both sides).
    control()->producer_waiting.store(1, std::memory_order_seq_cst);
    if (!fits(body_bytes) && !closing()) {
      // A daemon holding records (the flight recorder) frees space when it learns we wait:
      // wake its consumer if it sleeps (a Dekker handshake with waitForData, seq_cst).
      if (control()->consumer_waiting.load(std::memory_order_seq_cst) != 0) {
        futexBumpAndWake(control()->data_wake);
      }
      futexWait(control()->space_wake, seen, static_cast<int>(left.count()));
    }
    control()->producer_waiting.store(0, std::memory_order_relaxed);
  }
  return fits(body_bytes) && !closing();
}

uint64_t RingProducer::usedBytes() const {
  return reserve_head_ - control()->tail.load(std::memory_order_relaxed);
}

uint64_t RingProducer::lastSequence() const {
  MutexLock lock(&shared_->mu);
  return shared_->sequence;
}

size_t RingProducer::openReservations() const {
  MutexLock lock(&shared_->mu);
  return shared_->pending.size();
}

// ---------------------------------------------------------------- consumer

RingConsumer::RingConsumer(UniqueFd fd, RingMapping map, uint64_t capacity)
    : memfd_(std::move(fd)), map_(std::move(map)), capacity_(capacity) {
  data_ = map_.base() + kRingControlBytes;
}

Result<RingConsumer> RingConsumer::attach(UniqueFd memfd, uint64_t claimed_bytes,
                                          uint64_t max_ring_bytes) {
  const int fd = memfd.get();
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return makeError(ErrorCode::kProtocol, "ring fd is not a sealable memfd");
  }
  if ((seals & F_SEAL_SHRINK) == 0 || (seals & F_SEAL_GROW) == 0) {
    return makeError(ErrorCode::kProtocol,
                     "ring memfd is not sealed against shrinking and growing");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) return sysError("fstat ring");
  if (claimed_bytes < kRingControlBytes + kMinRingBytes) {
    return makeError(ErrorCode::kProtocol,
                     "ring of " + std::to_string(claimed_bytes) + " bytes is too small");
  }
  if (claimed_bytes > max_ring_bytes + kRingControlBytes) {
    return makeError(ErrorCode::kResourceExhausted, "ring of " + std::to_string(claimed_bytes) +
                                                        " bytes exceeds the limit of " +
                                                        std::to_string(max_ring_bytes));
  }
  if (static_cast<uint64_t>(st.st_size) != claimed_bytes) {
    return makeError(ErrorCode::kProtocol, "ring claims " + std::to_string(claimed_bytes) +
                                               " bytes but the memfd holds " +
                                               std::to_string(st.st_size));
  }
  // st_blocks counts allocated 512-byte units: a sparse memfd would make the daemon fault in
  // (and be charged for) the client's memory as it reads.
  if (static_cast<uint64_t>(st.st_blocks) * 512 < claimed_bytes) {
    return makeError(ErrorCode::kProtocol,
                     "ring memfd is sparse (" + std::to_string(uint64_t(st.st_blocks) * 512) +
                         " of " + std::to_string(claimed_bytes) +
                         " bytes allocated): the client must pre-fault its ring");
  }
  void* base = ::mmap(nullptr, claimed_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return sysError("mmap ring");
  RingMapping map(base, claimed_bytes);
  RingControl ctl_copy;
  std::memcpy(static_cast<void*>(&ctl_copy), base, offsetof(RingControl, head));
  const uint64_t capacity = ctl_copy.capacity;
  if (ctl_copy.magic != kRingMagic || ctl_copy.control_bytes != kRingControlBytes) {
    return makeError(ErrorCode::kProtocol, "ring control block has a bad magic");
  }
  if (ctl_copy.version != kRingVersion) {
    return makeError(ErrorCode::kProtocol,
                     "the client's ring format is version " + std::to_string(ctl_copy.version) +
                         ", this dumpd reads version " + std::to_string(kRingVersion) +
                         ": the client library and the daemon come from different dumpd " +
                         "releases; install the same release of both");
  }
  if (capacity % kRecordAlign != 0 || capacity < kMinRingBytes ||
      capacity > claimed_bytes - kRingControlBytes) {
    return makeError(ErrorCode::kProtocol,
                     "ring capacity " + std::to_string(capacity) + " does not fit its memfd");
  }
  RingConsumer c(std::move(memfd), std::move(map), capacity);
  // The producer may already have committed records; start from the released position.
  if (c.control()->tail.load(std::memory_order_acquire) != 0) {
    return makeError(ErrorCode::kProtocol, "new ring has a non-zero tail");
  }
  return c;
}

bool RingConsumer::hasData() const {
  return control()->head.load(std::memory_order_acquire) != read_;
}

Result<std::optional<RingConsumer::Record>> RingConsumer::next() {
  // Acquire pairs with the producer's store of head: bytes before it are visible.
  const uint64_t head = control()->head.load(std::memory_order_acquire);
  if (head == read_) return std::optional<Record>{};
  if (head < read_ || head - released_.load(std::memory_order_relaxed) > capacity_) {
    return makeError(ErrorCode::kProtocol,
                     "ring head " + std::to_string(head) + " is outside the valid window");
  }
  const uint64_t off = read_ % capacity_;
  RecordHeader h;
  std::memcpy(&h, data_ + off, sizeof h);  // copy first: the producer can still scribble
  const auto corrupt = [&](const std::string& why) {
    return makeError(ErrorCode::kProtocol,
                     "corrupt ring record at position " + std::to_string(read_) + ": " + why);
  };
  if (h.magic != kRecordMagic) return corrupt("bad magic");
  if (h.length < kRecordAlign || h.length % kRecordAlign != 0 || h.length > head - read_ ||
      off + h.length > capacity_) {
    return corrupt("bad length " + std::to_string(h.length));
  }
  const auto kind = static_cast<RecordKind>(h.kind);
  Record r{};
  r.kind = kind;
  r.end = read_ + h.length;
  if (kind == RecordKind::kPad) {
    if (off + h.length != capacity_) return corrupt("pad record does not end at the wrap");
    r.sequence = 0;
    r.body = nullptr;
    r.body_bytes = 0;
  } else if (kind == RecordKind::kOp || kind == RecordKind::kControl || kind == RecordKind::kVoid) {
    if (h.body_bytes > h.length - sizeof(RecordHeader)) return corrupt("body exceeds record");
    if (h.sequence != expect_sequence_) {
      return corrupt("sequence " + std::to_string(h.sequence) + ", expected " +
                     std::to_string(expect_sequence_));
    }
    ++expect_sequence_;
    r.sequence = h.sequence;
    r.body = data_ + off + sizeof(RecordHeader);
    r.body_bytes = h.body_bytes;
  } else {
    return corrupt("unknown kind " + std::to_string(h.kind));
  }
  read_ = r.end;
  return std::optional<Record>(r);
}

bool RingConsumer::release(uint64_t end) {
  if (end <= released_.load(std::memory_order_relaxed)) return false;
  released_.store(end, std::memory_order_relaxed);
  // seq_cst: Dekker handshake with RingProducer::waitForSpace; also a release, so our reads
  // of the freed bytes happen before the producer's next writes to them.
  control()->tail.store(end, std::memory_order_seq_cst);
  return control()->producer_waiting.load(std::memory_order_seq_cst) != 0;
}

void RingConsumer::wakeProducer() { futexBumpAndWake(control()->space_wake); }

bool RingConsumer::producerWaiting() const {
  return control()->producer_waiting.load(std::memory_order_seq_cst) != 0;
}

void RingConsumer::waitForData(int timeout_ms, bool wake_on_producer_wait) {
  const uint32_t seen = control()->data_wake.load(std::memory_order_seq_cst);
  control()->consumer_waiting.store(1, std::memory_order_seq_cst);
  if (control()->head.load(std::memory_order_seq_cst) == read_ &&
      !(wake_on_producer_wait && producerWaiting())) {
    futexWait(control()->data_wake, seen, timeout_ms);
  }
  control()->consumer_waiting.store(0, std::memory_order_relaxed);
}

void RingConsumer::wakeConsumer() { futexBumpAndWake(control()->data_wake); }

uint32_t RingConsumer::wakeValue() const {
  return control()->data_wake.load(std::memory_order_seq_cst);
}

void RingConsumer::waitForWake(uint32_t seen, int timeout_ms) {
  futexWait(control()->data_wake, seen, timeout_ms);
}

void RingConsumer::setClosing() {
  // seq_cst: pairs with the producer's seq_cst store of producer_busy and load of closing
  // in RingProducer::tryReserve (see producerBusy).
  control()->closing.store(1, std::memory_order_seq_cst);
  futexBumpAndWake(control()->space_wake);  // a producer waiting for space fails fast
  futexBumpAndWake(control()->data_wake);
}

void RingConsumer::requestFetch(uint64_t from_sequence, uint32_t through_iteration) {
  RingControl* c = control();
  // A seqlock: odd while the fields change, then the next even number (0: none yet). The
  // producer takes the fields only under one even generation (DevicePipeline).
  c->fetch_generation.store(++fetch_generation_, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  c->fetch_from_sequence.store(from_sequence, std::memory_order_relaxed);
  c->fetch_through_iteration.store(through_iteration, std::memory_order_relaxed);
  if (++fetch_generation_ == 0) fetch_generation_ = 2;  // wrapped: skip "none"
  c->fetch_generation.store(fetch_generation_, std::memory_order_release);
}

bool RingConsumer::producerBusy() const {
  return control()->producer_busy.load(std::memory_order_seq_cst) != 0;
}

uint64_t RingConsumer::committedPosition() const {
  // The client writes head: never past what the ring can hold beyond what was released.
  const uint64_t released = released_.load(std::memory_order_acquire);
  return std::min(control()->head.load(std::memory_order_acquire), released + capacity_);
}

uint64_t RingConsumer::usedBytes() const {
  const uint64_t head = control()->head.load(std::memory_order_relaxed);
  const uint64_t released = released_.load(std::memory_order_relaxed);
  return head >= released ? head - released : 0;
}

std::optional<uint32_t> RingConsumer::producerStep() const {
  const uint64_t v = control()->producer_step.load(std::memory_order_relaxed);
  if (v == 0 || v > uint64_t{UINT32_MAX} + 1) return std::nullopt;
  return static_cast<uint32_t>(v - 1);
}

uint64_t RingConsumer::droppedRecords() const {
  return control()->dropped_records.load(std::memory_order_relaxed);
}
uint64_t RingConsumer::droppedTensors() const {
  return control()->dropped_tensors.load(std::memory_order_relaxed);
}

}  // namespace dumpd::ipc
