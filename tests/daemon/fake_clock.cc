#include "tests/daemon/fake_clock.h"

#include <utility>
#include <vector>

namespace dumpd::daemon::testing {

struct FakeClock::Shared {
  struct Armed {
    TimePoint when;
    std::function<void()> handler;
    asio::io_context* io;
  };
  mutable std::mutex mu;
  TimePoint now = TimePoint(std::chrono::hours(1000));  // guarded by mu
  uint64_t next_id = 1;                                 // guarded by mu
  std::map<uint64_t, Armed> armed;                      // guarded by mu
};

namespace {

class FakeTimer final : public Timer {
 public:
  FakeTimer(std::shared_ptr<FakeClock::Shared> shared, asio::io_context& io)
      : shared_(std::move(shared)), io_(io) {
    std::lock_guard lock(shared_->mu);
    id_ = shared_->next_id++;
  }
  ~FakeTimer() override { cancel(); }

  void waitUntil(TimePoint when, std::function<void()> on_expiry) override {
    std::unique_lock lock(shared_->mu);
    shared_->armed.erase(id_);
    if (when > shared_->now) {
      shared_->armed[id_] = {when, std::move(on_expiry), &io_};
      return;
    }
    lock.unlock();
    asio::post(io_, std::move(on_expiry));  // already due, as an Asio timer would be
  }
  void cancel() override {
    std::lock_guard lock(shared_->mu);
    shared_->armed.erase(id_);
  }

 private:
  const std::shared_ptr<FakeClock::Shared> shared_;
  asio::io_context& io_;
  uint64_t id_ = 0;
};

}  // namespace

FakeClock::FakeClock() : shared_(std::make_shared<Shared>()) {}

TimePoint FakeClock::now() const {
  std::lock_guard lock(shared_->mu);
  return shared_->now;
}

std::unique_ptr<Timer> FakeClock::makeTimer(asio::io_context& io) {
  return std::make_unique<FakeTimer>(shared_, io);
}

void FakeClock::advance(std::chrono::nanoseconds by) {
  std::vector<Shared::Armed> due;
  {
    std::lock_guard lock(shared_->mu);
    shared_->now += by;
    for (auto it = shared_->armed.begin(); it != shared_->armed.end();) {
      if (it->second.when <= shared_->now) {
        due.push_back(std::move(it->second));
        it = shared_->armed.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Outside the lock: a handler may arm its timer again.
  for (Shared::Armed& a : due) asio::post(*a.io, std::move(a.handler));
}

size_t FakeClock::armedTimers() const {
  std::lock_guard lock(shared_->mu);
  return shared_->armed.size();
}

}  // namespace dumpd::daemon::testing
