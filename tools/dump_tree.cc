#include "tools/dump_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <iterator>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "base/element_count.h"
#include "storage/format/bin_file.h"
#include "storage/format/names.h"
#include "storage/format/statistic_csv.h"
#include "tools/compare_csv.h"
#include "tools/mapped_file.h"

namespace dumpd::tools {
namespace {

// One directory holding files, with what its mapping.csv and statistic.csv say.
struct DirInfo {
  std::string path;  // absolute
  uint32_t rank = 0, graph = 0, iteration = 0;
  std::string location;
  std::vector<std::string> files;
  std::vector<TensorEntry> entries;  // filled by the scan
};

TensorEntry entryFor(const DirInfo& dir, const storage::ParsedFileName& f,
                     const std::string& path) {
  TensorEntry e;
  e.rank = dir.rank;
  e.graph = dir.graph;
  e.iteration = dir.iteration;
  e.location = dir.location;
  e.op_type = f.op_type;
  e.op_name = f.op_name;
  e.task_id = f.task_id;
  e.stream_id = f.stream_id;
  e.timestamp = f.timestamp;
  e.io = f.io;
  e.slot = f.slot;
  e.dtype = f.dtype;
  e.kind = f.kind;
  e.path = path;
  return e;
}

// The entries of one tensor file (a bin file holds several).
void inspectFile(const DirInfo& dir, const storage::ParsedFileName& f, const std::string& path,
                 std::vector<TensorEntry>& out) {
  TensorEntry e = entryFor(dir, f, path);
  if (f.kind != TensorFileKind::kBin) {
    auto header = readNpyHeader(path, f.kind == TensorFileKind::kNpyLz4);
    if (!header) {
      e.error = header.error().message;
    } else {
      e.shape = header->shape;
      e.shape_known = true;
      if (e.dtype.empty()) e.dtype = std::string(dtypeName(header->dtype));
    }
    out.push_back(std::move(e));
    return;
  }
  auto mapped = MappedFile::open(path);
  auto parsed = mapped ? storage::parseBinFile(mapped->bytes(), path)
                       : Result<storage::BinFile>(mapped.error());
  if (parsed && mapped->shrank()) {
    parsed = makeError(ErrorCode::kIo, path + ": the file shrank while it was read");
  }
  if (!parsed) {
    e.error = parsed.error().message;
    out.push_back(std::move(e));
    return;
  }
  for (const storage::BinTensor& t : parsed->tensors) {
    TensorEntry te = e;
    te.io = t.io;
    te.slot = t.index;
    te.shape = t.shape;
    te.shape_known = true;
    te.bin_offset = t.offset;
    te.bin_size = t.size;
    auto elements = elementCount(t.shape);
    if (!t.dtype) {
      te.dtype = storage::binDataTypeName(t.data_type);
      te.error = path + ": " + std::string(storage::ioName(t.io)) + " " + std::to_string(t.index) +
                 " has data type " + te.dtype + ", which cannot be compared";
    } else if (!elements) {
      te.dtype = std::string(dtypeName(*t.dtype));
      te.error = path + ": " + std::string(storage::ioName(t.io)) + " " + std::to_string(t.index) +
                 " has an invalid shape";
    } else {
      te.dtype = std::string(dtypeName(*t.dtype));
      te.bin_dtype = *t.dtype;
      te.bin_elements = *elements;
    }
    out.push_back(std::move(te));
  }
}

std::string joinKey(const TensorEntry& e) {
  std::string key = e.op_name;
  for (uint64_t v : {uint64_t{e.task_id}, uint64_t{e.stream_id}, e.timestamp,
                     uint64_t{static_cast<uint8_t>(e.io)}, uint64_t{e.slot}}) {
    key.push_back('\0');
    key.append(std::to_string(v));
  }
  return key;
}

// Reads the statistic.csv of `dir` and joins its rows to the tensor entries.
void joinStatistics(DirInfo& dir, const std::string& path) {
  auto fail = [&](const std::string& why) {
    TensorEntry e;
    e.rank = dir.rank;
    e.graph = dir.graph;
    e.iteration = dir.iteration;
    e.location = dir.location;
    e.path = path;
    e.error = why;
    dir.entries.push_back(std::move(e));
  };
  auto mapped = MappedFile::open(path);
  if (!mapped) return fail(mapped.error().message);
  std::string_view text(reinterpret_cast<const char*>(mapped->bytes().data()), mapped->size());
  auto csv = storage::parseStatisticCsv(text, path);
  if (mapped->shrank()) return fail(path + ": the file shrank while it was read");
  if (!csv) return fail(csv.error().message);
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i = 0; i < dir.entries.size(); ++i) by_key.emplace(joinKey(dir.entries[i]), i);
  for (storage::StatisticCsvRow& row : csv->rows) {
    TensorEntry e;
    e.rank = dir.rank;
    e.graph = dir.graph;
    e.iteration = dir.iteration;
    e.location = dir.location;
    e.path = path;
    e.op_type = std::move(row.op_type);
    e.op_name = std::move(row.op_name);
    e.dtype = std::move(row.dtype);
    e.task_id = row.task_id;
    e.stream_id = row.stream_id;
    e.timestamp = row.timestamp;
    e.io = row.io;
    e.slot = row.slot;
    if (row.shape) {
      e.shape = std::move(*row.shape);
      e.shape_known = true;
    }
    const StatisticValues s{row.max, row.min, row.avg, row.l2norm};
    auto it = by_key.find(joinKey(e));
    if (it != by_key.end() && !dir.entries[it->second].statistics) {
      dir.entries[it->second].statistics = s;
    } else {
      e.statistics = s;
      dir.entries.push_back(std::move(e));
    }
  }
  if (const size_t bad = csv->bad_rows; bad > 0) {
    fail(path + ": " + std::to_string(bad) + (bad == 1 ? " row is" : " rows are") +
         " not statistic rows (Op Name, Timestamp, IO, Slot, Task ID or Stream ID), the first on "
         "line " +
         std::to_string(csv->first_bad_line));
  }
}

// mapping.csv: "<short name>,<real name>" per line.
std::unordered_map<std::string, std::string> readMapping(const std::string& path,
                                                         std::string& error) {
  std::unordered_map<std::string, std::string> map;
  auto mapped = MappedFile::open(path);
  if (!mapped) {
    error = mapped.error().message;
    return map;
  }
  std::string_view text(reinterpret_cast<const char*>(mapped->bytes().data()), mapped->size());
  auto records = parseCsv(text, path);
  if (!records) {
    error = records.error().message;
    return map;
  }
  if (mapped->shrank()) {
    error = path + ": the file shrank while it was read";
    return map;
  }
  for (const CsvRecord& r : *records) {
    if (r.fields.size() >= 2) map.emplace(r.fields[0], r.fields[1]);
  }
  return map;
}

// A tensor file found in a directory, and the entries read from it.
struct FileJob {
  size_t dir = 0;
  storage::ParsedFileName name;
  std::string path;
  std::vector<TensorEntry> entries;
};

// Names the tensor files of `dir` (through its mapping.csv).
void listTensorFiles(DirInfo& dir, size_t dir_index, std::vector<FileJob>& jobs) {
  std::string mapping_error;
  std::unordered_map<std::string, std::string> mapping;
  if (std::binary_search(dir.files.begin(), dir.files.end(), "mapping.csv")) {
    mapping = readMapping(dir.path + "/mapping.csv", mapping_error);
  }
  if (!mapping_error.empty()) {
    TensorEntry e;
    e.location = dir.location;
    e.path = dir.path + "/mapping.csv";
    e.error = mapping_error;
    dir.entries.push_back(std::move(e));
  }
  for (const std::string& name : dir.files) {
    std::string_view real = name;
    const bool lz4 = real.ends_with(".npy.lz4");
    std::string mapped_name;
    // mapping.csv lists .npy.lz4 files without ".lz4" (what `lz4 -d` restores).
    auto it = mapping.find(std::string(lz4 ? real.substr(0, real.size() - 4) : real));
    if (it != mapping.end()) {
      mapped_name = it->second;
      if (lz4 && !mapped_name.ends_with(".lz4")) mapped_name.append(".lz4");
      real = mapped_name;
    }
    auto parsed = storage::parseTensorFileName(real);
    if (!parsed) continue;
    jobs.push_back(FileJob{dir_index, std::move(*parsed), dir.path + "/" + name, {}});
  }
}

bool isDecimal(std::string_view s, uint32_t& out) { return storage::parseDecimal(s, out); }

void setLocation(DirInfo& dir, std::string_view relative) {
  auto parts = storage::splitAt(dir.path, '/');
  const size_t n = parts.size();
  if (n >= 4 && parts[n - 4].starts_with("rank_") && isDecimal(parts[n - 4].substr(5), dir.rank) &&
      isDecimal(parts[n - 2], dir.graph) && isDecimal(parts[n - 1], dir.iteration)) {
    return;
  }
  dir.rank = dir.graph = dir.iteration = 0;
  dir.location = std::string(relative);
}

// Collects every directory holding files under `root` (absolute, resolved).
void walk(const std::string& root, std::vector<DirInfo>& dirs, std::vector<TensorEntry>& errors) {
  std::vector<std::string> pending = {""};
  while (!pending.empty()) {
    std::string relative = std::move(pending.back());
    pending.pop_back();
    DirInfo dir;
    dir.path = relative.empty() ? root : root + "/" + relative;
    DIR* d = ::opendir(dir.path.c_str());
    if (d == nullptr) {
      TensorEntry e;
      e.path = dir.path;
      e.location = relative;
      e.error = "cannot read directory " + dir.path + ": " + std::strerror(errno);
      errors.push_back(std::move(e));
      continue;
    }
    while (const dirent* ent = ::readdir(d)) {
      std::string_view name = ent->d_name;
      if (name == "." || name == "..") continue;
      unsigned char type = ent->d_type;
      if (type == DT_UNKNOWN) {
        struct stat st {};
        if (::fstatat(::dirfd(d), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
      }
      if (type == DT_DIR) {
        if (name.starts_with('.') || name == "constants") continue;
        pending.push_back(relative.empty() ? std::string(name)
                                           : relative + "/" + std::string(name));
      } else if (type == DT_REG) {
        dir.files.emplace_back(name);
      }
    }
    ::closedir(d);
    if (dir.files.empty()) continue;
    std::sort(dir.files.begin(), dir.files.end());
    setLocation(dir, relative);
    dirs.push_back(std::move(dir));
  }
}

// Runs f(i) for i in [0, n) on up to `threads` threads.
template <typename F>
void parallelFor(size_t n, unsigned threads, F&& f) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    // relaxed: each index is claimed once; join() publishes the results.
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) f(i);
  };
  std::vector<std::thread> pool;
  const size_t extra = std::min<size_t>(threads, n) > 1 ? std::min<size_t>(threads, n) - 1 : 0;
  for (size_t t = 0; t < extra; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace

std::string shapeText(const TensorEntry& e) {
  if (!e.shape_known) return "?";
  std::string out;
  storage::appendShape(out, e.shape);
  return out;
}

void sortExecutionOrder(std::vector<TensorEntry>& entries) {
  std::stable_sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.rank, a.graph, a.iteration, a.location, a.timestamp, a.task_id, a.io, a.slot,
                    a.op_name, a.path) < std::tie(b.rank, b.graph, b.iteration, b.location,
                                                  b.timestamp, b.task_id, b.io, b.slot, b.op_name,
                                                  b.path);
  });
}

Result<DumpTree> scanDumpTree(const std::string& root, unsigned threads) {
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) {
    return makeError(errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                     "cannot read " + root + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return makeError(ErrorCode::kInvalidArgument, root + " is not a directory");
  }
  char resolved[PATH_MAX];
  if (::realpath(root.c_str(), resolved) == nullptr || ::access(resolved, R_OK | X_OK) != 0) {
    return makeError(errno == EACCES ? ErrorCode::kPermission : ErrorCode::kIo,
                     "cannot read " + root + ": " + std::strerror(errno));
  }
  std::string absolute = resolved;
  if (absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
  DumpTree tree;
  tree.root = root;
  std::vector<DirInfo> dirs;
  walk(absolute, dirs, tree.entries);
  threads = std::max(1u, threads);
  std::vector<std::vector<FileJob>> listed(dirs.size());
  parallelFor(dirs.size(), threads, [&](size_t i) { listTensorFiles(dirs[i], i, listed[i]); });
  std::vector<FileJob> jobs;
  for (auto& list : listed) std::move(list.begin(), list.end(), std::back_inserter(jobs));
  // Reading headers is one open and read per file: spread over the threads file by file.
  parallelFor(jobs.size(), threads, [&](size_t i) {
    FileJob& job = jobs[i];
    inspectFile(dirs[job.dir], job.name, job.path, job.entries);
  });
  for (FileJob& job : jobs) {
    auto& entries = dirs[job.dir].entries;
    std::move(job.entries.begin(), job.entries.end(), std::back_inserter(entries));
  }
  parallelFor(dirs.size(), threads, [&](size_t i) {
    if (std::binary_search(dirs[i].files.begin(), dirs[i].files.end(), "statistic.csv")) {
      joinStatistics(dirs[i], dirs[i].path + "/statistic.csv");
    }
  });
  for (DirInfo& dir : dirs) {
    std::move(dir.entries.begin(), dir.entries.end(), std::back_inserter(tree.entries));
  }
  sortExecutionOrder(tree.entries);
  return tree;
}

}  // namespace dumpd::tools
