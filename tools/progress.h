// A one-line progress bar for a terminal: "\r[#####.....] 45% 123/456 pairs 1.2 GB/s", redrawn
// by its own thread every 200 ms until stop(), which draws the final state and ends the line.
//
// Thread-safety: add() may be called from any thread at any time; the constructor, stop() and
// the destructor belong to the owner.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <thread>

#include "base/mutex.h"

namespace dumpd::tools {

class ProgressBar {
 public:
  // Draws on `out` when `enabled` (the caller decides: a terminal, no -q); otherwise add() only
  // counts and nothing is drawn.
  ProgressBar(std::ostream& out, bool enabled, uint64_t total_pairs);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void add(uint64_t pairs, uint64_t bytes);
  void stop();

  // The bar for `done` of `total` pairs after `seconds` (the text drawn after '\r').
  static std::string render(uint64_t done, uint64_t total, uint64_t bytes, double seconds);

 private:
  void draw();
  void loop();

  std::ostream& out_;
  const uint64_t total_;
  const std::chrono::steady_clock::time_point start_;
  // relaxed: counters only; the drawing thread reads a recent value, stop() joins first.
  std::atomic<uint64_t> pairs_{0};
  std::atomic<uint64_t> bytes_{0};
  Mutex mu_;
  CondVar wake_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace dumpd::tools
