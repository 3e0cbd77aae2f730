// The daemon core's time seam: the steady time every deadline, uptime and refresh decision
// reads (sessions, connections, the server), and the one-shot timers of the io thread (the
// handshake timeout, the shutdown give-up, the accept back-off).
//
// SteadyClock is the production clock (std::chrono::steady_clock, Asio timers); tests drive a
// fake one (tests/daemon/fake_clock.h) whose time moves only when the test says so. Injected
// through Server and SessionContext (daemon/session_env.h); there is no global clock.
//
// Thread-safety: Clock::now() may be called from any thread; makeTimer() and every Timer
// method run on the io thread that owns the timer's io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "ipc/asio.h"

namespace dumpd::daemon {

using TimePoint = std::chrono::steady_clock::time_point;

// Wall-clock microseconds since the epoch, for the time_us of journal lines (never deadlines).
inline uint64_t wallClockMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// A one-shot timer whose handler runs on its io_context.
class Timer {
 public:
  // Destroying a timer cancels its wait.
  virtual ~Timer() = default;
  // Runs `on_expiry` once `when` has passed. A later waitUntil() or cancel() drops the wait;
  // as with an Asio timer, a handler already due at that moment may still run, so handlers
  // check their own state.
  virtual void waitUntil(TimePoint when, std::function<void()> on_expiry) = 0;
  virtual void cancel() = 0;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
  virtual std::unique_ptr<Timer> makeTimer(asio::io_context& io) = 0;
};

// std::chrono::steady_clock and asio::steady_timer.
class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  std::unique_ptr<Timer> makeTimer(asio::io_context& io) override;
};

}  // namespace dumpd::daemon
