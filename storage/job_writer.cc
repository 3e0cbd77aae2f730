#include "storage/job_writer.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "storage/names.h"
#include "storage/npy.h"
#include "storage/statistic_csv.h"
#include "storage/statistics.h"

namespace dumpd::storage {
namespace {

using config::Durability;

constexpr uint32_t kTensorFileMode = 0400;  // as MindSpore leaves its tensor files
constexpr uint32_t kOtherFileMode = 0644;
// With a free-space watermark, statvfs is asked again after at most this many payload bytes.
constexpr uint64_t kFreeSpaceRecheckBytes = uint64_t{64} << 20;

uint64_t nowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

uint64_t iterationKey(uint32_t graph, uint32_t iteration) {
  return (uint64_t{graph} << 32) | iteration;
}

bool ioSelected(config::IoSelect select, config::Io io) {
  switch (select) {
    case config::IoSelect::kBoth:
      return true;
    case config::IoSelect::kInputs:
      return io == config::Io::kInput;
    case config::IoSelect::kOutputs:
      return io == config::Io::kOutput;
  }
  return true;
}

// A JSON string literal; invalid UTF-8 is replaced rather than thrown about.
std::string jsonString(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
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
  uint64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return bad("negative dimension");
    // 2^56 elements of at most 16 bytes: byte counts below can never overflow.
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > (uint64_t{1} << 56)) {
      return bad("too many elements");
    }
  }
  uint64_t need = sourceBytes(t.dtype, n);
  if (t.data.size() != need) {
    return bad("has " + std::to_string(t.data.size()) + " data bytes, " +
               std::string(dtypeName(t.dtype)) + " needs " + std::to_string(need));
  }
  return n;
}

// One directory the job writes files into, with its appenders. An iteration directory also
// keeps the figures of its manifest line.
struct DirState {
  std::shared_ptr<Directory> dir;
  uint32_t graph = 0;
  uint32_t iteration = 0;

  std::mutex mu;  // guards the appenders, `unsynced`, `reasons`, `errors`
  std::unique_ptr<AppendFile> stat_csv;
  std::unique_ptr<AppendFile> mapping_csv;
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

enum class SyncPolicy { kNone, kNow, kDeferred };

}  // namespace

struct JobWriter::Impl {
  std::shared_ptr<FileSystem> fs;
  config::DumpPlan plan;
  JobOptions options;
  std::string rank_dir;  // "rank_3"
  std::string net_dir;   // "rank_3/Net"
  std::string csv_header;
  StatOptions stat_options;
  bool lz4 = false;
  std::shared_ptr<DirState> metadata;

  std::mutex mu;  // guards the maps below
  std::map<uint64_t, std::shared_ptr<DirState>> open_iterations;
  std::set<uint64_t> completed;
  std::map<uint32_t, std::shared_ptr<DirState>> constants;
  std::map<std::string, std::shared_ptr<DirState>> rank_subdirs;  // graphs, execution_order

  std::mutex manifest_mu;
  std::unique_ptr<AppendFile> manifest;

  // Payload gate: quota and free-space watermark.
  std::atomic<bool> payload_stopped{false};
  std::atomic<uint64_t> payload_bytes{0};  // written plus reserved by writes in flight
  std::mutex free_mu;
  std::atomic<int64_t> free_budget{0};  // payload bytes allowed before statvfs is asked again
  std::atomic<uint32_t> overflow_ops{0};

  std::atomic<uint64_t> tensors_written{0};
  std::atomic<uint64_t> tensors_dropped{0};
  std::atomic<uint64_t> bytes_written{0};
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

  void stopPayloads(const std::string& reason) {
    std::lock_guard lock(counters_mu);
    if (stop_reason.empty()) stop_reason = reason;
    payload_stopped.store(true, std::memory_order_release);
  }

  std::string stopReason() const {
    std::lock_guard lock(counters_mu);
    return stop_reason;
  }

  Result<std::shared_ptr<DirState>> openDirState(const std::string& path) {
    auto dir = fs->openDirectory(path, {.create = true, .sync_created = syncDirs()});
    if (!dir) return dir.error();
    auto ds = std::make_shared<DirState>();
    ds->dir = std::move(dir.value());
    return ds;
  }

  Result<std::shared_ptr<DirState>> iterationDir(uint32_t graph, uint32_t iteration) {
    uint64_t key = iterationKey(graph, iteration);
    std::lock_guard lock(mu);
    auto it = open_iterations.find(key);
    if (it != open_iterations.end()) return it->second;
    std::string path = net_dir;
    path.push_back('/');
    appendDecimal(path, graph);
    path.push_back('/');
    appendDecimal(path, iteration);
    auto ds = openDirState(path);
    if (!ds) return ds.error();
    ds.value()->graph = graph;
    ds.value()->iteration = iteration;
    // Written again after completion: the iteration is reopened and gets a new manifest line.
    completed.erase(key);
    open_iterations.emplace(key, ds.value());
    return ds;
  }

  Result<std::shared_ptr<DirState>> constantsDir(uint32_t graph) {
    std::lock_guard lock(mu);
    auto it = constants.find(graph);
    if (it != constants.end()) return it->second;
    std::string path = net_dir;
    path.push_back('/');
    appendDecimal(path, graph);
    path.append("/constants");
    auto ds = openDirState(path);
    if (!ds) return ds.error();
    constants.emplace(graph, ds.value());
    return ds;
  }

  Result<std::shared_ptr<DirState>> rankSubdir(const std::string& name) {
    std::lock_guard lock(mu);
    auto it = rank_subdirs.find(name);
    if (it != rank_subdirs.end()) return it->second;
    auto ds = openDirState(rank_dir + "/" + name);
    if (!ds) return ds.error();
    rank_subdirs.emplace(name, ds.value());
    return ds;
  }

  // Lazily opens `file` = `name` in ds, writing `header` into a new (empty) file; with
  // `sync_new_entry`, a new file's directory entry is made durable at once.
  // REQUIRES: ds.mu held.
  Status ensureAppender(DirState& ds, std::unique_ptr<AppendFile>& file, std::string_view name,
                        std::string_view header, bool sync_new_entry) {
    if (file) return {};
    auto opened = ds.dir->openAppend(name);
    if (!opened) return opened.error();
    if (opened.value()->size() == 0) {
      if (sync_new_entry) {
        if (Status s = ds.dir->sync(); !s) return s;
      }
      if (!header.empty()) {
        if (Status s = opened.value()->append(header); !s) return s;
      }
    }
    file = std::move(opened.value());
    return {};
  }

  Status appendLine(DirState& ds, bool stat_csv, std::string_view line) {
    std::lock_guard lock(ds.mu);
    std::unique_ptr<AppendFile>& file = stat_csv ? ds.stat_csv : ds.mapping_csv;
    // Durability "iteration" syncs the directory at completion; "file" must do it now.
    Status s = ensureAppender(ds, file, stat_csv ? "statistic.csv" : "mapping.csv",
                              stat_csv ? std::string_view(csv_header) : std::string_view(),
                              options.durability == Durability::kFile);
    if (!s) return s;
    if (s = file->append(line); !s) return s;
    if (options.durability == Durability::kFile) return file->sync();
    return {};
  }

  // Writes file `name` in ds (temporary name, then rename). `body(WritableFile&)` writes the
  // contents. A name longer than 255 bytes is replaced by "<digits><ext>" and the pair is
  // appended to mapping.csv (names without the ".lz4" suffix: what `lz4 -d` restores).
  // Returns the bytes written.
  template <typename Body>
  Result<uint64_t> publish(DirState& ds, std::string_view name, std::string_view ext,
                           bool lz4_suffix, uint32_t mode, SyncPolicy sync, Body&& body) {
    std::string short_name;
    if (name.size() > kMaxFileNameBytes) {
      short_name = randomDigits();
      short_name.append(ext);
    }
    std::string_view final_name = short_name.empty() ? name : std::string_view(short_name);
    auto file = ds.dir->newFile(final_name, mode);
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
      if (Status s = appendLine(ds, /*stat_csv=*/false, line); !s) return s.error();
    }
    if (Status s = f.commit(); !s) return s.error();
    if (sync == SyncPolicy::kNow) {
      if (Status s = ds.dir->sync(); !s) return s.error();
    } else if (sync == SyncPolicy::kDeferred) {
      std::lock_guard lock(ds.mu);
      ds.unsynced.emplace_back(final_name);
    }
    return f.bytesWritten();
  }

  Result<uint64_t> publishText(DirState& ds, std::string_view name, std::string_view text,
                               SyncPolicy sync, std::string_view ext = {}) {
    return publish(ds, name, ext, false, kOtherFileMode, sync,
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
  Result<std::pair<bool, uint64_t>> writePayload(DirState& ds, std::string_view name,
                                                 const NpyPayload& payload, SyncPolicy sync) {
    Scratch& s = scratch();
    buildNpyHeader(s.header, payload.dtype, payload.shape);
    const uint64_t estimate = npyFileSize(payload, s.header.size());
    Result<bool> admitted = admitPayload(estimate);
    if (!admitted) return admitted.error();
    if (!admitted.value()) return std::make_pair(false, uint64_t{0});
    auto written = publish(ds, name, lz4 ? ".npy.lz4" : ".npy", lz4, kTensorFileMode, sync,
                           [&](WritableFile& f) { return writeNpy(f, payload, s.header, lz4); });
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

  Status writeTensor(DirState& ds, const OpRecord& op, const TensorView& t, uint64_t elements,
                     OpOutcome& outcome) {
    const uint64_t timestamp = t.timestamp_us != 0 ? t.timestamp_us : nowMicros();
    const bool want_payload = plan.savesTensors();
    const bool want_stats = plan.savesStatistics() && hasStatistics(t.dtype);
    if (want_payload) {
      std::string_view format =
          plan.trans_flag || t.format.empty() ? std::string_view("DefaultFormat") : t.format;
      Scratch& s = scratch();
      s.name.clear();
      appendTensorFileName(s.name, {op.op_type, op.op_name, op.task_id, op.stream_id, timestamp,
                                    t.io, t.slot, format, t.dtype});
      if (lz4) s.name.append(".lz4");
      NpyPayload payload{t.dtype, t.shape, elements, t.data};
      int64_t sample_shape[1];
      if (plan.sample_mode && plan.sample_num > 0 && elements > plan.sample_num) {
        sample_shape[0] = plan.sample_num;
        payload.shape = sample_shape;
        payload.elements = plan.sample_num;
      }
      // s.name stays untouched until the file is published (publish uses other buffers).
      auto r = writePayload(ds, s.name, payload, tensorSync());
      if (!r) return r.error();
      if (r.value().first) {
        ++outcome.tensors_written;
        outcome.bytes_written += r.value().second;
        tensors_written.fetch_add(1, std::memory_order_relaxed);
        bytes_written.fetch_add(r.value().second, std::memory_order_relaxed);
        ds.tensors.fetch_add(1, std::memory_order_relaxed);
        ds.bytes.fetch_add(r.value().second, std::memory_order_relaxed);
      } else {
        ++outcome.tensors_dropped;
        countDropped(&ds, 1, stopReason());
      }
    }
    if (want_stats) {
      TensorStats stats;
      computeStats(t.dtype, elements, t.data, stat_options, stats);
      Scratch& s = scratch();
      s.row.clear();
      appendStatisticRow(s.row,
                         {op.op_type, op.op_name, op.task_id, op.stream_id, timestamp, t.io, t.slot,
                          t.data.size(), t.dtype, t.shape},
                         stats, plan.statistic_category);
      if (Status st = appendLine(ds, /*stat_csv=*/true, s.row); !st) return st;
      if (!want_payload) {
        ++outcome.tensors_written;
        tensors_written.fetch_add(1, std::memory_order_relaxed);
        ds.tensors.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return {};
  }

  Status appendManifest(const std::string& line) {
    std::lock_guard lock(manifest_mu);
    if (!manifest) {
      std::lock_guard dir_lock(metadata->mu);
      if (Status s = ensureAppender(*metadata, manifest, "manifest.jsonl", {}, syncDirs()); !s) {
        return s;
      }
    }
    if (Status s = manifest->append(line); !s) return s;
    if (syncDirs()) return manifest->sync();
    return {};
  }

  Status complete(uint32_t graph, uint32_t iteration, std::shared_ptr<DirState> ds,
                  uint64_t dropped_upstream, std::string_view upstream_reason) {
    Status result;
    uint64_t tensors = 0, bytes = 0, dropped = dropped_upstream, errors = 0;
    std::vector<std::string> reasons;
    if (ds) {
      std::lock_guard lock(ds->mu);
      if (syncDirs()) {
        for (const std::string& name : ds->unsynced) {
          if (Status s = ds->dir->syncFile(name); !s && result) result = s;
        }
        for (auto* file : {&ds->stat_csv, &ds->mapping_csv}) {
          if (*file) {
            if (Status s = (*file)->sync(); !s && result) result = s;
          }
        }
        if (Status s = ds->dir->sync(); !s && result) result = s;
      }
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
  if (plan.file_format == config::FileFormat::kBin) {
    return makeError(ErrorCode::kInvalidArgument,
                     "file_format 'bin' is not supported by dumpd's writer yet; use 'npy'");
  }
  auto impl = std::make_unique<Impl>();
  impl->fs = std::move(fs);
  impl->plan = plan;
  impl->options = std::move(options);
  impl->rank_dir = "rank_" + std::to_string(impl->options.rank);
  impl->net_dir = impl->rank_dir + "/" + sanitizeName(plan.net_name);
  impl->csv_header = statisticCsvHeader(plan.statistic_category);
  impl->stat_options = statOptionsFor(plan.statistic_category);
  impl->lz4 = impl->options.compression == config::Compression::kLz4;

  auto metadata = impl->openDirState(impl->rank_dir + "/.dump_metadata");
  if (!metadata) return metadata.error();
  impl->metadata = std::move(metadata.value());
  const SyncPolicy sync = impl->otherSync();
  if (auto r = impl->publishText(*impl->metadata, "data_dump.json", plan.config_text, sync); !r) {
    return r.error();
  }
  std::string config_json = "{\"device_target\":" + jsonString(impl->options.device_target) +
                            ",\"ms_version\":" + jsonString(impl->options.producer_version) + "}";
  if (auto r = impl->publishText(*impl->metadata, "config.json", config_json, sync); !r) {
    return r.error();
  }
  return std::unique_ptr<JobWriter>(new JobWriter(std::move(impl)));
}

Result<OpOutcome> JobWriter::writeOp(const OpRecord& op, OpOutcome* partial) {
  Impl& m = *impl_;
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
    if (!n) return m.recordError(n.error());
    counts[i] = n.value();
    any_selected |= ioSelected(m.plan.input_output, t.io) && counts[i] != 0;
    if (m.plan.op_debug_mode == 3 && t.io == config::Io::kOutput) {
      overflow = overflow || containsNonFinite(t.dtype, t.data);
    }
  }
  OpOutcome outcome;
  if (!any_selected) return outcome;
  // Overflow dump: only op executions with an inf/NaN output, the first overflow_number.
  if (m.plan.op_debug_mode == 3 && !overflow) return outcome;
  auto ds = m.iterationDir(op.graph_id, op.iteration);
  if (!ds) return m.recordError(ds.error());
  DirState& dir = *ds.value();

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
      return outcome;
    }
  }

  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const TensorView& t = op.tensors[i];
    if (!ioSelected(m.plan.input_output, t.io) || counts[i] == 0) continue;
    if (Status s = m.writeTensor(dir, op, t, counts[i], outcome); !s) {
      if (partial != nullptr) *partial = outcome;
      return m.recordError(s.error(), &dir);
    }
  }
  return outcome;
}

Status JobWriter::writeConstant(uint32_t graph_id, std::string_view data_id,
                                const TensorView& tensor) {
  Impl& m = *impl_;
  auto n = checkTensor(tensor, data_id);
  if (!n) return m.recordError(n.error());
  if (n.value() == 0) return {};
  auto ds = m.constantsDir(graph_id);
  if (!ds) return m.recordError(ds.error());
  std::string name = "Parameter.data-";
  appendSanitized(name, data_id);
  name.append(".0.0.");
  appendDecimal(name, tensor.timestamp_us != 0 ? tensor.timestamp_us : nowMicros());
  name.append(".output.0.DefaultFormat.");
  name.append(dtypeName(tensor.dtype));
  name.append(m.lz4 ? ".npy.lz4" : ".npy");
  NpyPayload payload{tensor.dtype, tensor.shape, n.value(), tensor.data};
  auto r = m.writePayload(*ds.value(), name, payload, m.otherSync());
  if (!r) return m.recordError(r.error());
  if (r.value().first) {
    m.tensors_written.fetch_add(1, std::memory_order_relaxed);
    m.bytes_written.fetch_add(r.value().second, std::memory_order_relaxed);
  } else {
    m.countDropped(nullptr, 1, {});
  }
  return {};
}

Status JobWriter::writeGraph(uint32_t graph_id, std::string_view ir_text,
                             std::string_view pb_bytes) {
  Impl& m = *impl_;
  if (ir_text.empty() && pb_bytes.empty()) return {};
  auto ds = m.rankSubdir("graphs");
  if (!ds) return m.recordError(ds.error());
  std::string base = "ms_output_trace_code_graph_" + std::to_string(graph_id);
  if (!ir_text.empty()) {
    if (auto r = m.publishText(*ds.value(), base + ".ir", ir_text, m.otherSync()); !r) {
      return m.recordError(r.error());
    }
  }
  if (!pb_bytes.empty()) {
    if (auto r = m.publishText(*ds.value(), base + ".pb", pb_bytes, m.otherSync()); !r) {
      return m.recordError(r.error());
    }
  }
  return {};
}

Status JobWriter::writeExecutionOrder(uint32_t graph_id, const std::vector<std::string>& op_names) {
  Impl& m = *impl_;
  auto ds = m.rankSubdir("execution_order");
  if (!ds) return m.recordError(ds.error());
  std::string text = "NodeExecutionOrder-FullNameWithScope\n";
  for (const std::string& name : op_names) {
    text.append(name);
    text.push_back('\n');
  }
  std::string file = "ms_execution_order_graph_" + std::to_string(graph_id) + ".csv";
  if (auto r = m.publishText(*ds.value(), file, text, m.otherSync()); !r) {
    return m.recordError(r.error());
  }
  return {};
}

Status JobWriter::appendGlobalExecutionOrder(uint32_t graph_id, uint32_t iteration) {
  Impl& m = *impl_;
  auto ds = m.rankSubdir("execution_order");
  if (!ds) return m.recordError(ds.error());
  std::string file = "ms_global_execution_order_graph_" + std::to_string(graph_id) + ".csv";
  std::lock_guard lock(ds.value()->mu);
  std::unique_ptr<AppendFile> appender;
  if (Status s = m.ensureAppender(*ds.value(), appender, file, {}, m.syncDirs()); !s) {
    return m.recordError(s.error());
  }
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
  auto ds = m.iterationDir(graph_id, iteration);
  if (!ds) return m.recordError(ds.error());
  std::string name;
  appendSanitized(name, op_type);
  name.push_back('.');
  appendSanitized(name, op_name);
  name.append(".json");
  // One line, Python json.dumps style: {"transpose_a": "False", "transpose_b": "True"}
  std::string text = "{";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) text.append(", ");
    text.append(jsonString(args[i].first));
    text.append(": ");
    text.append(jsonString(args[i].second));
  }
  text.append("}");
  if (auto r = m.publishText(*ds.value(), name, text, m.tensorSync(), ".json"); !r) {
    return m.recordError(r.error(), ds.value().get());
  }
  return {};
}

Status JobWriter::completeIteration(uint32_t graph_id, uint32_t iteration,
                                    uint64_t dropped_upstream, std::string_view reason) {
  Impl& m = *impl_;
  uint64_t key = iterationKey(graph_id, iteration);
  std::shared_ptr<DirState> ds;
  {
    std::lock_guard lock(m.mu);
    auto it = m.open_iterations.find(key);
    if (it != m.open_iterations.end()) {
      ds = std::move(it->second);
      m.open_iterations.erase(it);
    } else if (m.completed.count(key) != 0) {
      return {};  // idempotent
    }
    m.completed.insert(key);
  }
  if (dropped_upstream != 0) m.tensors_dropped.fetch_add(dropped_upstream);
  return m.complete(graph_id, iteration, std::move(ds), dropped_upstream, reason);
}

Status JobWriter::finish(uint64_t dropped_upstream) {
  Impl& m = *impl_;
  std::vector<std::pair<uint64_t, std::shared_ptr<DirState>>> open;
  {
    std::lock_guard lock(m.mu);
    for (auto& [key, ds] : m.open_iterations) {
      open.emplace_back(key, std::move(ds));
      m.completed.insert(key);
    }
    m.open_iterations.clear();
  }
  if (dropped_upstream != 0) m.tensors_dropped.fetch_add(dropped_upstream);
  Status result;
  // Upstream drops of the session's tail belong to its latest iteration.
  for (size_t i = 0; i < open.size(); ++i) {
    bool last = i + 1 == open.size();
    auto& [key, ds] = open[i];
    Status s = m.complete(ds->graph, ds->iteration, ds, last ? dropped_upstream : 0, {});
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
  c.write_errors = m.write_errors.load(std::memory_order_relaxed);
  std::lock_guard lock(m.counters_mu);
  c.stop_reason = m.stop_reason;
  c.last_error = m.last_error;
  return c;
}

const config::DumpPlan& JobWriter::plan() const { return impl_->plan; }

}  // namespace dumpd::storage
