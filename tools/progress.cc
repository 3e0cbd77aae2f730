#include "tools/progress.h"

#include <cstdio>

namespace dumpd::tools {

ProgressBar::ProgressBar(std::ostream& out, bool enabled, uint64_t total_pairs)
    : out_(out), total_(total_pairs), start_(std::chrono::steady_clock::now()) {
  if (enabled) thread_ = std::thread([this] { loop(); });
}

ProgressBar::~ProgressBar() { stop(); }

void ProgressBar::add(uint64_t pairs, uint64_t bytes) {
  pairs_.fetch_add(pairs, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

void ProgressBar::stop() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  wake_.signal();
  thread_.join();
  draw();
  out_ << '\n' << std::flush;
}

std::string ProgressBar::render(uint64_t done, uint64_t total, uint64_t bytes, double seconds) {
  constexpr int kWidth = 20;
  const double fraction = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar = "[";
  bar.append(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  bar.push_back(']');
  char text[128];
  std::snprintf(text, sizeof text, " %d%% %llu/%llu pairs %.1f GB/s",
                static_cast<int>(fraction * 100), static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(total),
                seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0);
  bar.append(text);
  return bar;
}

void ProgressBar::draw() {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  out_ << '\r'
       << render(pairs_.load(std::memory_order_relaxed), total_,
                 bytes_.load(std::memory_order_relaxed), seconds)
       << std::flush;
}

void ProgressBar::loop() {
  constexpr auto kPeriod = std::chrono::milliseconds(200);
  MutexLock lock(&mu_);
  auto next_draw = std::chrono::steady_clock::now() + kPeriod;
  while (!stopping_) {
    if (wake_.waitUntil(&mu_, next_draw) || stopping_) continue;  // woken: look at stopping_ again
    lock.unlock();
    draw();
    lock.lock();
    next_draw = std::chrono::steady_clock::now() + kPeriod;
  }
}

}  // namespace dumpd::tools
