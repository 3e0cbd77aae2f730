// Fuzz target: what `dumpctl convert` and `dumpctl compare` read from files anyone may have
// written: the Ascend bin file (storage::parseBinFile), the .npy header (parseNpyHeader) and
// CSV text (statistic.csv, mapping.csv, --map: parseCsv).
//
// Input: the bytes of one file, tried as each of the three.
//
// Invariants (abort on violation): a parsed bin file's tensors lie inside it, back to back
// after the header in file order (inputs, then outputs), and the sizes add up to the file;
// every tensor that checkConvertibleTensor accepts decodes, first and last value, from its
// own bytes (TensorData::view over an exact-size copy, so ASan sees an overread); a parsed npy
// header's data offset lies inside the input and its shape has an element count; every CSV
// record has a field and starts on a line that exists; errors carry messages.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/element_count.h"
#include "storage/format/bin_file.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/bin_convert.h"
#include "tools/compare_csv.h"
#include "tools/tensor_data.h"

namespace dumpd::tools {
namespace {

void checkBin(std::span<const std::byte> bytes) {
  auto parsed = storage::parseBinFile(bytes, "fuzz");
  if (!parsed) {
    FUZZ_CHECK(!parsed.error().message.empty());
    return;
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), storage::kBinLengthBytes);
  uint64_t offset = storage::kBinLengthBytes + header_len;
  bool outputs = false;
  for (const storage::BinTensor& t : parsed->tensors) {
    FUZZ_CHECK(t.offset == offset);
    FUZZ_CHECK(t.size <= bytes.size() - t.offset);
    FUZZ_CHECK(!(outputs && t.io == Io::kInput));
    outputs = outputs || t.io == Io::kOutput;
    offset += t.size;
    if (!checkConvertibleTensor(t, "fuzz")) continue;
    const uint64_t elements = *elementCount(t.shape);
    if (elements == 0) continue;
    // An exact-size copy: a decode past the tensor's bytes is an ASan report.
    std::vector<std::byte> own(bytes.begin() + static_cast<std::ptrdiff_t>(t.offset),
                               bytes.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size));
    TensorData data = TensorData::view(*t.dtype, own, elements);
    double v[2];
    data.decode(0, 1, v);
    data.decode(data.values() - 1, 1, v + 1);
  }
  FUZZ_CHECK(offset + parsed->buffer_bytes == bytes.size());
}

void checkNpy(std::span<const std::byte> bytes) {
  auto header = parseNpyHeader(bytes, "fuzz");
  if (!header) {
    FUZZ_CHECK(!header.error().message.empty());
    return;
  }
  FUZZ_CHECK(header->data_offset <= bytes.size());
  FUZZ_CHECK(elementCount(header->shape).has_value());
}

void checkCsv(std::string_view text) {
  auto records = parseCsv(text, "fuzz");
  if (!records) {
    FUZZ_CHECK(!records.error().message.empty());
    return;
  }
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (const CsvRecord& r : *records) {
    FUZZ_CHECK(!r.fields.empty());
    FUZZ_CHECK(r.line >= 1 && r.line <= lines);
  }
}

}  // namespace
}  // namespace dumpd::tools

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dumpd::fuzz::quietProtobuf();
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  dumpd::tools::checkBin(bytes);
  dumpd::tools::checkNpy(bytes);
  dumpd::tools::checkCsv(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
