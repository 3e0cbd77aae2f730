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
#include "storage/bin_file.h"
#include "storage/names.h"
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

// A tensor file's name, parsed.
struct FileName {
  TensorFileKind kind = TensorFileKind::kNone;
  std::string op_type, op_name, dtype;
  uint32_t task_id = 0, stream_id = 0, slot = 0;
  uint64_t timestamp = 0;
  Io io = Io::kOutput;
};

template <typename T>
bool parseNumber(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parseIo(std::string_view s, Io& io) {
  if (s == "input") {
    io = Io::kInput;
  } else if (s == "output") {
    io = Io::kOutput;
  } else {
    return false;
  }
  return true;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

std::string joinName(const std::vector<std::string_view>& parts, size_t first, size_t last) {
  std::string out;
  for (size_t i = first; i < last; ++i) {
    if (i > first) out.push_back('.');
    out.append(parts[i]);
  }
  return storage::sanitizeName(out);
}

// The npy name without ".npy": MindSpore's {type}.{name}.{task}.{stream}.{ts}.{io}.{slot}.
// {format}.{dtype}, or msaccucmp's {type}.{name}.{task}.{stream}.{ts}.{io}.{index}.{shape}.
bool parseNpyName(std::string_view base, FileName& f) {
  auto parts = split(base, '.');
  const size_t n = parts.size();
  for (size_t tail : {size_t{4}, size_t{3}}) {  // fields after the slot's io: 4 or 3
    if (n < tail + 5) continue;
    const size_t io_at = n - tail;
    if (!parseIo(parts[io_at], f.io) || !parseNumber(parts[io_at + 1], f.slot) ||
        !parseNumber(parts[io_at - 1], f.timestamp) ||
        !parseNumber(parts[io_at - 2], f.stream_id) || !parseNumber(parts[io_at - 3], f.task_id)) {
      continue;
    }
    f.op_type = storage::sanitizeName(parts[0]);
    f.op_name = joinName(parts, 1, io_at - 3);
    f.dtype = tail == 4 ? std::string(parts[n - 1]) : std::string();
    return true;
  }
  return false;
}

std::optional<FileName> parseFileName(std::string_view name) {
  FileName f;
  constexpr std::string_view kLz4 = ".npy.lz4", kNpy = ".npy";
  if (name.ends_with(kLz4) || name.ends_with(kNpy)) {
    const bool lz4 = name.ends_with(kLz4);
    f.kind = lz4 ? TensorFileKind::kNpyLz4 : TensorFileKind::kNpy;
    name.remove_suffix(lz4 ? kLz4.size() : kNpy.size());
    if (!parseNpyName(name, f)) return std::nullopt;
    return f;
  }
  auto bin = storage::parseBinFileName(name);
  if (!bin) return std::nullopt;
  f.kind = TensorFileKind::kBin;
  f.op_type = storage::sanitizeName(bin->op_type);
  f.op_name = storage::sanitizeName(bin->op_name);
  f.task_id = bin->task_id;
  f.stream_id = bin->stream_id;
  f.timestamp = bin->timestamp;
  return f;
}

TensorEntry entryFor(const DirInfo& dir, const FileName& f, const std::string& path) {
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
void inspectFile(const DirInfo& dir, const FileName& f, const std::string& path,
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

// "[2,3]", "(2,3)", "(3)", "(3,)", "[]", "()": the dimensions; nullopt when malformed.
std::optional<std::vector<int64_t>> parseShapeField(std::string_view s) {
  if (s.size() < 2 ||
      !((s.front() == '[' && s.back() == ']') || (s.front() == '(' && s.back() == ')'))) {
    return std::nullopt;
  }
  std::vector<int64_t> shape;
  for (std::string_view item : split(s.substr(1, s.size() - 2), ',')) {
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    int64_t d = 0;
    if (!parseNumber(item, d) || d < 0) return std::nullopt;
    shape.push_back(d);
  }
  return shape;
}

std::optional<double> parseValue(std::string_view s) {
  double v = 0;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (!parseNumber(s, v)) return std::nullopt;
  return v;
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
  auto records = parseCsv(text, path);
  if (!records) return fail(records.error().message);
  if (mapped->shrank()) return fail(path + ": the file shrank while it was read");
  if (records->empty()) return;
  std::unordered_map<std::string, size_t> column;
  for (size_t i = 0; i < (*records)[0].fields.size(); ++i) column[(*records)[0].fields[i]] = i;
  for (const char* required : {"Op Name", "Timestamp", "IO", "Slot"}) {
    if (!column.contains(required)) {
      return fail(path + ": the header has no '" + std::string(required) + "' column");
    }
  }
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i = 0; i < dir.entries.size(); ++i) by_key.emplace(joinKey(dir.entries[i]), i);
  // Rows that are not statistic rows: one error entry for all of them, naming the first.
  size_t bad_rows = 0, first_bad_line = 0;
  for (size_t r = 1; r < records->size(); ++r) {
    const CsvRecord& rec = (*records)[r];
    auto field = [&](const char* name) -> std::string_view {
      auto it = column.find(name);
      return it == column.end() || it->second >= rec.fields.size()
                 ? std::string_view{}
                 : std::string_view(rec.fields[it->second]);
    };
    TensorEntry e;
    e.rank = dir.rank;
    e.graph = dir.graph;
    e.iteration = dir.iteration;
    e.location = dir.location;
    e.path = path;
    e.op_type = storage::sanitizeName(field("Op Type"));
    e.op_name = storage::sanitizeName(field("Op Name"));
    e.dtype = std::string(field("Data Type"));
    bool ok = parseNumber(field("Timestamp"), e.timestamp) && parseIo(field("IO"), e.io) &&
              parseNumber(field("Slot"), e.slot);
    if (column.contains("Task ID")) ok = ok && parseNumber(field("Task ID"), e.task_id);
    if (column.contains("Stream ID")) ok = ok && parseNumber(field("Stream ID"), e.stream_id);
    if (!ok || field("Op Name").empty()) {
      if (bad_rows++ == 0) first_bad_line = rec.line;
      continue;
    }
    if (auto shape = parseShapeField(field("Shape"))) {
      e.shape = std::move(*shape);
      e.shape_known = true;
    }
    StatisticValues s;
    s.max = parseValue(field("Max Value"));
    s.min = parseValue(field("Min Value"));
    s.avg = parseValue(field("Avg Value"));
    s.l2norm = parseValue(field("L2Norm Value"));
    auto it = by_key.find(joinKey(e));
    if (it != by_key.end() && !dir.entries[it->second].statistics) {
      dir.entries[it->second].statistics = s;
    } else {
      e.statistics = s;
      dir.entries.push_back(std::move(e));
    }
  }
  if (bad_rows > 0) {
    fail(path + ": " + std::to_string(bad_rows) + (bad_rows == 1 ? " row is" : " rows are") +
         " not statistic rows (Op Name, Timestamp, IO, Slot, Task ID or Stream ID), the first on "
         "line " +
         std::to_string(first_bad_line));
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
  FileName name;
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
    auto parsed = parseFileName(real);
    if (!parsed) continue;
    jobs.push_back(FileJob{dir_index, std::move(*parsed), dir.path + "/" + name, {}});
  }
}

bool isDecimal(std::string_view s, uint32_t& out) { return parseNumber(s, out); }

void setLocation(DirInfo& dir, std::string_view relative) {
  auto parts = split(dir.path, '/');
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
