// The flight recorder's loss_spike trigger: the trainer reports its loss each step; a loss that
// is NaN or infinite, or above `factor` x the median of the last `window` reported losses,
// triggers. Decided once `window` finite losses have been reported (early training is too
// volatile for a median of a few). For a negative median (a log-likelihood loss), "factor x"
// is read as "median + (factor - 1) x |median|", so a spike is always upwards.
//
// Thread-safety: none; the session thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace dumpd::daemon {

class LossSpikeDetector {
 public:
  LossSpikeDetector(uint32_t window, double factor) : window_(window), factor_(factor) {}

  // Records `loss`; a reason ("loss nan", "loss 9.5 > 3 x median 2.1 of the last 50") when it
  // triggers. A NaN or infinite loss does not enter the window.
  std::optional<std::string> report(double loss);

  // The last reported losses, oldest first.
  std::vector<double> recent() const { return {losses_.begin(), losses_.end()}; }
  // The window the last trigger was decided on, oldest first (triggers.jsonl), without the
  // loss that triggered.
  const std::vector<double>& windowAtLastTrigger() const { return trigger_window_; }

 private:
  double median() const;

  const uint32_t window_;
  const double factor_;
  std::deque<double> losses_;  // at most window_, the newest last
  std::vector<double> trigger_window_;
};

}  // namespace dumpd::daemon
