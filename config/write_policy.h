// How the writer makes files durable and whether it compresses them: daemon settings that the
// writer (storage/writer/) obeys, named here so storage needs no daemon header.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/result.h"

namespace dumpd::config {

enum class Durability : uint8_t {
  kNone,       // the page cache decides
  kIteration,  // fsync files and directories when an iteration completes
  kFile,       // fsync every file
};
enum class Compression : uint8_t { kNone, kLz4 };

std::string_view durabilityName(Durability d);    // "none" / "iteration" / "file"
std::string_view compressionName(Compression c);  // "none" / "lz4"
// kInvalidArgument naming what was given when `s` is no name.
Result<Durability> parseDurability(std::string_view s);
Result<Compression> parseCompression(std::string_view s);

}  // namespace dumpd::config
