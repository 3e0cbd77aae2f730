// Tensor element types as named in MindSpore dump file names, and their .npy encodings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dumpd {

// Wire values are stable (they travel in ring descriptors): append only.
enum class DType : uint8_t {
  kBool = 0,
  kInt8 = 1,
  kInt16 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kUInt8 = 5,
  kUInt16 = 6,
  kUInt32 = 7,
  kUInt64 = 8,
  kFloat16 = 9,
  kFloat32 = 10,
  kFloat64 = 11,
  kBFloat16 = 12,
  kInt4 = 13,   // two per byte, low nibble first
  kUInt1 = 14,  // one per byte (0/1)
  kComplex64 = 15,
  kComplex128 = 16,
};
inline constexpr int kDTypeCount = 17;

// Lower-case name used in file names and statistic.csv ("float32", "bfloat16").
std::string_view dtypeName(DType t);
std::optional<DType> dtypeFromName(std::string_view name);
bool dtypeValid(uint8_t wire);

// Bytes per element of the *source* data; int4 is 0 (see sourceBytes).
size_t dtypeSize(DType t);
// Bytes the producer sends for `elements` logical elements (int4 rounds up to whole bytes).
uint64_t sourceBytes(DType t, uint64_t elements);

// The dtype written into the .npy (bfloat16 -> float32, int4 -> int8, uint1 -> uint8).
DType storedDType(DType t);
// numpy descr of a stored dtype ("<f4", "|b1").
std::string_view npyDescr(DType stored);

}  // namespace dumpd
