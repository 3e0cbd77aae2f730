#include "base/utf8.h"

#include <algorithm>

namespace dumpd {
namespace {

// Length of the well-formed sequence at s[i], or 0 when there is none (RFC 3629, table 3-7 of
// the Unicode standard).
size_t sequenceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // overlong
    if (c == 0xed) hi = 0x9f;  // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;  // overlong
    if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xbf) return 0;
  }
  return n;
}

}  // namespace

bool isValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequenceAt(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string toValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = sequenceAt(s, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string_view cutUtf8(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t end = max_bytes;
  // Back off over continuation bytes (10xxxxxx) to the start of the character cut in two
  // (at most 3: a longer run is not UTF-8, and is cut where asked).
  for (int back = 0; back < 3 && end > 0 && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80;
       ++back) {
    --end;
  }
  if ((static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) end = max_bytes;
  return s.substr(0, end);
}

std::string toWireText(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes && isValidUtf8(s)) return std::string(s);
  // The character that straddles max_bytes is taken whole (at most 4 bytes), so that a valid
  // one is cut before, not replaced.
  const size_t take = s.size() - std::min(s.size(), max_bytes) > 4 ? max_bytes + 4 : s.size();
  const std::string valid = toValidUtf8(s.substr(0, take));
  return std::string(cutUtf8(valid, max_bytes));
}

}  // namespace dumpd
