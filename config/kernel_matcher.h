// Kernel matching for dump_mode 1 (MindSpore semantics): regex, full name, or op type.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace dumpd::config {

// Thread-compatible: matches() updates per-entry "used" flags, so one instance belongs to one
// thread (each session owns its own).
class KernelMatcher {
 public:
  KernelMatcher() = default;  // matches everything

  // Normalises each entry (strips '"' and spaces, skips empties) and classifies it:
  // "name-regex(RE)" -> RE2 regular expression over the whole full name (bytes, case
  // sensitive); an entry containing '/' or "-op" -> full-name equality; anything else ->
  // lower-cased substring of the op type (last path component cut at its last '-'). A regex
  // that RE2 refuses (bad or unsupported syntax, or a compiled program over kRegexMaxMem) or
  // one longer than kMaxRegexBytes is an error naming the entry. Duplicate entries count once.
  // With `cancel` set and true, compiling stops at the next entry with a kUnavailable error.
  static Result<KernelMatcher> create(const std::vector<std::string>& kernels,
                                      const std::atomic<bool>* cancel = nullptr);

  // True if the op's full scope name matches any entry (or the list is effectively empty).
  // Marks every entry that matches. A regex costs time linear in the name's length.
  bool matches(std::string_view full_name);

  bool matchesEverything() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }

  // Entries (normalised text) that never matched any name passed to matches().
  std::vector<std::string> unusedEntries() const;

  // "Conv2D-op12" out of "Default/net/Conv2D-op12" -> "conv2d".
  static std::string opTypeKey(std::string_view full_name);

  // Longest regex source accepted, in bytes.
  static constexpr size_t kMaxRegexBytes = 1024;
  // RE2's max_mem for each regex entry: its compiled program and its lazily built DFA cache.
  // It bounds matching time too: at worst (DFA cache exhausted, NFA fallback) RE2 takes time
  // proportional to the name's length times the program's size. See kernel_matcher.cc.
  static constexpr int64_t kRegexMaxMem = 256 << 10;

 private:
  enum class Kind : uint8_t { kRegex, kFullName, kOpType };
  struct Entry {
    Kind kind;
    std::string text;  // normalised entry as written (for reports)
    std::string key;   // full name, lower-cased op type, or regex source
    // Set for kRegex. Shared by copies of the matcher: matching is const and RE2 is
    // thread-safe for it.
    std::shared_ptr<const re2::RE2> regex;
    bool used = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace dumpd::config
