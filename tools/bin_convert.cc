#include "tools/bin_convert.h"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <tuple>
#include <utility>

#include "base/element_count.h"
#include "storage/format/names.h"
#include "storage/format/npy.h"
#include "tools/mapped_file.h"

namespace dumpd::tools {
namespace {

namespace fs = std::filesystem;

// "{file}: input 0".
std::string tensorLabel(std::string_view file, const storage::BinTensor& t) {
  std::string s(file);
  s.append(": ");
  s.append(storage::ioName(t.io));
  s.push_back(' ');
  storage::appendDecimal(s, t.index);
  return s;
}

// Writes one .npy under `name` and publishes it; the temporary file is removed on failure.
Status writeConverted(storage::Directory& dir, const std::string& name, uint32_t mode,
                      const storage::NpyPayload& payload, std::string_view header) {
  auto file = dir.newFile(name, mode);
  if (!file) return file.error();
  if (Status s = storage::writeNpy(**file, payload, header, /*lz4=*/false); !s) return s;
  return (*file)->commit();
}

}  // namespace

void appendConvertedNpyName(std::string& out, std::string_view bin_file_name,
                            const storage::BinTensor& tensor) {
  out.append(bin_file_name);
  out.push_back('.');
  out.append(storage::ioName(tensor.io));
  out.push_back('.');
  storage::appendDecimal(out, tensor.index);
  out.push_back('.');
  for (size_t i = 0; i < tensor.shape.size(); ++i) {
    if (i > 0) out.push_back('x');
    storage::appendDecimal(out, static_cast<uint64_t>(tensor.shape[i]));
  }
  out.append(".npy");
}

Status checkConvertibleTensor(const storage::BinTensor& tensor, std::string_view file_name) {
  auto bad = [&](const std::string& why) {
    return makeError(ErrorCode::kInvalidArgument, tensorLabel(file_name, tensor) + ": " + why);
  };
  if (!tensor.dtype) {
    return bad("data type " + storage::binDataTypeName(tensor.data_type) +
               " cannot be converted (dumpd decodes bool, integers, floats, bfloat16, int4, "
               "uint1 and complex)");
  }
  const std::optional<uint64_t> elements = elementCount(tensor.shape);
  if (!elements) return bad("shape has more than 2^56 elements");
  // At most kMaxElements elements of at most 16 bytes: no overflow.
  const uint64_t needed = sourceBytes(*tensor.dtype, *elements);
  if (needed != tensor.size) {
    std::string shape;
    storage::appendShape(shape, tensor.shape);
    return bad("size " + std::to_string(tensor.size) + " bytes does not match shape " + shape +
               " of " + std::string(dtypeName(*tensor.dtype)) + " (" + std::to_string(needed) +
               " bytes)");
  }
  return {};
}

Result<std::vector<BinSource>> findBinFiles(const std::string& in, std::ostream& err,
                                            uint64_t* unreadable) {
  std::error_code ec;
  const fs::file_status top = fs::status(in, ec);  // IN itself may be a symbolic link
  if (top.type() == fs::file_type::not_found) {
    return makeError(ErrorCode::kNotFound, in + ": no such file or directory");
  }
  if (ec) return makeError(ErrorCode::kIo, "cannot stat " + in + ": " + ec.message());
  std::vector<BinSource> found;
  if (!fs::is_directory(top)) {
    if (!fs::is_regular_file(top)) {
      return makeError(ErrorCode::kInvalidArgument, in + " is neither a file nor a directory");
    }
    found.push_back({in, "", fs::path(in).filename().string()});
    return found;
  }
  // Depth first, with an explicit stack: (directory path, its path relative to IN).
  std::vector<std::pair<fs::path, std::string>> pending;
  pending.emplace_back(fs::path(in), std::string());
  while (!pending.empty()) {
    auto [dir, rel] = std::move(pending.back());
    pending.pop_back();
    fs::directory_iterator it(dir, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::error_code entry_ec;
      const fs::file_status st = it->symlink_status(entry_ec);  // never follows a link
      if (entry_ec) continue;                                   // gone since it was listed
      std::string name = it->path().filename().string();
      if (fs::is_directory(st)) {
        pending.emplace_back(it->path(), rel.empty() ? name : rel + "/" + name);
      } else if (fs::is_regular_file(st) && storage::parseBinFileName(name)) {
        found.push_back({it->path().string(), rel, std::move(name)});
      }
    }
    if (ec) {
      err << "dumpctl convert: cannot read directory " << dir.string() << ": " << ec.message()
          << "\n";
      ++*unreadable;
      ec.clear();
    }
  }
  std::sort(found.begin(), found.end(), [](const BinSource& a, const BinSource& b) {
    return std::tie(a.rel_dir, a.name) < std::tie(b.rel_dir, b.name);
  });
  return found;
}

void convertBinFile(const BinSource& source, storage::Directory& out_dir, uint32_t mode,
                    std::ostream& err, ConvertCounts& counts) {
  auto mapped = MappedFile::open(source.path);
  if (!mapped) {
    err << "dumpctl convert: " << mapped.error().message << "\n";
    ++counts.files_rejected;
    return;
  }
  mapped->adviseSequential();
  const std::span<const std::byte> bytes = mapped->bytes();
  auto file = storage::parseBinFile(bytes, source.path);
  if (!file) {
    err << "dumpctl convert: rejected " << file.error().message << "\n";
    ++counts.files_rejected;
    return;
  }
  ++counts.files_read;
  std::string name;
  std::string header;
  for (const storage::BinTensor& t : file->tensors) {
    if (Status s = checkConvertibleTensor(t, source.path); !s) {
      err << "dumpctl convert: rejected " << s.error().message << "\n";
      ++counts.tensors_failed;
      continue;
    }
    name.clear();
    appendConvertedNpyName(name, source.name, t);
    storage::buildNpyHeader(header, *t.dtype, t.shape);
    const storage::NpyPayload payload{
        .dtype = *t.dtype,
        .shape = t.shape,
        .elements = *elementCount(t.shape),  // checked above
        .data = bytes.subspan(t.offset, t.size),
    };
    if (Status s = writeConverted(out_dir, name, mode, payload, header); !s) {
      err << "dumpctl convert: " << tensorLabel(source.path, t)
          << ": not written: " << s.error().message << "\n";
      ++counts.tensors_failed;
      continue;
    }
    ++counts.tensors_written;
  }
  if (mapped->shrank()) {
    err << "dumpctl convert: " << source.path
        << ": the file shrank while it was converted; its .npy files hold zeros past its new "
           "end\n";
    ++counts.files_rejected;
  }
}

}  // namespace dumpd::tools
