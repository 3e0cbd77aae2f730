// A Clock for tests whose time moves only when the test calls advance(). Timers whose time has
// come then post their handlers to their io_context, which the test runs; a deadline or a
// timeout can be passed without waiting for it.
//
// Thread-safety: now() and advance() from any thread (session threads read the time while the
// test moves it); makeTimer() and the timers on the thread that runs their io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "daemon/clock.h"

namespace dumpd::daemon::testing {

class FakeClock final : public Clock {
 public:
  // Starts at a fixed time far from the epoch (a zero time point is nobody's "now").
  FakeClock();

  TimePoint now() const override;
  std::unique_ptr<Timer> makeTimer(asio::io_context& io) override;

  // Moves time forward by `by`; every timer due by then posts its handler.
  void advance(std::chrono::nanoseconds by);
  // Timers waiting for their time.
  size_t armedTimers() const;

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;  // timers hold it too, so they may outlive the clock
};

}  // namespace dumpd::daemon::testing
