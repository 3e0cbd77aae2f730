// Whether a tensor is an input or an output of its op. The wire value travels in ring
// descriptors (ipc/ring_format.h TensorDesc::io): append only.
#pragma once

#include <cstdint>

namespace dumpd {

enum class Io : uint8_t { kInput = 0, kOutput = 1 };

}  // namespace dumpd
