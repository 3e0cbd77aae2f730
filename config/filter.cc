#include "config/filter.h"

#include <algorithm>

namespace dumpd::config {
namespace {

// Bounds the per-name cache: a producer sending endless distinct names (a bug or a hostile
// client) costs a matcher call per record past this point, never unbounded memory.
constexpr size_t kMaxCachedNames = 1 << 16;

}  // namespace

Result<Filter> Filter::create(const DumpPlan& plan) {
  Filter f;
  f.mode_ = plan.dump_mode;
  f.io_ = plan.input_output;
  f.iterations_ = plan.iterations;
  f.devices_ = plan.support_device;
  std::sort(f.devices_.begin(), f.devices_.end());
  f.initial_iteration_ = plan.initial_iteration;
  if (plan.dump_mode == DumpMode::kKernels) {
    if (plan.compiled_kernels) {
      f.matcher_ = *plan.compiled_kernels;  // copies share the compiled patterns
    } else {
      auto matcher = KernelMatcher::create(plan.kernels);
      if (!matcher) return matcher.error();
      f.matcher_ = std::move(matcher).value();
    }
  }
  return f;
}

bool Filter::deviceSelected(uint32_t device) const {
  return std::binary_search(devices_.begin(), devices_.end(), device);
}

// `iteration` is the producer's counter value, which already started at initial_iteration:
// it is compared as is (the directory name is the same number).
bool Filter::iterationSelected(uint32_t iteration) const { return iterations_.contains(iteration); }

bool Filter::ioSelected(Io io) const {
  switch (io_) {
    case IoSelect::kBoth:
      return true;
    case IoSelect::kInputs:
      return io == Io::kInput;
    case IoSelect::kOutputs:
      return io == Io::kOutput;
  }
  return false;
}

bool Filter::opSelected(std::string_view op_full_name, bool marked) {
  switch (mode_) {
    case DumpMode::kAll:
      return true;
    case DumpMode::kMarked:
      return marked;
    case DumpMode::kKernels:
      break;
  }
  if (matcher_.matchesEverything()) return true;
  // Heterogeneous lookup: hashing the string_view, no std::string is built on a hit.
  auto it = cache_.find(op_full_name);
  if (it != cache_.end()) return it->second;
  bool selected = matcher_.matches(op_full_name);
  if (cache_.size() < kMaxCachedNames) cache_.emplace(std::string(op_full_name), selected);
  return selected;
}

}  // namespace dumpd::config
