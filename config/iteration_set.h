// The `iteration` string of a job config: "all", "none" (dumpd: no iteration, for a job that
// only keeps the recent past in its flight recorder), or '|'-separated segments "N" /
// "LOW-HIGH".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace dumpd::config {

// Immutable set of iterations. Thread-compatible (const methods may run concurrently).
class IterationSet {
 public:
  IterationSet() = default;  // empty set: matches nothing
  static IterationSet all();

  // Accepts "all", "none" (the empty set; MindSpore refuses it: docs/compatibility.md) or
  // segments separated by '|', with optional spaces around each segment (dumpd deviation). A
  // malformed segment ("5-3", "-1", "5-", "1-2-3", "") is an error that names it (MindSpore
  // silently never matches it). Values must fit in uint32.
  static Result<IterationSet> parse(std::string_view text);

  bool contains(uint32_t iteration) const;
  bool isAll() const { return all_; }
  bool isNone() const { return !all_ && ranges_.empty(); }
  // Canonical text: "all", "none", or merged ranges "0|5-8|100-120".
  std::string toString() const;
  // Merged, sorted inclusive ranges (empty when isAll()).
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  bool all_ = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

}  // namespace dumpd::config
