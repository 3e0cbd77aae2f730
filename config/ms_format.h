// Which generation of MindSpore's dump writer the output matches (docs/compatibility.md,
// "Two generations"). Everything in the tree that differs between them is decided by it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dumpd::config {

enum class MsFormat : uint8_t {
  // Released MindSpore 2.4.1 to 2.6.0 and r2.7.rc1 (mindspore/ccsrc/debug/data_dump/).
  k26,
  // The newer writer (mindspore/ccsrc/tools/data_dump/).
  k27,
};

inline constexpr MsFormat kDefaultMsFormat = MsFormat::k26;

// "2.6" / "2.7".
std::string_view msFormatName(MsFormat f);

// "2.6" or "2.7"; "" gives the default. Anything else: nullopt.
std::optional<MsFormat> parseMsFormat(std::string_view text);

}  // namespace dumpd::config
