#include "tests/client/fake_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/dtype_visit.h"
#include "ipc/ring_format.h"

namespace dumpd::testing {

thread_local int FakeDevice::current_device_ = 0;

// Each record is its own instance: a wait captures the instance recorded last at call time
// (an event re-recorded on another stream does not release earlier waiters).
struct FakeDevice::Event {
  struct Instance {
    bool done = false;
    bool failed = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<Instance> latest;  // nullptr: never recorded (waits return at once)
};

struct FakeDevice::Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0;
  uint64_t done = 0;
  bool stop = false;
  std::thread thread;
  std::mt19937 rng;
  int max_delay_us = 0;

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      std::function<void()> fn = std::move(queue.front());
      queue.pop_front();
      const int delay = max_delay_us > 0 ? static_cast<int>(rng() % (max_delay_us + 1)) : 0;
      lock.unlock();
      if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
      fn();
      lock.lock();
      ++done;
      cv.notify_all();
    }
  }
  void push(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back(std::move(fn));
    ++queued;
    cv.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t target = queued;
    cv.wait(lock, [&] { return done >= target; });
  }
};

FakeDevice::FakeDevice(Config config) : config_(config), rng_(config.seed) {
  auto s = std::make_unique<Stream>();
  s->rng.seed(config.seed * 7919u + 1);
  s->max_delay_us = config.max_delay_us;
  s->thread = std::thread([p = s.get()] { p->run(); });
  default_stream_ = s.get();
  streams_.push_back(std::move(s));
}

FakeDevice::~FakeDevice() {
  for (auto& s : streams_) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->stop = true;
    }
    s->cv.notify_all();
    s->thread.join();
  }
  for (Event* e : events_) delete e;
  for (auto& [p, n] : allocations_) std::free(reinterpret_cast<void*>(p));
}

Result<int> FakeDevice::setDevice(int device) {
  if (device < 0 || device >= config_.devices) {
    return makeError(ErrorCode::kInvalidArgument, "fake: no device " + std::to_string(device));
  }
  const int prev = current_device_;
  current_device_ = device;
  return prev;
}

int FakeDevice::currentDevice() const { return current_device_; }

Result<void*> FakeDevice::allocate(size_t bytes) {
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return makeError(ErrorCode::kResourceExhausted, "fake: out of memory");
  std::memset(p, 0xEE, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  allocations_.emplace_back(reinterpret_cast<uintptr_t>(p), bytes);
  return p;
}

// Like cudaFree, freeing waits for the work already queued on every stream: a kernel
// enqueued before the free may still be using the memory.
void FakeDevice::free(void* p) {
  synchronize();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = allocations_.begin(); it != allocations_.end(); ++it) {
    if (it->first == reinterpret_cast<uintptr_t>(p)) {
      std::free(p);
      allocations_.erase(it);
      return;
    }
  }
}

size_t FakeDevice::liveAllocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_.size();
}

Status FakeDevice::registerHost(void* host, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  registered_.emplace_back(reinterpret_cast<uintptr_t>(host), bytes);
  return {};
}

void FakeDevice::unregisterHost(void* host) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(registered_, [&](auto& r) { return r.first == reinterpret_cast<uintptr_t>(host); });
}

Result<void*> FakeDevice::hostDevicePointer(void* host) {
  if (!hostRegistered(host, 1)) {
    return makeError(ErrorCode::kInvalidArgument, "fake: host memory is not registered");
  }
  return host;
}

bool FakeDevice::hostRegistered(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (auto& [b, n] : registered_) {
    if (a >= b && a + bytes <= b + n) return true;
  }
  return false;
}

bool FakeDevice::hostStillRegistered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !registered_.empty();
}

bool FakeDevice::isHost(const void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (auto& [b, n] : allocations_) {
    if (a >= b && a < b + n) return false;
  }
  return true;
}

Result<client::StreamHandle> FakeDevice::createStream() {
  auto s = std::make_unique<Stream>();
  std::lock_guard<std::mutex> lock(mu_);
  s->rng.seed(static_cast<uint32_t>(rng_()));
  s->max_delay_us = config_.max_delay_us;
  s->thread = std::thread([p = s.get()] { p->run(); });
  Stream* raw = s.get();
  streams_.push_back(std::move(s));
  return static_cast<client::StreamHandle>(raw);
}

void FakeDevice::destroyStream(client::StreamHandle) {}  // joined at destruction

FakeDevice::Stream* FakeDevice::streamOf(client::StreamHandle s) {
  return s == nullptr ? default_stream_ : static_cast<Stream*>(s);
}

Result<client::EventHandle> FakeDevice::createEvent(bool) {
  auto* e = new Event;
  std::lock_guard<std::mutex> lock(mu_);
  events_.insert(e);
  return static_cast<client::EventHandle>(e);
}

void FakeDevice::destroyEvent(client::EventHandle h) {
  auto* e = static_cast<Event*>(h);
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.erase(e) != 0) delete e;
}

size_t FakeDevice::liveEvents() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

Status FakeDevice::copyAsync(void* dst, const void* src, size_t bytes, client::StreamHandle s) {
  const uint64_t n = copies_.fetch_add(1);
  if (config_.fail_copy_number >= 0 && static_cast<int64_t>(n) == config_.fail_copy_number) {
    return makeError(ErrorCode::kIo, "fake: injected copy failure");
  }
  if (isHost(dst) && !hostRegistered(dst, bytes)) unpinned_copies_.fetch_add(1);
  streamOf(s)->push([dst, src, bytes] {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  });
  return {};
}

namespace {

// Element i as a double, decoded here independently of the daemon's code (only the dispatch on
// the dtype is shared: base/dtype_visit.h, tested on its own).
double fakeElement(DType dtype, const unsigned char* p, uint64_t i) {
  auto load = [&]<typename T>(T) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof v);
    return v;
  };
  return visitDType(dtype,
                    Overloaded{
                        [&]<typename T>(DTypeTag<T>) { return static_cast<double>(load(T{})); },
                        [&](BoolTag) -> double { return p[i] != 0 ? 1 : 0; },
                        [&](UInt1Tag) -> double { return p[i]; },
                        [&](Float16Tag) {
                          const uint16_t h = load(uint16_t{});
                          const int exponent = (h >> 10) & 0x1f;
                          const double mantissa = h & 0x3ff;
                          const double sign = (h & 0x8000) ? -1 : 1;
                          if (exponent == 0x1f) {
                            return mantissa != 0 ? std::nan("")
                                                 : sign * std::numeric_limits<double>::infinity();
                          }
                          if (exponent == 0) return sign * std::ldexp(mantissa, -24);
                          return sign * std::ldexp(1024 + mantissa, exponent - 25);
                        },
                        [&](BFloat16Tag) -> double {
                          const uint32_t bits = static_cast<uint32_t>(load(uint16_t{})) << 16;
                          float f;
                          std::memcpy(&f, &bits, sizeof f);
                          return f;
                        },
                        [&](Int4Tag) -> double {
                          const int nibble = (i & 1) ? p[i / 2] >> 4 : p[i / 2] & 0xf;
                          return nibble >= 8 ? nibble - 16 : nibble;
                        },
                        // No statistics for complex tensors.
                        []<typename T>(ComplexTag<T>) { return std::nan(""); },
                        [](UnknownDType) { return std::nan(""); },
                    });
}

}  // namespace

Result<uint32_t*> FakeDevice::counterWords(size_t count) {
  auto p = allocate(count * sizeof(uint32_t));
  if (!p) return p.error();
  std::memset(p.value(), 0, count * sizeof(uint32_t));
  return static_cast<uint32_t*>(p.value());
}

Status FakeDevice::statisticsAsync(void* result, void* scratch, uint32_t* counter, const void* src,
                                   uint64_t elements, DType dtype, client::StreamHandle s) {
  statistics_.fetch_add(1);
  if (counter != nullptr) {
    counter_launches_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    if (!held_counters_.insert(counter).second || *counter != 0) counter_conflicts_.fetch_add(1);
  }
  if (isHost(result) && !hostRegistered(result, sizeof(ipc::StatsPayload))) {
    unpinned_copies_.fetch_add(1);  // a kernel cannot write host memory that is not mapped
  }
  streamOf(s)->push([this, result, scratch, counter, src, elements, dtype] {
    std::memset(scratch, 0x5a, 64);
    const auto* p = static_cast<const unsigned char*>(src);
    ipc::StatsPayload r{};
    r.count = elements;
    r.max = -std::numeric_limits<double>::infinity();
    r.min = std::numeric_limits<double>::infinity();
    for (uint64_t i = 0; i < elements; ++i) {
      const double x = fakeElement(dtype, p, i);
      if (std::isnan(x)) {
        ++r.nan;
        continue;
      }
      r.max = std::max(r.max, x);
      r.min = std::min(r.min, x);
      r.sum += x;
      r.sum_squares += x * x;
      r.negative += x < 0;
      r.positive += x > 0;
      r.zero += x == 0;
      r.negative_inf += std::isinf(x) && x < 0;
      r.positive_inf += std::isinf(x) && x > 0;
    }
    std::memcpy(result, &r, sizeof r);
    if (counter != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      held_counters_.erase(counter);
    }
  });
  return {};
}

Status FakeDevice::recordEvent(client::EventHandle h, client::StreamHandle s) {
  auto* e = static_cast<Event*>(h);
  bool fail = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail = config_.fail_event_number >= 0 && events_recorded_ == config_.fail_event_number;
    ++events_recorded_;
  }
  auto inst = std::make_shared<Event::Instance>();
  {
    std::lock_guard<std::mutex> lock(e->mu);
    e->latest = inst;
  }
  streamOf(s)->push([e, inst, fail] {
    std::lock_guard<std::mutex> lock(e->mu);
    inst->failed = fail;
    inst->done = true;
    e->cv.notify_all();
  });
  return {};
}

Status FakeDevice::streamWaitEvent(client::StreamHandle s, client::EventHandle h) {
  auto* e = static_cast<Event*>(h);
  std::shared_ptr<Event::Instance> inst;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    inst = e->latest;
  }
  if (!inst) return {};
  streamOf(s)->push([e, inst] {
    std::unique_lock<std::mutex> lock(e->mu);
    e->cv.wait(lock, [&] { return inst->done; });
  });
  return {};
}

Status FakeDevice::waitEvent(client::EventHandle h) {
  auto* e = static_cast<Event*>(h);
  std::unique_lock<std::mutex> lock(e->mu);
  const std::shared_ptr<Event::Instance> inst = e->latest;
  if (!inst) return {};
  e->cv.wait(lock, [&] { return inst->done; });
  if (inst->failed) return makeError(ErrorCode::kIo, "fake: injected asynchronous failure");
  return {};
}

void FakeDevice::enqueue(client::StreamHandle s, std::function<void()> fn) {
  streamOf(s)->push(std::move(fn));
}

void FakeDevice::synchronize() {
  std::vector<Stream*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : streams_) all.push_back(s.get());
  }
  for (Stream* s : all) s->drain();
}

}  // namespace dumpd::testing
