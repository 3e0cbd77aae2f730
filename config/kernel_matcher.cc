#include "config/kernel_matcher.h"

#include <memory>
#include <unordered_set>

#include <re2/re2.h>

#include "config/json_util.h"

namespace dumpd::config {
namespace {

constexpr std::string_view kRegexPrefix = "name-regex(";

// Why kRegexMaxMem is 256 KiB, not RE2's default 8 MiB (measured, libre2 2022-06, hostile
// patterns of at most kMaxRegexBytes): it caps the compiled program at about 20,000
// instructions, so the slowest compile found (counted repetitions such as `\w{1,1000}`,
// repeated) takes ~0.3 s instead of ~16 s, and the slowest match found (DFA cache exhausted,
// NFA fallback) ~1.5 s on a 4 KiB name (the protocol's longest) instead of ~5 s. Real op-name
// patterns compile to under 100 instructions, a 1 KiB alternation of full names to ~450.
RE2::Options regexOptions() {
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingLatin1);  // bytes, as std::regex<char> in MindSpore
  o.set_case_sensitive(true);
  o.set_log_errors(false);  // a refused pattern is reported as a config error instead
  o.set_max_mem(KernelMatcher::kRegexMaxMem);
  return o;
}

Error invalid(std::string message) {
  return makeError(ErrorCode::kInvalidConfig, std::move(message));
}

std::string normalise(std::string_view entry) {
  std::string out;
  out.reserve(entry.size());
  for (char c : entry) {
    if (c != '"' && c != ' ') out += c;
  }
  return out;
}

std::string toLowerAscii(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

std::string KernelMatcher::opTypeKey(std::string_view full_name) {
  size_t slash = full_name.rfind('/');
  std::string_view last = slash == std::string_view::npos ? full_name : full_name.substr(slash + 1);
  size_t dash = last.rfind('-');
  if (dash != std::string_view::npos) last = last.substr(0, dash);
  return toLowerAscii(last);
}

Result<KernelMatcher> KernelMatcher::create(const std::vector<std::string>& kernels,
                                            const std::atomic<bool>* cancel) {
  KernelMatcher matcher;
  std::unordered_set<std::string> seen;
  for (const std::string& raw : kernels) {
    // Relaxed: a late look at the flag only costs one more entry's compile time.
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      return makeError(ErrorCode::kUnavailable, "compiling the kernels list was cancelled");
    }
    std::string text = normalise(raw);
    if (text.empty()) continue;
    // A repeated entry adds nothing (MindSpore warns and keeps one).
    if (!seen.insert(text).second) continue;

    Entry entry;
    entry.text = text;
    if (text.size() > kRegexPrefix.size() && text.starts_with(kRegexPrefix) && text.back() == ')') {
      entry.kind = Kind::kRegex;
      entry.key = text.substr(kRegexPrefix.size(), text.size() - kRegexPrefix.size() - 1);
      if (entry.key.size() > kMaxRegexBytes) {
        return invalid("Dump config parse failed, kernels entry \"" + internal::printable(text) +
                       "\": regular expression longer than " + std::to_string(kMaxRegexBytes) +
                       " bytes");
      }
      auto re = std::make_shared<const RE2>(entry.key, regexOptions());
      if (!re->ok()) {
        std::string hint = re->error_code() == RE2::ErrorPatternTooLarge
                               ? "dumpd compiles each regular expression within " +
                                     std::to_string(kRegexMaxMem >> 10) + " KiB"
                               : "dumpd uses RE2 syntax";
        return invalid("Dump config parse failed, kernels entry \"" + internal::printable(text) +
                       "\": unsupported regular expression: " + internal::printable(re->error()) +
                       " (" + hint + ", see docs/compatibility.md)");
      }
      entry.regex = std::move(re);
    } else if (text.find('/') != std::string::npos || text.find("-op") != std::string::npos) {
      entry.kind = Kind::kFullName;
      entry.key = text;
    } else {
      entry.kind = Kind::kOpType;
      entry.key = toLowerAscii(text);
    }
    matcher.entries_.push_back(std::move(entry));
  }
  return matcher;
}

bool KernelMatcher::matches(std::string_view full_name) {
  if (entries_.empty()) return true;
  std::string op_type;  // computed on first need
  bool op_type_ready = false;
  bool matched = false;
  // Every entry is evaluated until it has matched once, so unusedEntries() reports only
  // entries that match nothing (not ones shadowed by an earlier entry); entries already
  // marked are skipped once the answer is known.
  for (Entry& e : entries_) {
    if (matched && e.used) continue;
    bool hit = false;
    switch (e.kind) {
      case Kind::kRegex:
        hit = RE2::FullMatch(re2::StringPiece(full_name.data(), full_name.size()), *e.regex);
        break;
      case Kind::kFullName:
        hit = full_name == e.key;
        break;
      case Kind::kOpType:
        if (!op_type_ready) {
          op_type = opTypeKey(full_name);
          op_type_ready = true;
        }
        hit = op_type.find(e.key) != std::string::npos;
        break;
    }
    if (hit) {
      e.used = true;
      matched = true;
    }
  }
  return matched;
}

std::vector<std::string> KernelMatcher::unusedEntries() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    if (!e.used) out.push_back(e.text);
  }
  return out;
}

}  // namespace dumpd::config
