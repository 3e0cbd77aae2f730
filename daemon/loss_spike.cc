#include "daemon/loss_spike.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dumpd::daemon {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

double LossSpikeDetector::median() const {
  std::vector<double> v(losses_.begin(), losses_.end());
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return lower + (upper - lower) / 2;
}

std::optional<std::string> LossSpikeDetector::report(double loss) {
  if (!std::isfinite(loss)) {
    trigger_window_ = recent();
    if (std::isnan(loss)) return std::string("loss nan");
    return std::string(loss > 0 ? "loss inf" : "loss -inf");
  }
  std::optional<std::string> reason;
  if (losses_.size() == window_) {
    const double m = median();
    const double limit = m + (factor_ - 1) * std::fabs(m);
    if (loss > limit) {
      trigger_window_ = recent();
      reason = "loss " + number(loss) + " > " + number(factor_) + " x median " + number(m) +
               " of the last " + std::to_string(window_);
    }
  }
  losses_.push_back(loss);
  if (losses_.size() > window_) losses_.pop_front();
  return reason;
}

}  // namespace dumpd::daemon
