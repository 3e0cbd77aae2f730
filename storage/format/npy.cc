#include "storage/format/npy.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <vector>

#include "storage/format/convert.h"
#include "storage/format/lz4_frame.h"

namespace dumpd::storage {
namespace {

// Elements converted per chunk: bounded scratch memory (1 MiB of float32) per writer thread.
constexpr uint64_t kConvertChunkElements = uint64_t{1} << 18;

void appendInt(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Converts elements [begin, end) of `src` (bfloat16 or int4) into `dst` (float32 / int8).
void convertChunk(DType dtype, const unsigned char* src, uint64_t begin, uint64_t end,
                  unsigned char* dst) {
  if (dtype == DType::kBFloat16) {
    for (uint64_t i = begin; i < end; ++i) {
      float f = bf16ToFloat(loadUnaligned<uint16_t>(src + 2 * i));
      std::memcpy(dst + 4 * (i - begin), &f, 4);
    }
  } else {  // int4, low nibble first
    for (uint64_t i = begin; i < end; ++i) {
      uint8_t b = src[i >> 1];
      dst[i - begin] = static_cast<unsigned char>((i & 1) ? int4High(b) : int4Low(b));
    }
  }
}

std::vector<unsigned char>& convertBuffer() {
  thread_local std::vector<unsigned char> buffer(kConvertChunkElements * 4);
  return buffer;
}

// Feeds the file's bytes to `sink(ConstBuffer first, ConstBuffer second)` in order: the header
// with the first piece of data, then the rest, converted chunk by chunk when needed.
template <typename Sink>
Status produce(const NpyPayload& p, std::string_view header, Sink&& sink) {
  ConstBuffer head = asBytes(header);
  if (!needsConversion(p.dtype)) {
    return sink(head, p.data.first(p.elements * dtypeSize(storedDType(p.dtype))));
  }
  const auto* src = reinterpret_cast<const unsigned char*>(p.data.data());
  auto& buffer = convertBuffer();
  const size_t out_size = dtypeSize(storedDType(p.dtype));
  for (uint64_t begin = 0; begin < p.elements || begin == 0; begin += kConvertChunkElements) {
    uint64_t end = std::min(p.elements, begin + kConvertChunkElements);
    convertChunk(p.dtype, src, begin, end, buffer.data());
    ConstBuffer chunk(reinterpret_cast<const std::byte*>(buffer.data()), (end - begin) * out_size);
    if (Status s = sink(head, chunk); !s) return s;
    head = {};
    if (end >= p.elements) break;
  }
  return {};
}

}  // namespace

bool needsConversion(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kInt4; }

void buildNpyHeader(std::string& out, DType dtype, std::span<const int64_t> shape) {
  // The dict as MindSpore's npy_header.cc writes it: numpy's keys and order, the shape with
  // a comma after every dimension and no spaces ("(2,3,)", "(3,)", "()").
  std::string& dict = out;
  dict.assign(10, '\0');  // room for the 1.0 preamble
  dict.append("{'descr': '");
  dict.append(npyDescr(storedDType(dtype)));
  dict.append("', 'fortran_order': False, 'shape': (");
  for (int64_t dim : shape) {
    appendInt(dict, dim);
    dict.push_back(',');
  }
  dict.append("), }");
  // numpy: pad with spaces so preamble + header + '\n' is a multiple of 64 (1..64 spaces).
  size_t preamble = 10;
  size_t dict_len = dict.size() - 10;
  size_t header_len = dict_len + 1;
  size_t pad = 64 - (preamble + header_len) % 64;
  if (header_len + pad > 65535) {  // version 2.0: 4-byte header length
    preamble = 12;
    dict.insert(0, 2, '\0');
    pad = 64 - (preamble + header_len) % 64;
  }
  dict.append(pad, ' ');
  dict.push_back('\n');
  uint32_t len = static_cast<uint32_t>(dict.size() - preamble);
  std::memcpy(dict.data(), "\x93NUMPY", 6);
  dict[6] = preamble == 10 ? 1 : 2;
  dict[7] = 0;
  dict[8] = static_cast<char>(len & 0xff);
  dict[9] = static_cast<char>((len >> 8) & 0xff);
  if (preamble == 12) {
    dict[10] = static_cast<char>((len >> 16) & 0xff);
    dict[11] = static_cast<char>((len >> 24) & 0xff);
  }
}

uint64_t npyFileSize(const NpyPayload& payload, uint64_t header_size) {
  return header_size + payload.elements * dtypeSize(storedDType(payload.dtype));
}

Status writeNpy(WritableFile& file, const NpyPayload& payload, std::string_view header, bool lz4) {
  if (!lz4) {
    return produce(payload, header, [&file](ConstBuffer first, ConstBuffer second) {
      ConstBuffer buffers[2] = {first, second};
      return file.write(std::span<const ConstBuffer>(buffers, 2));
    });
  }
  Lz4FrameWriter frame(file, npyFileSize(payload, header.size()));
  if (Status s = frame.begin(); !s) return s;
  Status s = produce(payload, header, [&frame](ConstBuffer first, ConstBuffer second) {
    if (Status r = frame.update(first); !r) return r;
    return frame.update(second);
  });
  if (!s) return s;
  return frame.end();
}

}  // namespace dumpd::storage
