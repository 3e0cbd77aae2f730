#include "ipc/backpressure_wire.h"

namespace dumpd::ipc {

v1::Backpressure backpressureToWire(Backpressure b) {
  return b == Backpressure::kDrop ? v1::BACKPRESSURE_DROP : v1::BACKPRESSURE_BLOCK;
}

std::optional<Backpressure> backpressureFromWire(v1::Backpressure w) {
  switch (w) {
    case v1::BACKPRESSURE_BLOCK:
      return Backpressure::kBlock;
    case v1::BACKPRESSURE_DROP:
      return Backpressure::kDrop;
    default:
      return std::nullopt;
  }
}

}  // namespace dumpd::ipc
