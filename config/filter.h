// The one answer to "should this tensor be dumped?" for a job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/io.h"
#include "config/dump_plan.h"
#include "config/kernel_matcher.h"

namespace dumpd::config {

// Combines device, iteration, kernel, IO and set_dump-mark rules of a DumpPlan.
// Thread-compatible: the per-name cache mutates, so each session/client owns one Filter.
class Filter {
 public:
  static Result<Filter> create(const DumpPlan& plan);

  // Device and iteration gate (cheap; checked once per step).
  bool deviceSelected(uint32_t device) const;
  bool iterationSelected(uint32_t iteration) const;
  bool ioSelected(Io io) const;
  // A new iteration selection (dumpctl control); the rest of the rules stay.
  void setIterations(IterationSet iterations) { iterations_ = std::move(iterations); }
  // Kernel rule only (dump_mode 1 list; dump_mode 2 uses `marked`). Cached per op name:
  // after the first call for a name a lookup costs one hash.
  bool opSelected(std::string_view op_full_name, bool marked = false);

  // All rules together.
  bool shouldDump(uint32_t device, uint32_t iteration, std::string_view op_full_name, Io io,
                  bool marked = false) {
    return deviceSelected(device) && iterationSelected(iteration) && ioSelected(io) &&
           opSelected(op_full_name, marked);
  }

  const KernelMatcher& matcher() const { return matcher_; }
  std::vector<std::string> unusedKernels() const { return matcher_.unusedEntries(); }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  DumpMode mode_ = DumpMode::kAll;
  IoSelect io_ = IoSelect::kBoth;
  IterationSet iterations_;
  std::vector<uint32_t> devices_;
  uint32_t initial_iteration_ = 0;
  KernelMatcher matcher_;
  std::unordered_map<std::string, bool, StringHash, std::equal_to<>> cache_;
};

}  // namespace dumpd::config
