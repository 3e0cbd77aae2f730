#include "config/ms_format.h"

namespace dumpd::config {

std::string_view msFormatName(MsFormat f) { return f == MsFormat::k27 ? "2.7" : "2.6"; }

std::optional<MsFormat> parseMsFormat(std::string_view text) {
  if (text.empty()) return kDefaultMsFormat;
  if (text == "2.6") return MsFormat::k26;
  if (text == "2.7") return MsFormat::k27;
  return std::nullopt;
}

}  // namespace dumpd::config
