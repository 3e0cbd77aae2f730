#include "config/iteration_set.h"

#include <algorithm>
#include <limits>

#include "config/json_util.h"

namespace dumpd::config {
namespace {

Error invalid(std::string message) {
  return makeError(ErrorCode::kInvalidConfig, std::move(message));
}

// MindSpore's own message for a string outside its alphabet (spaces are our addition).
Error charsetError(std::string_view text) {
  return invalid("iteration only supports digits, {'-', '|'}, or just \"all\" but got: " +
                 internal::printable(text));
}

Error segmentError(std::string_view segment, std::string_view why, std::string_view text) {
  return invalid("iteration segment \"" + internal::printable(segment) + "\" is malformed (" +
                 std::string(why) + ") in: " + internal::printable(text));
}

bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Decimal digits only, value <= UINT32_MAX. Leading zeros are fine ("007" is 7).
bool parseNumber(std::string_view s, uint32_t* out) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), isDigit)) return false;
  uint64_t v = 0;
  for (char c : s) {
    v = v * 10 + static_cast<uint64_t>(c - '0');
    if (v > std::numeric_limits<uint32_t>::max()) return false;
  }
  *out = static_cast<uint32_t>(v);
  return true;
}

std::string_view trimSpaces(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

IterationSet IterationSet::all() {
  IterationSet s;
  s.all_ = true;
  return s;
}

Result<IterationSet> IterationSet::parse(std::string_view text) {
  if (text == "all") return all();
  if (text == "none") return IterationSet();
  if (text.empty()) {
    return invalid(
        "iteration is empty: give \"none\" to select no iteration (dumpd), \"all\", or "
        "iterations such as \"0|5-8\"");
  }
  if (!std::all_of(text.begin(), text.end(),
                   [](char c) { return isDigit(c) || c == '-' || c == '|' || c == ' '; })) {
    return charsetError(text);
  }

  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  size_t start = 0;
  while (true) {
    size_t bar = text.find('|', start);
    std::string_view raw = text.substr(start, bar == std::string_view::npos ? bar : bar - start);
    std::string_view seg = trimSpaces(raw);
    if (seg.empty()) return segmentError(raw, "empty segment", text);
    if (seg.find(' ') != std::string_view::npos) {
      return segmentError(seg, "space inside a segment", text);
    }
    size_t dash = seg.find('-');
    uint32_t low = 0;
    uint32_t high = 0;
    if (dash == std::string_view::npos) {
      if (!parseNumber(seg, &low)) {
        return segmentError(seg, "not a number in 0..4294967295", text);
      }
      high = low;
    } else {
      std::string_view lo_text = seg.substr(0, dash);
      std::string_view hi_text = seg.substr(dash + 1);
      if (lo_text.empty() || hi_text.empty() || hi_text.find('-') != std::string_view::npos) {
        return segmentError(seg, "expected N or LOW-HIGH", text);
      }
      if (!parseNumber(lo_text, &low) || !parseNumber(hi_text, &high)) {
        return segmentError(seg, "not a number in 0..4294967295", text);
      }
      if (low > high) return segmentError(seg, "LOW is greater than HIGH", text);
    }
    ranges.emplace_back(low, high);
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }

  // Sort, then merge overlapping and adjacent ranges so contains() can binary search.
  std::sort(ranges.begin(), ranges.end());
  IterationSet set;
  for (const auto& r : ranges) {
    if (!set.ranges_.empty()) {
      auto& last = set.ranges_.back();
      // last.second + 1 computed in 64 bits: UINT32_MAX must not wrap to 0.
      if (static_cast<uint64_t>(r.first) <= static_cast<uint64_t>(last.second) + 1) {
        last.second = std::max(last.second, r.second);
        continue;
      }
    }
    set.ranges_.push_back(r);
  }
  return set;
}

bool IterationSet::contains(uint32_t iteration) const {
  if (all_) return true;
  // The first range starting after `iteration`; the one before it is the only candidate.
  auto it = std::upper_bound(
      ranges_.begin(), ranges_.end(), iteration,
      [](uint32_t value, const std::pair<uint32_t, uint32_t>& r) { return value < r.first; });
  if (it == ranges_.begin()) return false;
  --it;
  return iteration <= it->second;
}

std::string IterationSet::toString() const {
  if (all_) return "all";
  if (ranges_.empty()) return "none";
  std::string out;
  for (const auto& [low, high] : ranges_) {
    if (!out.empty()) out += '|';
    out += std::to_string(low);
    if (high != low) {
      out += '-';
      out += std::to_string(high);
    }
  }
  return out;
}

}  // namespace dumpd::config
