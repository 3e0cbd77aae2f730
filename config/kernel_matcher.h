// Kernel matching for dump_mode 1 (MindSpore semantics): regex, full name, or op type.
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.h"

namespace dumpd::config {

// Thread-compatible: matches() updates per-entry "used" flags, so one instance belongs to one
// thread (each session owns its own).
class KernelMatcher {
 public:
  KernelMatcher() = default;  // matches everything

  // Normalises each entry (strips '"' and spaces, skips empties) and classifies it:
  // "name-regex(RE)" -> ECMAScript regex over the whole full name; an entry containing '/'
  // or "-op" -> full-name equality; anything else -> lower-cased substring of the op type
  // (last path component cut at its last '-'). An invalid regex is an error naming it, as is
  // one longer than 1024 bytes or nesting groups deeper than 16 (std::regex recurses; these
  // bounds keep a match inside a small thread stack). Duplicate entries count once.
  static Result<KernelMatcher> create(const std::vector<std::string>& kernels);

  // True if the op's full scope name matches any entry (or the list is effectively empty).
  // Marks every entry that matches. Regex entries never match names over 1024 bytes.
  bool matches(std::string_view full_name);

  bool matchesEverything() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

  // Entries (normalised text) that never matched any name passed to matches().
  std::vector<std::string> unusedEntries() const;

  // "Conv2D-op12" out of "Default/net/Conv2D-op12" -> "conv2d".
  static std::string opTypeKey(std::string_view full_name);

 private:
  enum class Kind : uint8_t { kRegex, kFullName, kOpType };
  struct Entry {
    Kind kind;
    std::string text;  // normalised entry as written (for reports)
    std::string key;   // full name, lower-cased op type, or regex source
    std::regex regex;
    bool used = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace dumpd::config
