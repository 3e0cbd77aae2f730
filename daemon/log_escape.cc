#include "daemon/log_escape.h"

namespace dumpd::daemon {

std::string escapeForLog(std::string_view text, size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  size_t i = 0;
  for (; i < text.size() && out.size() < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (i < text.size()) out += "...(" + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

}  // namespace dumpd::daemon
