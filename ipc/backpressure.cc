#include "ipc/backpressure.h"

#include <string>

#include "base/printable.h"

namespace dumpd::ipc {

std::string_view backpressureName(Backpressure b) {
  switch (b) {
    case Backpressure::kBlock:
      return "block";
    case Backpressure::kDrop:
      return "drop";
  }
  return "";
}

Result<Backpressure> parseBackpressure(std::string_view s) {
  if (s == "block") return Backpressure::kBlock;
  if (s == "drop") return Backpressure::kDrop;
  return makeError(ErrorCode::kInvalidArgument,
                   "backpressure should be \"block\" or \"drop\", but got: " + printable(s));
}

}  // namespace dumpd::ipc
