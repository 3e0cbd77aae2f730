#include "daemon/clock.h"

namespace dumpd::daemon {
namespace {

class AsioTimer final : public Timer {
 public:
  explicit AsioTimer(asio::io_context& io) : timer_(io) {}

  void waitUntil(TimePoint when, std::function<void()> on_expiry) override {
    timer_.expires_at(when);  // cancels a pending wait (its handler sees operation_aborted)
    timer_.async_wait([h = std::move(on_expiry)](const boost::system::error_code& ec) {
      if (!ec) h();
    });
  }
  void cancel() override { timer_.cancel(); }

 private:
  asio::steady_timer timer_;
};

}  // namespace

std::unique_ptr<Timer> SteadyClock::makeTimer(asio::io_context& io) {
  return std::make_unique<AsioTimer>(io);
}

}  // namespace dumpd::daemon
