#include "config/write_policy.h"

#include <string>

#include "base/printable.h"

namespace dumpd::config {

std::string_view durabilityName(Durability d) {
  switch (d) {
    case Durability::kNone:
      return "none";
    case Durability::kIteration:
      return "iteration";
    case Durability::kFile:
      return "file";
  }
  return "";
}

std::string_view compressionName(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kLz4:
      return "lz4";
  }
  return "";
}

Result<Durability> parseDurability(std::string_view s) {
  if (s == "none") return Durability::kNone;
  if (s == "iteration") return Durability::kIteration;
  if (s == "file") return Durability::kFile;
  return makeError(
      ErrorCode::kInvalidArgument,
      "durability should be \"none\", \"iteration\" or \"file\", but got: " + printable(s));
}

Result<Compression> parseCompression(std::string_view s) {
  if (s == "none") return Compression::kNone;
  if (s == "lz4") return Compression::kLz4;
  return makeError(ErrorCode::kInvalidArgument,
                   "compression should be \"none\" or \"lz4\", but got: " + printable(s));
}

}  // namespace dumpd::config
