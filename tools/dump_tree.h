// The tensors of a dump tree, as `dumpctl compare` sees them (shared/spec/mindspore-dump.md
// section 4): one entry per tensor file (.npy, .npy.lz4), per tensor inside an Ascend bin file,
// and per statistic.csv row that has no tensor file.
//
// Rules:
// * The root is the dump path (holding rank_* directories) or any directory beneath it. The
//   walk is recursive, never follows a symbolic link, and skips `constants/` and every
//   directory whose name starts with '.'.
// * rank, graph and iteration come from the directory's path when it ends in
//   rank_{N}/{net}/{graph}/{iteration} (decimal numbers); otherwise they are 0 and `location`
//   is the directory's path relative to the root ("" for the root itself).
// * File names: {op_type}.{op_name}.{task}.{stream}.{timestamp}.{input|output}.{slot}.{format}
//   .{dtype}.npy[.lz4] (MindSpore, dumpd), {op_type}.{op_name}.{task}.{stream}.{timestamp}.
//   {input|output}.{slot}.{shape}.npy (msaccucmp / dumpctl convert output), and bin files
//   {op_type}.{op_name}.{task}.{stream}.{timestamp} (no extension). A name listed in the
//   directory's mapping.csv ("<short>,<real>") is read as its real name. Other files are
//   ignored.
// * Op names are kept sanitised (storage/format/names.h), as in file names; statistic.csv's Op Name
//   (sanitised in 2.6, the full name in 2.7) is sanitised before use.
// * A statistic.csv row joins the tensor file with the same op name, task, stream, timestamp,
//   io and slot; a row without one becomes a statistics-only entry.
// * A file that cannot be read becomes an entry with `error` set (naming the file); the scan
//   goes on. Only an unreadable root fails the scan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/io.h"
#include "base/result.h"
#include "tools/tensor_data.h"

namespace dumpd::tools {

struct TensorEntry {
  uint32_t rank = 0, graph = 0, iteration = 0;
  std::string location;  // see the rules above; part of the match key
  std::string op_type;   // sanitised
  std::string op_name;   // sanitised full name
  uint32_t task_id = 0, stream_id = 0;
  uint64_t timestamp = 0;
  Io io = Io::kOutput;
  uint32_t slot = 0;
  std::string dtype;           // "float32" (from the file name, bin header or csv); "" unknown
  std::vector<int64_t> shape;  // logical shape
  bool shape_known = false;
  TensorFileKind kind = TensorFileKind::kNone;
  std::string path;                   // the tensor file; statistic.csv for statistics-only entries
  DType bin_dtype = DType::kFloat32;  // kBin: encoding, elements, and where the bytes lie
  uint64_t bin_elements = 0, bin_offset = 0, bin_size = 0;
  std::optional<StatisticValues> statistics;  // from statistic.csv
  std::string error;                          // non-empty: the file could not be read (names it)
};

struct DumpTree {
  std::string root;
  // In execution order: rank, graph, iteration, location, timestamp, task id, input before
  // output, slot.
  std::vector<TensorEntry> entries;
};

// Scans the tree under `root`, reading file headers on up to `threads` threads. Fails only
// when `root` is missing, not a directory or unreadable (kNotFound / kInvalidArgument / kIo).
Result<DumpTree> scanDumpTree(const std::string& root, unsigned threads);

// "[2,3]" ("[]" for a scalar); "?" when unknown.
std::string shapeText(const TensorEntry& e);

// Sorts into execution order (the order DumpTree::entries is in).
void sortExecutionOrder(std::vector<TensorEntry>& entries);

}  // namespace dumpd::tools
