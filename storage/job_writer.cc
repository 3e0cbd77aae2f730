#include "storage/job_writer.h"

#include "base/element_count.h"

#include <algorithm>
#include <chrono>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "storage/bin_file.h"
#include "storage/bin_op.h"
#include "storage/credentials.h"
#include "storage/in_order.h"
#include "storage/names.h"
#include "storage/npy.h"
#include "storage/statistic_csv.h"
#include "storage/statistics.h"

namespace dumpd::storage {
namespace {

using config::Durability;

constexpr uint32_t kTensorFileMode = 0400;  // as MindSpore leaves its tensor files
// Files written once (metadata, graphs, execution order, kernel args): MindSpore's 0400 too.
constexpr uint32_t kOtherFileMode = 0400;
// With a free-space watermark, statvfs is asked again after at most this many payload bytes.
constexpr uint64_t kFreeSpaceRecheckBytes = uint64_t{64} << 20;
// Links a repeat tries before it gives up (each refusal normally ends in a new first file).
constexpr int kMaxLinkTries = 8;

uint64_t nowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t iterationKey(uint32_t graph, uint32_t iteration) {
  return (uint64_t{graph} << 32) | iteration;
}

bool ioSelected(config::IoSelect select, Io io) {
  switch (select) {
    case config::IoSelect::kBoth:
      return true;
    case config::IoSelect::kInputs:
      return io == Io::kInput;
    case config::IoSelect::kOutputs:
      return io == Io::kOutput;
  }
  return true;
}

// A JSON string literal; invalid UTF-8 is replaced rather than thrown about.
std::string jsonString(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// MindSpore's kernel-args file name: "{t}.{n}.json", t the last path component of the full
// name cut at its last '-' ("Default/MatMul-op3" -> "MatMul"), n the full name with '.' and
// '/' replaced by '_' (dumpd: control bytes too). An empty t is the op type (sanitised).
std::string kernelArgsFileName(std::string_view op_type, std::string_view op_name) {
  std::string_view tail = op_name.substr(op_name.rfind('/') + 1);  // npos + 1 == 0
  tail = tail.substr(0, tail.rfind('-'));
  std::string name;
  if (tail.empty()) {
    appendSanitized(name, op_type);
  } else {
    for (char c : tail) name.push_back(static_cast<unsigned char>(c) < 0x20 ? '_' : c);
  }
  name.push_back('.');
  for (char c : op_name) {
    name.push_back(c == '.' || c == '/' || static_cast<unsigned char>(c) < 0x20 ? '_' : c);
  }
  name.append(".json");
  return name;
}

// Per-thread scratch strings: names, headers and rows are built without allocating once warm.
struct Scratch {
  std::string name;
  std::string header;
  std::string row;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Element count of a tensor after checking that its shape and byte size agree.
Result<uint64_t> checkTensor(const TensorView& t, std::string_view op_name) {
  auto bad = [&](std::string what) {
    std::string shape;
    appendShape(shape, t.shape);
    return makeError(ErrorCode::kInvalidArgument,
                     "tensor " + std::string(op_name) + " " + std::string(ioName(t.io)) + " " +
                         std::to_string(t.slot) + " (shape " + shape + "): " + what);
  };
  if (!dtypeValid(static_cast<uint8_t>(t.dtype))) return bad("unknown dtype");
  const auto count = elementCount(t.shape);
  if (!count) return bad("has a negative dimension or more than 2^56 elements");
  const uint64_t n = *count;
  if (t.same_as != nullptr) {
    if (!t.data.empty() || t.sums != nullptr) return bad("repeats another tensor but has data");
    const std::vector<int64_t>& shape = t.same_as->shape();
    if (t.same_as->dtype() != t.dtype ||
        !std::equal(shape.begin(), shape.end(), t.shape.begin(), t.shape.end())) {
      return bad("repeats a tensor of another dtype or shape");
    }
    return n;
  }
  if (t.sums != nullptr) {
    if (!t.data.empty()) return bad("carries both bytes and device statistics");
    if (!hasStatistics(t.dtype)) return bad("has no statistics for its dtype");
    if (t.sums->count != n) {
      return bad("device statistics count " + std::to_string(t.sums->count) + " elements");
    }
    return n;
  }
  uint64_t need = sourceBytes(t.dtype, n);
  if (t.data.size() != need) {
    return bad("has " + std::to_string(t.data.size()) + " data bytes, " +
               std::string(dtypeName(t.dtype)) + " needs " + std::to_string(need));
  }
  return n;
}

// An AppendFile the writer keeps open between calls; counts itself in `open`
// (JobCounters::open_fds). Relaxed: `open` is a figure for reports, it orders nothing.
class HeldAppender {
 public:
  explicit HeldAppender(std::atomic<uint64_t>& open) : open_(open) {}
  ~HeldAppender() { reset(); }
  HeldAppender(const HeldAppender&) = delete;
  HeldAppender& operator=(const HeldAppender&) = delete;

  void hold(std::unique_ptr<AppendFile> file) {
    reset();
    file_ = std::move(file);
    open_.fetch_add(1, std::memory_order_relaxed);
  }
  void reset() {
    if (!file_) return;
    file_.reset();
    open_.fetch_sub(1, std::memory_order_relaxed);
  }
  explicit operator bool() const { return file_ != nullptr; }
  AppendFile* operator->() const { return file_.get(); }

 private:
  std::atomic<uint64_t>& open_;
  std::unique_ptr<AppendFile> file_;
};

// One directory the job writes files into, with its appenders. An iteration directory also
// keeps the figures of its manifest line; they stay here while the directory is closed.
struct DirState {
  DirState(std::string p, std::atomic<uint64_t>& open_appenders)
      : path(std::move(p)), stat_csv(open_appenders), mapping_csv(open_appenders) {}

  const std::string path;  // root-relative
  uint32_t graph = 0;
  uint32_t iteration = 0;

  // Guarded by Impl::mu (the job's table of open directories).
  std::shared_ptr<Directory> dir;          // null while closed (not opened yet, or closed as LRU)
  std::list<DirState*>::iterator lru_pos;  // in Impl::lru while `dir` is set
  bool cleaned = false;                    // stale temporaries removed (at the first open)
  bool detached = false;                   // completed: never opened again
  // Calls using `dir` now (DirLease); a pinned directory is never closed. Raised under
  // Impl::mu; lowered without it, with release, pairs with the acquire in
  // Impl::closeLeastRecentlyUsed(): the holder's uses happen before the close.
  std::atomic<uint32_t> pins{0};

  std::mutex mu;  // guards the appenders, the `*_used` flags, `unsynced`, `reasons`, `errors`
  HeldAppender stat_csv;
  HeldAppender mapping_csv;
  // An appender was opened here at least once: its file is synced at completion even when
  // the appender was closed meanwhile (directory closed as least recently used).
  bool stat_csv_used = false;
  bool mapping_csv_used = false;
  std::vector<std::string> unsynced;  // durability "iteration": fsync'ed at completion
  std::vector<std::string> reasons;
  uint64_t errors = 0;

  std::atomic<uint64_t> tensors{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> dropped{0};

  void addReason(std::string_view reason) {
    std::lock_guard lock(mu);
    if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) {
      reasons.emplace_back(reason);
    }
  }
};

// One call's hold on an open directory (Impl::pin): the directory is not closed meanwhile.
class DirLease {
 public:
  DirLease(std::shared_ptr<DirState> state, std::shared_ptr<Directory> dir)
      : state_(std::move(state)), dir_(std::move(dir)) {}
  DirLease(DirLease&&) noexcept = default;  // the moved-from lease holds no pin
  DirLease& operator=(DirLease&&) = delete;
  ~DirLease() {
    // Release: pairs with the acquire in Impl::closeLeastRecentlyUsed().
    if (state_) state_->pins.fetch_sub(1, std::memory_order_release);
  }

  DirState& state() const { return *state_; }
  const std::shared_ptr<DirState>& sharedState() const { return state_; }
  Directory& dir() const { return *dir_; }

 private:
  std::shared_ptr<DirState> state_;
  std::shared_ptr<Directory> dir_;
};

enum class SyncPolicy { kNone, kNow, kDeferred };

// Where a published file's bytes come from: its body writes them (kWrite), or they are those
// of `from`, a file of the same directory, as a hard link (kLink) or a copy (kCopy).
struct FileSource {
  enum Kind { kWrite, kLink, kCopy } kind = kWrite;
  std::string_view from;
};

// The statistic.csv rows of one op, appended when the op is done (in ticket order when it
// has one): its inputs' rows, then its outputs', as MindSpore writes them.
struct OpRows {
  std::shared_ptr<DirState> dir;
  std::string inputs;
  std::string outputs;
  uint32_t row_only = 0;  // rows of tensors without a payload file: what counts them written
  std::string& of(Io io) { return io == Io::kInput ? inputs : outputs; }
};

}  // namespace

struct JobWriter::Impl {
  // First: the DirStates' appenders count themselves in it until they are destroyed.
  std::atomic<uint64_t> open_appenders{0};
  std::shared_ptr<FileSystem> fs;
  config::DumpPlan plan;
  JobOptions options;
  std::string rank_dir;  // "rank_3"
  std::string net_dir;   // "rank_3/Net"
  std::string csv_header;
  StatOptions stat_options;
  bool lz4 = false;
  std::shared_ptr<DirState> metadata;

  std::mutex mu;  // guards the maps and `lru` below, and each DirState's `dir` and `lru_pos`
  std::map<uint64_t, std::shared_ptr<DirState>> open_iterations;
  std::set<uint64_t> completed;
  std::map<uint32_t, std::shared_ptr<DirState>> constants;
  std::map<std::string, std::shared_ptr<DirState>> rank_subdirs;  // graphs, execution_order
  // The DirStates whose directory is open, most recently used first; at most
  // options.max_open_directories of them unless more are pinned by calls in flight.
  std::list<DirState*> lru;
  // Figures for counters(), written under mu; relaxed: they order nothing.
  std::atomic<uint64_t> open_directories{0};
  std::atomic<uint64_t> stale_temporaries_removed{0};

  // statistic.csv rows of ops with a ticket (takeRowTicket) are appended in ticket order.
  InOrder<OpRows> row_order;

  std::mutex manifest_mu;  // guards `manifest`; taken before mu
  HeldAppender manifest{open_appenders};

  // Payload gate: quota and free-space watermark.
  std::atomic<bool> payload_stopped{false};
  std::atomic<uint64_t> payload_bytes{0};  // written plus reserved by writes in flight
  std::mutex free_mu;
  std::atomic<int64_t> free_budget{0};  // payload bytes allowed before statvfs is asked again
  std::atomic<uint32_t> overflow_ops{0};

  std::atomic<uint64_t> tensors_written{0};
  std::atomic<uint64_t> tensors_dropped{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> tensors_linked{0};
  std::atomic<uint64_t> repeats_copied{0};
  std::atomic<uint64_t> write_errors{0};
  mutable std::mutex counters_mu;
  std::string stop_reason;
  std::string last_error;

  SyncPolicy tensorSync() const {
    switch (options.durability) {
      case Durability::kNone:
        return SyncPolicy::kNone;
      case Durability::kIteration:
        return SyncPolicy::kDeferred;
      case Durability::kFile:
        return SyncPolicy::kNow;
    }
    return SyncPolicy::kNone;
  }
  // Files outside iteration directories (constants, graphs, metadata) are synced at once.
  SyncPolicy otherSync() const {
    return options.durability == Durability::kNone ? SyncPolicy::kNone : SyncPolicy::kNow;
  }
  bool syncDirs() const { return options.durability != Durability::kNone; }

  Error recordError(Error e, DirState* ds = nullptr) {
    write_errors.fetch_add(1, std::memory_order_relaxed);
    if (ds) {
      std::lock_guard lock(ds->mu);
      ++ds->errors;
    }
    std::lock_guard lock(counters_mu);
    last_error = e.message;
    return e;
  }

  // Enters the file system's credentials (FileSystem::credentials()) for a whole call: the
  // file operations inside then switch nothing (a nested scope with the same credentials is
  // free), so a call pays one switch instead of two per file. A failure is recorded.
  Status actAs(ScopedCredentials& scope) {
    if (Status s = scope.enter(fs->credentials()); !s) return recordError(s.error());
    return {};
  }

  void stopPayloads(const std::string& reason) {
    std::lock_guard lock(counters_mu);
    if (stop_reason.empty()) stop_reason = reason;
    payload_stopped.store(true, std::memory_order_release);
  }

  std::string stopReason() const {
    std::lock_guard lock(counters_mu);
    return stop_reason;
  }

  std::shared_ptr<DirState> newDirState(std::string path) {
    return std::make_shared<DirState>(std::move(path), open_appenders);
  }

  size_t maxOpenDirectories() const { return std::max<size_t>(options.max_open_directories, 1); }

  // Pins `ds` open for one call: opens its directory when closed (the first open also removes
  // leftover temporary files), makes it the most recently used, and closes the least recently
  // used unpinned directories beyond the cap.
  Result<DirLease> pin(const std::shared_ptr<DirState>& ds) {
    std::lock_guard lock(mu);
    return pinLocked(ds);
  }

  // REQUIRES: mu held.
  Result<DirLease> pinLocked(const std::shared_ptr<DirState>& ds) {
    if (ds->detached) {
      // Rows held for an earlier ticket past their iteration's completion (a caller that
      // broke completeIteration's contract): never reopen a completed directory.
      return makeError(ErrorCode::kInternal,
                       ds->path + " was completed before all of its rows were written");
    }
    if (ds->dir) {
      lru.splice(lru.begin(), lru, ds->lru_pos);
      ds->pins.fetch_add(1, std::memory_order_relaxed);  // under mu, as every reader
      return DirLease(ds, ds->dir);
    }
    auto dir = fs->openDirectory(ds->path, {.create = true, .sync_created = syncDirs()});
    if (!dir) return dir.error();
    ds->dir = std::move(dir.value());
    if (!ds->cleaned) {
      ds->cleaned = true;
      // Best effort: a leftover costs space only; failing to remove it must not stop a dump.
      if (auto n = ds->dir->removeStaleTemporaries()) {
        stale_temporaries_removed.fetch_add(n.value(), std::memory_order_relaxed);
      }
    }
    lru.push_front(ds.get());
    ds->lru_pos = lru.begin();
    ds->pins.fetch_add(1, std::memory_order_relaxed);  // before closing others: not this one
    closeLeastRecentlyUsed();
    open_directories.store(lru.size(), std::memory_order_relaxed);
    return DirLease(ds, ds->dir);
  }

  // Closes unpinned directories, least recently used first, until at most the cap are open.
  // Their appenders close too; rows written stay in the files, the figures in the DirState.
  // REQUIRES: mu held.
  void closeLeastRecentlyUsed() {
    auto it = lru.end();
    while (lru.size() > maxOpenDirectories() && it != lru.begin()) {
      --it;
      DirState& victim = **it;
      // Acquire: pairs with the release in ~DirLease.
      if (victim.pins.load(std::memory_order_acquire) != 0) continue;
      it = lru.erase(it);
      victim.dir.reset();
      std::lock_guard lock(victim.mu);
      victim.stat_csv.reset();
      victim.mapping_csv.reset();
    }
  }

  // Takes `ds` out of the open directories; returns its directory (null when closed).
  // REQUIRES: mu held.
  std::shared_ptr<Directory> detachLocked(DirState& ds) {
    ds.detached = true;
    if (!ds.dir) return nullptr;
    lru.erase(ds.lru_pos);
    open_directories.store(lru.size(), std::memory_order_relaxed);
    return std::move(ds.dir);
  }

  Result<DirLease> iterationDir(uint32_t graph, uint32_t iteration) {
    uint64_t key = iterationKey(graph, iteration);
    std::lock_guard lock(mu);
    auto it = open_iterations.find(key);
    if (it != open_iterations.end()) return pinLocked(it->second);
    std::string path = net_dir;
    path.push_back('/');
    appendDecimal(path, graph);
    path.push_back('/');
    appendDecimal(path, iteration);
    auto ds = newDirState(std::move(path));
    ds->graph = graph;
    ds->iteration = iteration;
    auto lease = pinLocked(ds);
    if (!lease) return lease.error();
    // Written again after completion: the iteration is reopened and gets a new manifest line.
    completed.erase(key);
    open_iterations.emplace(key, std::move(ds));
    return lease;
  }

  Result<DirLease> constantsDir(uint32_t graph) {
    std::lock_guard lock(mu);
    auto it = constants.find(graph);
    if (it != constants.end()) return pinLocked(it->second);
    std::string path = net_dir;
    path.push_back('/');
    appendDecimal(path, graph);
    path.append("/constants");
    auto ds = newDirState(std::move(path));
    auto lease = pinLocked(ds);
    if (!lease) return lease.error();
    constants.emplace(graph, std::move(ds));
    return lease;
  }

  Result<DirLease> rankSubdir(const std::string& name) {
    std::lock_guard lock(mu);
    auto it = rank_subdirs.find(name);
    if (it != rank_subdirs.end()) return pinLocked(it->second);
    auto ds = newDirState(rank_dir + "/" + name);
    auto lease = pinLocked(ds);
    if (!lease) return lease.error();
    rank_subdirs.emplace(name, std::move(ds));
    return lease;
  }

  // Opens `name` in dir for appending, writing `header` into a new (empty) file; with
  // `sync_new_entry`, a new file's directory entry is made durable at once.
  Result<std::unique_ptr<AppendFile>> openAppender(Directory& dir, std::string_view name,
                                                   std::string_view header, bool sync_new_entry) {
    auto opened = dir.openAppend(name);
    if (!opened) return opened.error();
    if (opened.value()->size() == 0) {
      if (sync_new_entry) {
        if (Status s = dir.sync(); !s) return s.error();
      }
      if (!header.empty()) {
        if (Status s = opened.value()->append(header); !s) return s.error();
      }
    }
    return opened;
  }

  Status appendLine(DirLease& lease, bool stat_csv, std::string_view line) {
    DirState& ds = lease.state();
    std::lock_guard lock(ds.mu);
    HeldAppender& file = stat_csv ? ds.stat_csv : ds.mapping_csv;
    if (!file) {
      // Durability "iteration" syncs the directory at completion; "file" must do it now.
      auto opened = openAppender(lease.dir(), stat_csv ? "statistic.csv" : "mapping.csv",
                                 stat_csv ? std::string_view(csv_header) : std::string_view(),
                                 options.durability == Durability::kFile);
      if (!opened) return opened.error();
      file.hold(std::move(opened.value()));
      (stat_csv ? ds.stat_csv_used : ds.mapping_csv_used) = true;
    }
    if (Status s = file->append(line); !s) return s;
    if (options.durability == Durability::kFile) return file->sync();
    return {};
  }

  // Writes file `name` in ds (temporary name, then rename). `body(WritableFile&)` writes the
  // contents (source kWrite); a link or copy of another file (`source`) has them already and
  // `body` writes nothing. A name longer than 255 bytes is replaced by "<digits><ext>" and the
  // pair is appended to mapping.csv (names without the ".lz4" suffix: what `lz4 -d`
  // restores). Returns the bytes written (0 for a link). `final_name` (optional) receives the
  // name published.
  template <typename Body>
  Result<uint64_t> publish(DirLease& lease, std::string_view name, std::string_view ext,
                           bool lz4_suffix, uint32_t mode, SyncPolicy sync, Body&& body,
                           FileSource source = {}, std::string* final_name_out = nullptr) {
    DirState& ds = lease.state();
    std::string short_name;
    if (name.size() > kMaxFileNameBytes) {
      short_name = randomDigits();
      short_name.append(ext);
    }
    std::string_view final_name = short_name.empty() ? name : std::string_view(short_name);
    Result<std::unique_ptr<WritableFile>> file =
        source.kind == FileSource::kWrite  ? lease.dir().newFile(final_name, mode)
        : source.kind == FileSource::kLink ? lease.dir().linkFile(source.from, final_name)
                                           : lease.dir().copyFile(source.from, final_name, mode);
    if (!file) return file.error();
    WritableFile& f = *file.value();
    if (Status s = body(f); !s) return s.error();
    if (sync == SyncPolicy::kNow) {
      if (Status s = f.sync(); !s) return s.error();
    }
    if (!short_name.empty()) {
      // Before the rename: a published file always has its mapping line.
      size_t cut = lz4_suffix ? 4 : 0;
      std::string line(final_name.substr(0, final_name.size() - cut));
      line.push_back(',');
      line.append(name.substr(0, name.size() - cut));
      line.push_back('\n');
      if (Status s = appendLine(lease, /*stat_csv=*/false, line); !s) return s.error();
    }
    if (Status s = f.commit(); !s) return s.error();
    if (sync == SyncPolicy::kNow) {
      if (Status s = lease.dir().sync(); !s) return s.error();
    } else if (sync == SyncPolicy::kDeferred) {
      std::lock_guard lock(ds.mu);
      ds.unsynced.emplace_back(final_name);
    }
    if (final_name_out != nullptr) final_name_out->assign(final_name);
    return f.bytesWritten();
  }

  Result<uint64_t> publishText(DirLease& lease, std::string_view name, std::string_view text,
                               SyncPolicy sync, std::string_view ext = {}) {
    return publish(lease, name, ext, false, kOtherFileMode, sync,
                   [text](WritableFile& f) { return f.write(asBytes(text)); });
  }

  // Admission of a payload of `bytes`; false: dropped (the reason is the stop reason).
  Result<bool> admitPayload(uint64_t bytes) {
    if (payload_stopped.load(std::memory_order_acquire)) return false;
    if (options.quota_bytes != 0) {
      uint64_t before = payload_bytes.fetch_add(bytes, std::memory_order_relaxed);
      if (before + bytes > options.quota_bytes) {
        payload_bytes.fetch_sub(bytes, std::memory_order_relaxed);
        stopPayloads("job quota of " + std::to_string(options.quota_bytes) +
                     " bytes reached: payload files stopped, statistics continue");
        return false;
      }
    }
    Result<bool> space = admitFreeSpace(bytes);
    if (!space || !space.value()) {
      if (options.quota_bytes != 0) payload_bytes.fetch_sub(bytes, std::memory_order_relaxed);
    }
    return space;
  }

  Result<bool> admitFreeSpace(uint64_t bytes) {
    if (options.min_free_bytes == 0) return true;
    const auto need = static_cast<int64_t>(bytes);
    if (free_budget.fetch_sub(need, std::memory_order_relaxed) >= need) return true;
    free_budget.fetch_add(need, std::memory_order_relaxed);
    std::lock_guard lock(free_mu);
    if (free_budget.fetch_sub(need, std::memory_order_relaxed) >= need) return true;  // refreshed
    free_budget.fetch_add(need, std::memory_order_relaxed);
    auto free = fs->freeBytes();
    if (!free) return free.error();
    if (free.value() < options.min_free_bytes + bytes) {
      stopPayloads("free space below min_free_bytes (" + std::to_string(free.value()) +
                   " bytes free, " + std::to_string(options.min_free_bytes) +
                   " kept free): payload files stopped, statistics continue");
      return false;
    }
    uint64_t allowed = std::min(free.value() - options.min_free_bytes, kFreeSpaceRecheckBytes);
    free_budget.store(static_cast<int64_t>(allowed) - need, std::memory_order_relaxed);
    return true;
  }

  void releasePayload(uint64_t reserved, uint64_t actual) {
    if (options.quota_bytes == 0) return;
    payload_bytes.fetch_add(actual, std::memory_order_relaxed);
    payload_bytes.fetch_sub(reserved, std::memory_order_relaxed);
  }

  // Writes one payload file `name` in ds. Returns (written?, bytes); not written = dropped.
  Result<std::pair<bool, uint64_t>> writePayload(DirLease& lease, std::string_view name,
                                                 const NpyPayload& payload, SyncPolicy sync,
                                                 std::string* final_name = nullptr) {
    Scratch& s = scratch();
    buildNpyHeader(s.header, payload.dtype, payload.shape);
    const uint64_t estimate = npyFileSize(payload, s.header.size());
    Result<bool> admitted = admitPayload(estimate);
    if (!admitted) return admitted.error();
    if (!admitted.value()) return std::make_pair(false, uint64_t{0});
    auto written = publish(
        lease, name, lz4 ? ".npy.lz4" : ".npy", lz4, kTensorFileMode, sync,
        [&](WritableFile& f) { return writeNpy(f, payload, s.header, lz4); }, {}, final_name);
    if (!written) {
      releasePayload(estimate, 0);
      return written.error();
    }
    releasePayload(estimate, written.value());
    return std::make_pair(true, written.value());
  }

  void countDropped(DirState* ds, uint64_t n, std::string_view reason) {
    tensors_dropped.fetch_add(n, std::memory_order_relaxed);
    if (ds) {
      ds->dropped.fetch_add(n, std::memory_order_relaxed);
      ds->addReason(reason);
    }
  }

  // The payload file name of `t` in op (with ".lz4" when compressing).
  void payloadName(std::string& name, const OpRecord& op, const TensorView& t,
                   uint64_t timestamp) const {
    std::string_view format =
        plan.trans_flag || t.format.empty() ? std::string_view("DefaultFormat") : t.format;
    name.clear();
    appendTensorFileName(name, {op.op_type, op.op_name, op.task_id, op.stream_id, timestamp, t.io,
                                t.slot, format, t.dtype});
    if (lz4) name.append(".lz4");
  }

  void countPayload(DirState& ds, OpOutcome& outcome, uint64_t bytes) {
    ++outcome.tensors_written;
    outcome.bytes_written += bytes;
    tensors_written.fetch_add(1, std::memory_order_relaxed);
    bytes_written.fetch_add(bytes, std::memory_order_relaxed);
    ds.tensors.fetch_add(1, std::memory_order_relaxed);
    ds.bytes.fetch_add(bytes, std::memory_order_relaxed);
  }

  // Adds t's statistic.csv row to the op's rows. Without a payload file the row is what
  // counts as the tensor written.
  void addStatistics(OpRows& rows, const OpRecord& op, const TensorView& t, uint64_t elements,
                     uint64_t timestamp, const TensorStats& stats, bool row_only) {
    appendStatisticRow(rows.of(t.io),
                       {op.op_type, op.op_name, op.task_id, op.stream_id, timestamp, t.io, t.slot,
                        sourceBytes(t.dtype, elements), t.dtype, t.shape},
                       stats, plan.statistic_category, plan.ms_format);
    rows.row_only += row_only ? 1 : 0;
  }

  // Appends the op's rows to its statistic.csv. The calling thread may be in a call that
  // never entered the credentials (an op with nothing to write, releasing other ops' rows):
  // they are entered here (nested in a call's own scope it is free).
  Status appendRows(OpRows& rows) {
    if (rows.inputs.empty() && rows.outputs.empty()) return {};
    ScopedCredentials scope;
    if (Status s = actAs(scope); !s) return s;
    auto lease = pin(rows.dir);
    if (!lease) return recordError(lease.error(), rows.dir.get());
    rows.inputs.append(rows.outputs);
    if (Status s = appendLine(lease.value(), /*stat_csv=*/true, rows.inputs); !s) {
      return recordError(s.error(), rows.dir.get());
    }
    return {};
  }

  void countRowOnly(const OpRows& rows, OpOutcome& outcome) {
    if (rows.row_only == 0) return;
    outcome.tensors_written += rows.row_only;
    tensors_written.fetch_add(rows.row_only, std::memory_order_relaxed);
    rows.dir->tensors.fetch_add(rows.row_only, std::memory_order_relaxed);
  }

  Result<OpOutcome> writeOpTensors(const OpRecord& op, OpOutcome* partial, OpRows& rows);
  // file_format "bin": the op's selected tensors (counts[i] elements each) as one file
  // (storage/bin_op.h), their statistics rows as for npy.
  Status writeOpBin(DirLease& lease, OpRows& rows, const OpRecord& op, const uint64_t* counts,
                    OpOutcome& outcome);

  // Dump once: tells the tensors that repeat t what was written for it.
  static void publishMemo(const TensorView& t, const DirState& ds, MemoResult memo) {
    if (t.memo == nullptr) return;
    memo.ok = true;
    memo.dir = ds.path;
    t.memo->publish(std::move(memo));
  }

  Status writeTensor(DirLease& lease, OpRows& rows, const OpRecord& op, const TensorView& t,
                     uint64_t elements, OpOutcome& outcome) {
    if (t.same_as != nullptr) return writeRepeat(lease, rows, op, t, elements, outcome);
    DirState& ds = lease.state();
    const uint64_t timestamp = t.timestamp_us != 0 ? t.timestamp_us : nowMicros();
    const bool want_payload = plan.savesTensors();
    const bool want_stats = plan.savesStatistics() && hasStatistics(t.dtype);
    if (want_payload && t.sums != nullptr) {
      return makeError(ErrorCode::kInvalidArgument, "tensor " + std::string(op.op_name) +
                                                        " carries device statistics, but " +
                                                        "the job saves tensors");
    }
    MemoResult memo;
    if (want_payload) {
      Scratch& s = scratch();
      payloadName(s.name, op, t, timestamp);
      NpyPayload payload{t.dtype, t.shape, elements, t.data};
      int64_t sample_shape[1];
      if (plan.sample_mode && plan.sample_num > 0 && elements > plan.sample_num) {
        sample_shape[0] = plan.sample_num;
        payload.shape = sample_shape;
        payload.elements = plan.sample_num;
      }
      // s.name stays untouched until the file is published (publish uses other buffers).
      auto r = writePayload(lease, s.name, payload, tensorSync(), t.memo ? &memo.file : nullptr);
      if (!r) return r.error();
      if (r.value().first) {
        countPayload(ds, outcome, r.value().second);
        memo.file_bytes = r.value().second;
      } else {
        ++outcome.tensors_dropped;
        countDropped(&ds, 1, stopReason());
        memo.payload_dropped = true;
      }
    }
    if (want_stats) {
      TensorStats stats;
      if (t.sums != nullptr) {
        statsFromSums(*t.sums, stats);
      } else {
        computeStats(t.dtype, elements, t.data, stat_options, stats);
      }
      addStatistics(rows, op, t, elements, timestamp, stats, !want_payload);
      if (t.memo) memo.stats = stats;
    }
    publishMemo(t, ds, std::move(memo));
    return {};
  }

  // A tensor that repeats an earlier one (dump once): its file is made from that one's
  // (writeRepeatFile), its row has that one's statistics.
  Status writeRepeat(DirLease& lease, OpRows& rows, const OpRecord& op, const TensorView& t,
                     uint64_t elements, OpOutcome& outcome) {
    DirState& ds = lease.state();
    auto refuse = [&](const std::string& why) {
      return makeError(ErrorCode::kInvalidArgument, "tensor " + std::string(op.op_name) + " " +
                                                        std::string(ioName(t.io)) + " " +
                                                        std::to_string(t.slot) + " " + why);
    };
    const MemoResult& source = t.same_as->wait();
    if (!source.ok) return refuse("repeats a tensor that was not written: " + source.error);
    const uint64_t timestamp = t.timestamp_us != 0 ? t.timestamp_us : nowMicros();
    const bool want_payload = plan.savesTensors();
    const bool want_stats = plan.savesStatistics() && hasStatistics(t.dtype);
    MemoResult memo;
    if (want_payload) {
      bool written = false;
      if (!source.payload_dropped && !payload_stopped.load(std::memory_order_acquire)) {
        if (source.file.empty() || source.dir != ds.path) {
          return refuse("repeats a tensor whose file is not in " + ds.path);
        }
        auto r = writeRepeatFile(lease, op, t, timestamp, outcome, t.memo ? &memo : nullptr);
        if (!r) return r.error();
        written = r.value();
      }
      if (!written) {
        ++outcome.tensors_dropped;
        countDropped(&ds, 1, stopReason());
        memo.payload_dropped = true;
      }
    }
    if (want_stats) {
      if (!source.stats) return refuse("repeats a tensor that has no statistics row");
      addStatistics(rows, op, t, elements, timestamp, *source.stats, !want_payload);
      memo.stats = source.stats;
    }
    publishMemo(t, ds, std::move(memo));
    return {};
  }

  // A repeat's file: a hard link of the memo's link source, charged nothing. When that file
  // has max_links_per_file links already, or the file system refuses the link, a new first
  // file: a copy that passes the payload gate (quota, free space) like any payload and
  // becomes the link source of later repeats (storage/tensor_memo.h). Returns false when the
  // gate dropped it. `memo` (optional) receives the file published.
  Result<bool> writeRepeatFile(DirLease& lease, const OpRecord& op, const TensorView& t,
                               uint64_t timestamp, OpOutcome& outcome, MemoResult* memo) {
    DirState& ds = lease.state();
    Scratch& s = scratch();
    payloadName(s.name, op, t, timestamp);  // untouched by publish (it uses other buffers)
    const std::string_view ext = lz4 ? ".npy.lz4" : ".npy";
    auto nothing = [](WritableFile&) { return Status{}; };
    std::string* final_name = memo != nullptr ? &memo->file : nullptr;
    const uint32_t max_links = std::max<uint32_t>(options.max_links_per_file, 1);
    LinkSource source = t.same_as->claimLink(max_links);
    // Each refused link either makes this call the writer of the new first file or finds one
    // another call wrote meanwhile; the bound only stops a file system that refuses them all.
    for (int tries = 0; source.claimed; ++tries) {
      if (tries == kMaxLinkTries) {
        return makeError(ErrorCode::kIo, "link " + ds.path + "/" + source.file + ": refused " +
                                             std::to_string(tries) + " times");
      }
      auto linked = publish(lease, s.name, ext, lz4, kTensorFileMode, tensorSync(), nothing,
                            {FileSource::kLink, source.file}, final_name);
      if (linked) {
        countPayload(ds, outcome, 0);
        ++outcome.tensors_linked;
        tensors_linked.fetch_add(1, std::memory_order_relaxed);
        if (memo != nullptr) memo->file_bytes = source.bytes;
        return true;
      }
      if (linked.error().code != ErrorCode::kUnsupported) return linked.error();
      source = t.same_as->linkRefused(source.file, max_links);
    }
    // This call writes the new first file; the other repeats wait until it is done.
    struct Rebasing {
      TensorMemo* memo;
      ~Rebasing() {
        if (memo != nullptr) memo->abandonRebase();
      }
    } rebasing{t.same_as};
    Result<bool> admitted = admitPayload(source.bytes);
    if (!admitted || !admitted.value()) return admitted;
    std::string copy_name;
    auto copied = publish(lease, s.name, ext, lz4, kTensorFileMode, tensorSync(), nothing,
                          {FileSource::kCopy, source.file}, &copy_name);
    if (!copied) {
      releasePayload(source.bytes, 0);
      return copied.error();
    }
    releasePayload(source.bytes, copied.value());
    rebasing.memo = nullptr;
    t.same_as->rebase(copy_name, copied.value());
    countPayload(ds, outcome, copied.value());
    ++outcome.tensors_linked;
    ++outcome.repeats_copied;
    tensors_linked.fetch_add(1, std::memory_order_relaxed);
    repeats_copied.fetch_add(1, std::memory_order_relaxed);
    if (memo != nullptr) {
      memo->file = std::move(copy_name);
      memo->file_bytes = copied.value();
    }
    return true;
  }

  Status appendManifest(const std::string& line) {
    std::lock_guard lock(manifest_mu);
    if (!manifest) {
      auto lease = pin(metadata);
      if (!lease) return lease.error();
      auto opened = openAppender(lease.value().dir(), "manifest.jsonl", {}, syncDirs());
      if (!opened) return opened.error();
      manifest.hold(std::move(opened.value()));
    }
    if (Status s = manifest->append(line); !s) return s;
    if (syncDirs()) return manifest->sync();
    return {};
  }

  // Syncs what the durability setting deferred to completion in ds (through `dir`, its
  // directory, reopened here when it was closed), then closes ds's appenders.
  // REQUIRES: ds.mu held; ds detached (detachLocked).
  Status syncAtCompletion(DirState& ds, std::shared_ptr<Directory> dir) {
    Status result;
    if (!dir) {
      auto reopened = fs->openDirectory(ds.path, {});
      if (!reopened) return reopened.error();
      dir = std::move(reopened.value());
    }
    for (const std::string& name : ds.unsynced) {
      if (Status s = dir->syncFile(name); !s && result) result = s;
    }
    const std::pair<HeldAppender*, bool> csvs[] = {{&ds.stat_csv, ds.stat_csv_used},
                                                   {&ds.mapping_csv, ds.mapping_csv_used}};
    for (auto [file, used] : csvs) {
      Status s;
      if (*file) {
        s = (*file)->sync();
      } else if (used) {  // closed with its directory meanwhile
        s = dir->syncFile(file == &ds.stat_csv ? "statistic.csv" : "mapping.csv");
      }
      if (!s && result) result = s;
    }
    if (Status s = dir->sync(); !s && result) result = s;
    return result;
  }

  // `dir`: ds's directory as detached from the open ones (null when it was closed).
  Status complete(uint32_t graph, uint32_t iteration, std::shared_ptr<DirState> ds,
                  std::shared_ptr<Directory> dir, uint64_t dropped_upstream,
                  std::string_view upstream_reason) {
    Status result;
    uint64_t tensors = 0, bytes = 0, dropped = dropped_upstream, errors = 0;
    std::vector<std::string> reasons;
    if (ds) {
      std::lock_guard lock(ds->mu);
      if (syncDirs()) result = syncAtCompletion(*ds, std::move(dir));
      ds->unsynced.clear();
      ds->stat_csv.reset();
      ds->mapping_csv.reset();
      tensors = ds->tensors.load();
      bytes = ds->bytes.load();
      dropped += ds->dropped.load();
      errors = ds->errors;
      reasons = ds->reasons;
    }
    if (!upstream_reason.empty()) {
      reasons.emplace_back(upstream_reason);
    } else if (dropped_upstream != 0) {
      reasons.emplace_back("dropped before storage");
    }
    if (errors != 0) reasons.push_back(std::to_string(errors) + " write error(s)");
    if (!result) reasons.push_back(result.error().message);
    nlohmann::ordered_json j;
    j["graph"] = graph;
    j["iteration"] = iteration;
    j["tensors"] = tensors;
    j["bytes"] = bytes;
    j["dropped"] = dropped;
    j["reasons"] = reasons;
    j["complete"] = result.has_value() && errors == 0;
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line.push_back('\n');
    if (Status s = appendManifest(line); !s && result) result = s;
    if (!result) return recordError(result.error());
    return result;
  }
};

JobWriter::JobWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobWriter::~JobWriter() = default;

Result<std::unique_ptr<JobWriter>> JobWriter::create(std::shared_ptr<FileSystem> fs,
                                                     const config::DumpPlan& plan,
                                                     JobOptions options) {
  if (!fs) return makeError(ErrorCode::kInvalidArgument, "JobWriter needs a file system");
  auto impl = std::make_unique<Impl>();
  impl->fs = std::move(fs);
  impl->plan = plan;
  impl->options = std::move(options);
  impl->rank_dir = "rank_" + std::to_string(impl->options.rank);
  impl->net_dir = impl->rank_dir + "/" + sanitizeName(plan.net_name);
  impl->csv_header = statisticCsvHeader(plan.statistic_category);
  impl->stat_options = statOptionsFor(plan.statistic_category);
  impl->lz4 = impl->options.compression == config::Compression::kLz4;

  ScopedCredentials scope;
  if (Status s = scope.enter(impl->fs->credentials()); !s) return s.error();
  impl->metadata = impl->newDirState(impl->rank_dir + "/.dump_metadata");
  {
    auto lease = impl->pin(impl->metadata);
    if (!lease) return lease.error();
    const SyncPolicy sync = impl->otherSync();
    if (auto r = impl->publishText(lease.value(), "data_dump.json", plan.config_text, sync); !r) {
      return r.error();
    }
    std::string config_json = "{\"device_target\":" + jsonString(impl->options.device_target) +
                              ",\"ms_version\":" + jsonString(impl->options.producer_version) + "}";
    if (auto r = impl->publishText(lease.value(), "config.json", config_json, sync); !r) {
      return r.error();
    }
  }
  return std::unique_ptr<JobWriter>(new JobWriter(std::move(impl)));
}

namespace {

// Publishes "not written" into the memos of op.tensors[from..] that are still open: a
// repeat waiting on one of them must not wait forever (see storage/tensor_memo.h).
void settleMemos(const OpRecord& op, size_t from, const std::string& why) {
  for (size_t i = from; i < op.tensors.size(); ++i) {
    if (op.tensors[i].memo != nullptr) op.tensors[i].memo->publish(MemoResult{false, why});
  }
}

}  // namespace

uint64_t JobWriter::takeRowTicket() {
  return impl_->plan.savesStatistics() ? impl_->row_order.take() : 0;
}

Result<OpOutcome> JobWriter::writeOp(const OpRecord& op, OpOutcome* partial) {
  Impl& m = *impl_;
  OpRows rows;
  OpOutcome failed_at;
  auto result = m.writeOpTensors(op, &failed_at, rows);
  OpOutcome& outcome = result ? result.value() : failed_at;
  if (op.row_ticket == 0) {
    if (Status s = m.appendRows(rows); !s) {
      if (partial != nullptr) *partial = outcome;
      return s.error();
    }
    m.countRowOnly(rows, outcome);
  } else {
    // Counted now: the rows are appended once every op before this one is done, possibly
    // after this call returns. A failure then is a write error of the job (counters()).
    m.countRowOnly(rows, outcome);
    m.row_order.complete(op.row_ticket, std::move(rows),
                         [&m](OpRows& r) { (void)m.appendRows(r); });
  }
  if (!result && partial != nullptr) *partial = outcome;
  return result;
}

Result<OpOutcome> JobWriter::Impl::writeOpTensors(const OpRecord& op, OpOutcome* partial,
                                                  OpRows& rows) {
  Impl& m = *this;
  // Check every tensor first: a malformed record writes nothing.
  constexpr size_t kInlineTensors = 16;
  uint64_t inline_counts[kInlineTensors];
  std::vector<uint64_t> heap_counts;
  uint64_t* counts = inline_counts;
  if (op.tensors.size() > kInlineTensors) {
    heap_counts.resize(op.tensors.size());
    counts = heap_counts.data();
  }
  bool any_selected = false;
  bool overflow = false;
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const TensorView& t = op.tensors[i];
    auto n = checkTensor(t, op.op_name);
    if (!n) {
      settleMemos(op, 0, n.error().message);
      return m.recordError(n.error());
    }
    counts[i] = n.value();
    any_selected |= ioSelected(m.plan.input_output, t.io) && counts[i] != 0;
    if (m.plan.op_debug_mode == 3 && t.io == Io::kOutput) {
      // Each count alone: forged counts must not sum (wrap) to zero.
      overflow = overflow || (t.sums != nullptr ? t.sums->nan != 0 || t.sums->negative_inf != 0 ||
                                                      t.sums->positive_inf != 0
                                                : containsNonFinite(t.dtype, t.data));
    }
  }
  OpOutcome outcome;
  // Overflow dump: only op executions with an inf/NaN output, the first overflow_number.
  if (!any_selected || (m.plan.op_debug_mode == 3 && !overflow)) {
    settleMemos(op, 0, "its op was not dumped (input_output, empty, or no overflow)");
    return outcome;
  }
  // One switch for the whole op instead of one per file operation (see Impl::actAs).
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) {
    settleMemos(op, 0, s.error().message);
    return s.error();
  }
  auto lease = m.iterationDir(op.graph_id, op.iteration);
  if (!lease) {
    settleMemos(op, 0, lease.error().message);
    return m.recordError(lease.error());
  }
  DirState& dir = lease.value().state();
  rows.dir = lease.value().sharedState();

  if (m.plan.op_debug_mode == 3) {
    uint32_t index = m.overflow_ops.fetch_add(1, std::memory_order_relaxed);
    if (m.plan.overflow_number != 0 && index >= m.plan.overflow_number) {
      for (size_t i = 0; i < op.tensors.size(); ++i) {
        if (ioSelected(m.plan.input_output, op.tensors[i].io) && counts[i] != 0) {
          ++outcome.tensors_dropped;
        }
      }
      m.countDropped(&dir, outcome.tensors_dropped,
                     "overflow_number " + std::to_string(m.plan.overflow_number) + " reached");
      settleMemos(op, 0, "overflow_number reached");
      return outcome;
    }
  }

  if (m.plan.file_format == config::FileFormat::kBin) {
    Status s = m.writeOpBin(lease.value(), rows, op, counts, outcome);
    settleMemos(op, 0, "file_format bin writes every op's own bytes: no tensor is repeated");
    if (!s) {
      if (partial != nullptr) *partial = outcome;
      return m.recordError(s.error(), &dir);
    }
    return outcome;
  }
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const TensorView& t = op.tensors[i];
    if (!ioSelected(m.plan.input_output, t.io) || counts[i] == 0) {
      if (t.memo != nullptr) t.memo->publish(MemoResult{false, "it was not dumped"});
      continue;
    }
    if (Status s = m.writeTensor(lease.value(), rows, op, t, counts[i], outcome); !s) {
      if (partial != nullptr) *partial = outcome;
      settleMemos(op, i, s.error().message);
      return m.recordError(s.error(), &dir);
    }
  }
  return outcome;
}

Status JobWriter::Impl::writeOpBin(DirLease& lease, OpRows& rows, const OpRecord& op,
                                   const uint64_t* counts, OpOutcome& outcome) {
  DirState& ds = lease.state();
  const bool want_payload = plan.savesTensors();
  // One timestamp for the file name, dump_time and the op's statistic rows.
  uint64_t timestamp = 0;
  for (size_t i = 0; i < op.tensors.size() && timestamp == 0; ++i) {
    if (ioSelected(plan.input_output, op.tensors[i].io)) timestamp = op.tensors[i].timestamp_us;
  }
  if (timestamp == 0) timestamp = nowMicros();
  thread_local BinOpFile file;
  file.clear();
  // Empty tensors are in the file too (size 0), so that a reader's index is the slot.
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const TensorView& t = op.tensors[i];
    if (!ioSelected(plan.input_output, t.io)) continue;
    if (t.same_as != nullptr) {
      return makeError(ErrorCode::kInvalidArgument,
                       "tensor " + std::string(op.op_name) + " " + std::string(ioName(t.io)) + " " +
                           std::to_string(t.slot) +
                           " repeats an earlier tensor, but a bin file holds its op's own "
                           "bytes (clients send no repeats to file_format bin jobs)");
    }
    if (want_payload && t.sums != nullptr) {
      return makeError(ErrorCode::kInvalidArgument, "tensor " + std::string(op.op_name) +
                                                        " carries device statistics, but " +
                                                        "the job saves tensors");
    }
    if (plan.savesStatistics() && hasStatistics(t.dtype) && counts[i] != 0) {
      TensorStats stats;
      if (t.sums != nullptr) {
        statsFromSums(*t.sums, stats);
      } else {
        computeStats(t.dtype, counts[i], t.data, stat_options, stats);
      }
      addStatistics(rows, op, t, counts[i], timestamp, stats, !want_payload);
    }
    if (!want_payload) continue;
    std::string_view format =
        plan.trans_flag || t.format.empty() ? std::string_view("DefaultFormat") : t.format;
    if (plan.sample_mode && plan.sample_num > 0 && counts[i] > plan.sample_num) {
      const int64_t sample_shape[1] = {static_cast<int64_t>(plan.sample_num)};
      file.add(t, sample_shape, plan.sample_num, format);
    } else {
      file.add(t, t.shape, counts[i], format);
    }
  }
  const uint64_t tensors = file.tensorCount();
  if (tensors == 0) return {};
  file.build(op.op_name, timestamp);
  Scratch& s = scratch();
  s.name.clear();
  appendBinFileName(s.name, op.op_type, op.op_name, op.task_id, op.stream_id, timestamp);
  const uint64_t estimate = file.fileSize();
  Result<bool> admitted = admitPayload(estimate);
  if (!admitted) return admitted.error();
  if (!admitted.value()) {
    outcome.tensors_dropped += static_cast<uint32_t>(tensors);
    countDropped(&ds, tensors, stopReason());
    return {};
  }
  auto written = publish(lease, s.name, {}, false, kTensorFileMode, tensorSync(),
                         [&](WritableFile& f) { return f.write(file.buffers()); });
  if (!written) {
    releasePayload(estimate, 0);
    return written.error();
  }
  releasePayload(estimate, written.value());
  // The file counts once in bytes; each tensor in it counts as written.
  for (uint64_t k = 0; k < tensors; ++k) countPayload(ds, outcome, k == 0 ? written.value() : 0);
  return {};
}

Status JobWriter::writeConstant(uint32_t graph_id, std::string_view data_id,
                                const TensorView& tensor) {
  Impl& m = *impl_;
  auto n = checkTensor(tensor, data_id);
  if (!n) return m.recordError(n.error());
  if (n.value() == 0) return {};
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  auto lease = m.constantsDir(graph_id);
  if (!lease) return m.recordError(lease.error());
  std::string op_name = "data-";
  appendSanitized(op_name, data_id);
  const uint64_t timestamp = tensor.timestamp_us != 0 ? tensor.timestamp_us : nowMicros();
  if (m.plan.savesTensors()) {
    std::string name = "Parameter." + op_name + ".0.0.";
    appendDecimal(name, timestamp);
    name.append(".output.0.DefaultFormat.");
    name.append(dtypeName(tensor.dtype));
    name.append(m.lz4 ? ".npy.lz4" : ".npy");
    NpyPayload payload{tensor.dtype, tensor.shape, n.value(), tensor.data};
    auto r = m.writePayload(lease.value(), name, payload, m.otherSync());
    if (!r) return m.recordError(r.error());
    if (r.value().first) {
      m.tensors_written.fetch_add(1, std::memory_order_relaxed);
      m.bytes_written.fetch_add(r.value().second, std::memory_order_relaxed);
    } else {
      m.countDropped(nullptr, 1, {});
    }
  }
  if (m.plan.savesStatistics() && hasStatistics(tensor.dtype)) {
    // constants/statistic.csv, as MindSpore's GPU dump writes it: Op Type "Parameter", Op
    // Name the file's "data-{id}" in both generations.
    TensorStats stats;
    computeStats(tensor.dtype, n.value(), tensor.data, m.stat_options, stats);
    OpRows rows;
    rows.dir = lease.value().sharedState();
    appendStatisticRow(rows.outputs,
                       {"Parameter", op_name, 0, 0, timestamp, Io::kOutput, 0,
                        sourceBytes(tensor.dtype, n.value()), tensor.dtype, tensor.shape},
                       stats, m.plan.statistic_category, m.plan.ms_format);
    if (Status s = m.appendRows(rows); !s) return s;
    if (!m.plan.savesTensors()) m.tensors_written.fetch_add(1, std::memory_order_relaxed);
  }
  return {};
}

Status JobWriter::writeGraph(uint32_t graph_id, std::string_view ir_text,
                             std::string_view pb_bytes) {
  Impl& m = *impl_;
  if (ir_text.empty() && pb_bytes.empty()) return {};
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  auto lease = m.rankSubdir("graphs");
  if (!lease) return m.recordError(lease.error());
  std::string base = "ms_output_trace_code_graph_" + std::to_string(graph_id);
  if (!ir_text.empty()) {
    if (auto r = m.publishText(lease.value(), base + ".ir", ir_text, m.otherSync()); !r) {
      return m.recordError(r.error());
    }
  }
  if (!pb_bytes.empty()) {
    if (auto r = m.publishText(lease.value(), base + ".pb", pb_bytes, m.otherSync()); !r) {
      return m.recordError(r.error());
    }
  }
  return {};
}

Status JobWriter::writeExecutionOrder(uint32_t graph_id, const std::vector<std::string>& op_names) {
  Impl& m = *impl_;
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  auto lease = m.rankSubdir("execution_order");
  if (!lease) return m.recordError(lease.error());
  std::string text = "NodeExecutionOrder-FullNameWithScope\n";
  for (const std::string& name : op_names) {
    text.append(name);
    text.push_back('\n');
  }
  std::string file = "ms_execution_order_graph_" + std::to_string(graph_id) + ".csv";
  if (auto r = m.publishText(lease.value(), file, text, m.otherSync()); !r) {
    return m.recordError(r.error());
  }
  return {};
}

Status JobWriter::appendGlobalExecutionOrder(uint32_t graph_id, uint32_t iteration) {
  Impl& m = *impl_;
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  auto lease = m.rankSubdir("execution_order");
  if (!lease) return m.recordError(lease.error());
  std::string file = "ms_global_execution_order_graph_" + std::to_string(graph_id) + ".csv";
  std::lock_guard lock(lease.value().state().mu);
  auto opened = m.openAppender(lease.value().dir(), file, {}, m.syncDirs());
  if (!opened) return m.recordError(opened.error());
  std::unique_ptr<AppendFile> appender = std::move(opened.value());
  std::string line = std::to_string(iteration) + "\n";
  if (Status s = appender->append(line); !s) return m.recordError(s.error());
  if (m.syncDirs()) {
    if (Status s = appender->sync(); !s) return m.recordError(s.error());
  }
  return {};
}

Status JobWriter::writeKernelArgs(uint32_t graph_id, uint32_t iteration, std::string_view op_type,
                                  std::string_view op_name,
                                  const std::vector<std::pair<std::string, std::string>>& args) {
  Impl& m = *impl_;
  if (!m.plan.save_kernel_args) return {};
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  auto lease = m.iterationDir(graph_id, iteration);
  if (!lease) return m.recordError(lease.error());
  const std::string name = kernelArgsFileName(op_type, op_name);
  // As MindSpore's E2eDump writes it: nlohmann's dump(4) of an object of strings (keys
  // sorted), no trailing newline; "null" when there are none.
  nlohmann::json j;
  for (const auto& [key, value] : args) j[key] = value;
  const std::string text = j.dump(4, ' ', false, nlohmann::json::error_handler_t::replace);
  if (auto r = m.publish(lease.value(), name, ".json", false, kTensorFileMode, m.tensorSync(),
                         [&text](WritableFile& f) { return f.write(asBytes(text)); });
      !r) {
    return m.recordError(r.error(), &lease.value().state());
  }
  return {};
}

Status JobWriter::completeIteration(uint32_t graph_id, uint32_t iteration,
                                    uint64_t dropped_upstream, std::string_view reason) {
  Impl& m = *impl_;
  uint64_t key = iterationKey(graph_id, iteration);
  std::shared_ptr<DirState> ds;
  std::shared_ptr<Directory> dir;
  {
    std::lock_guard lock(m.mu);
    auto it = m.open_iterations.find(key);
    if (it != m.open_iterations.end()) {
      ds = std::move(it->second);
      m.open_iterations.erase(it);
      dir = m.detachLocked(*ds);
    } else if (m.completed.count(key) != 0) {
      return {};  // idempotent
    }
    m.completed.insert(key);
  }
  if (dropped_upstream != 0) m.tensors_dropped.fetch_add(dropped_upstream);
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  return m.complete(graph_id, iteration, std::move(ds), std::move(dir), dropped_upstream, reason);
}

Status JobWriter::finish(uint64_t dropped_upstream) {
  Impl& m = *impl_;
  std::vector<std::pair<std::shared_ptr<DirState>, std::shared_ptr<Directory>>> open;
  {
    std::lock_guard lock(m.mu);
    for (auto& [key, ds] : m.open_iterations) {
      std::shared_ptr<Directory> dir = m.detachLocked(*ds);
      open.emplace_back(std::move(ds), std::move(dir));
      m.completed.insert(key);
    }
    m.open_iterations.clear();
  }
  if (dropped_upstream != 0) m.tensors_dropped.fetch_add(dropped_upstream);
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  Status result;
  // Upstream drops of the session's tail belong to its latest iteration.
  for (size_t i = 0; i < open.size(); ++i) {
    bool last = i + 1 == open.size();
    auto& [ds, dir] = open[i];
    Status s =
        m.complete(ds->graph, ds->iteration, ds, std::move(dir), last ? dropped_upstream : 0, {});
    if (!s && result) result = s;
  }
  return result;
}

JobCounters JobWriter::counters() const {
  const Impl& m = *impl_;
  JobCounters c;
  c.tensors_written = m.tensors_written.load(std::memory_order_relaxed);
  c.tensors_dropped = m.tensors_dropped.load(std::memory_order_relaxed);
  c.bytes_written = m.bytes_written.load(std::memory_order_relaxed);
  c.tensors_linked = m.tensors_linked.load(std::memory_order_relaxed);
  c.repeats_copied = m.repeats_copied.load(std::memory_order_relaxed);
  c.write_errors = m.write_errors.load(std::memory_order_relaxed);
  c.open_directories = m.open_directories.load(std::memory_order_relaxed);
  c.open_fds = c.open_directories + m.open_appenders.load(std::memory_order_relaxed);
  c.stale_temporaries_removed = m.stale_temporaries_removed.load(std::memory_order_relaxed);
  std::lock_guard lock(m.counters_mu);
  c.stop_reason = m.stop_reason;
  c.last_error = m.last_error;
  return c;
}

const config::DumpPlan& JobWriter::plan() const { return impl_->plan; }

bool JobWriter::listsEveryIteration() const { return impl_->options.device_target != "CPU"; }

}  // namespace dumpd::storage
