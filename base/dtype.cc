#include "base/dtype.h"

#include <array>

#include "base/dtype_visit.h"

namespace dumpd {
namespace {

struct DTypeInfo {
  std::string_view name;
  size_t size;             // bytes per source element (int4: 0, see sourceBytes)
  DType stored;            // dtype written into the .npy
  std::string_view descr;  // numpy descr of `stored` when stored == self
};

// Indexed by the wire value.
constexpr std::array<DTypeInfo, kDTypeCount> kInfo = {{
    {"bool", 1, DType::kBool, "|b1"},
    {"int8", 1, DType::kInt8, "|i1"},
    {"int16", 2, DType::kInt16, "<i2"},
    {"int32", 4, DType::kInt32, "<i4"},
    {"int64", 8, DType::kInt64, "<i8"},
    {"uint8", 1, DType::kUInt8, "|u1"},
    {"uint16", 2, DType::kUInt16, "<u2"},
    {"uint32", 4, DType::kUInt32, "<u4"},
    {"uint64", 8, DType::kUInt64, "<u8"},
    {"float16", 2, DType::kFloat16, "<f2"},
    {"float32", 4, DType::kFloat32, "<f4"},
    {"float64", 8, DType::kFloat64, "<f8"},
    {"bfloat16", 2, DType::kFloat32, ""},
    {"int4", 0, DType::kInt8, ""},
    {"uint1", 1, DType::kUInt8, ""},
    {"complex64", 8, DType::kComplex64, "<c8"},
    {"complex128", 16, DType::kComplex128, "<c16"},
}};

// The sizes above are those of visitDType's tags (base/dtype_visit.h): one layout per dtype.
constexpr bool sizesMatchTags() {
  for (int i = 0; i < kDTypeCount; ++i) {
    const size_t tag_size = visitDType(static_cast<DType>(i),
                                       Overloaded{
                                           [](UnknownDType) -> size_t { return 0; },
                                           [](auto tag) -> size_t { return decltype(tag)::size; },
                                       });
    if (tag_size != kInfo[static_cast<size_t>(i)].size) return false;
  }
  return true;
}
static_assert(sizesMatchTags(), "kInfo and visitDType disagree on a dtype's size");

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

}  // namespace

bool dtypeValid(uint8_t wire) { return wire < kDTypeCount; }

std::string_view dtypeName(DType t) {
  return dtypeValid(static_cast<uint8_t>(t)) ? info(t).name : std::string_view("unknown");
}

std::optional<DType> dtypeFromName(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i) {
    if (kInfo[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

size_t dtypeSize(DType t) { return info(t).size; }

uint64_t sourceBytes(DType t, uint64_t elements) {
  if (t == DType::kInt4) return elements / 2 + (elements & 1);
  return elements * info(t).size;
}

DType storedDType(DType t) { return info(t).stored; }

std::string_view npyDescr(DType stored) { return info(storedDType(stored)).descr; }

}  // namespace dumpd
