#include "config/kernel_matcher.h"

#include <algorithm>
#include <exception>
#include <unordered_set>

#include "config/json_util.h"

namespace dumpd::config {
namespace {

constexpr std::string_view kRegexPrefix = "name-regex(";

// libstdc++'s std::regex matches by recursion, a few frames per character of the subject and
// per nested group. These bounds keep one match well inside a 2 MiB thread stack (measured),
// so a job config cannot crash the shared daemon. Longer names never match a regex entry.
constexpr size_t kMaxRegexBytes = 1024;
constexpr int kMaxRegexGroupDepth = 16;
constexpr size_t kMaxRegexSubjectBytes = 1024;

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

// Deepest nesting of '(' groups, skipping escapes and bracket expressions.
int groupDepth(std::string_view re) {
  int depth = 0;
  int max_depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    char c = re[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ')') {
      depth = std::max(0, depth - 1);
    }
  }
  return max_depth;
}

}  // namespace

std::string KernelMatcher::opTypeKey(std::string_view full_name) {
  size_t slash = full_name.rfind('/');
  std::string_view last = slash == std::string_view::npos ? full_name : full_name.substr(slash + 1);
  size_t dash = last.rfind('-');
  if (dash != std::string_view::npos) last = last.substr(0, dash);
  return toLowerAscii(last);
}

Result<KernelMatcher> KernelMatcher::create(const std::vector<std::string>& kernels) {
  KernelMatcher matcher;
  std::unordered_set<std::string> seen;
  for (const std::string& raw : kernels) {
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
      if (groupDepth(entry.key) > kMaxRegexGroupDepth) {
        return invalid("Dump config parse failed, kernels entry \"" + internal::printable(text) +
                       "\": regular expression nests groups deeper than " +
                       std::to_string(kMaxRegexGroupDepth));
      }
      try {
        entry.regex = std::regex(entry.key, std::regex::ECMAScript);
      } catch (const std::exception& e) {
        return invalid("Dump config parse failed, kernels entry \"" + internal::printable(text) +
                       "\" is not a valid regular expression: " + e.what());
      }
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
        if (full_name.size() <= kMaxRegexSubjectBytes) {
          try {
            hit = std::regex_match(full_name.begin(), full_name.end(), e.regex);
          } catch (const std::exception&) {
            hit = false;  // error_complexity / error_stack: treat as no match
          }
        }
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
