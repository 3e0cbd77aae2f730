// What a producer does when its ring is full: part of the client's options and of the daemon's
// settings (its default for jobs that do not choose).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/result.h"

namespace dumpd::ipc {

enum class Backpressure : uint8_t {
  kBlock,  // wait for room (up to block_timeout_ms when set)
  kDrop,   // drop the tensor, count it, return at once
};

std::string_view backpressureName(Backpressure b);  // "block" / "drop"
// kInvalidArgument naming what was given when `s` is neither name.
Result<Backpressure> parseBackpressure(std::string_view s);

}  // namespace dumpd::ipc
