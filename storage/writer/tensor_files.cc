#include "storage/writer/tensor_files.h"

#include <algorithm>
#include <chrono>

#include "base/element_count.h"
#include "storage/format/names.h"
#include "storage/format/statistic_csv.h"

namespace dumpd::storage {
namespace {

// Links a repeat tries before it gives up (each refusal normally ends in a new first file).
constexpr int kMaxLinkTries = 8;

// Per-thread scratch strings: names and headers are built without allocating once warm.
struct Scratch {
  std::string name;
  std::string header;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Dump once: tells the tensors that repeat t what was written for it.
void publishMemo(const TensorView& t, const DirState& ds, MemoResult memo) {
  if (t.memo == nullptr) return;
  memo.ok = true;
  memo.dir = ds.path;
  t.memo->publish(std::move(memo));
}

}  // namespace

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

uint64_t nowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

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

TensorFiles::TensorFiles(const config::DumpPlan& plan, bool lz4, uint32_t max_links_per_file,
                         const FilePublisher& files, PayloadGate& gate, WriterCounters& counters)
    : plan_(plan),
      lz4_(lz4),
      max_links_(std::max<uint32_t>(max_links_per_file, 1)),
      stat_options_(statOptionsFor(plan.statistic_category, plan.ms_format)),
      files_(files),
      gate_(gate),
      counters_(counters) {}

Result<std::pair<bool, uint64_t>> TensorFiles::writePayload(DirLease& lease, std::string_view name,
                                                            const NpyPayload& payload,
                                                            SyncPolicy sync,
                                                            std::string* final_name) const {
  Scratch& s = scratch();
  buildNpyHeader(s.header, payload.dtype, payload.shape);
  const uint64_t estimate = npyFileSize(payload, s.header.size());
  Result<bool> admitted = gate_.admit(estimate);
  if (!admitted) return admitted.error();
  if (!admitted.value()) return std::make_pair(false, uint64_t{0});
  auto written = files_.publish(
      lease, name, lz4_ ? ".npy.lz4" : ".npy", lz4_, kTensorFileMode, sync,
      [&](WritableFile& f) { return writeNpy(f, payload, s.header, lz4_); }, {}, final_name);
  if (!written) {
    gate_.release(estimate, 0);
    return written.error();
  }
  gate_.release(estimate, written.value());
  return std::make_pair(true, written.value());
}

void TensorFiles::countDropped(DirState* ds, uint64_t n, std::string_view reason) const {
  counters_.tensors_dropped.fetch_add(n, std::memory_order_relaxed);
  if (ds) {
    ds->dropped.fetch_add(n, std::memory_order_relaxed);
    ds->addReason(reason);
  }
}

void TensorFiles::payloadName(std::string& name, const OpRecord& op, const TensorView& t,
                              uint64_t timestamp) const {
  std::string_view format =
      plan_.trans_flag || t.format.empty() ? std::string_view("DefaultFormat") : t.format;
  name.clear();
  appendTensorFileName(name, {op.op_type, op.op_name, op.task_id, op.stream_id, timestamp, t.io,
                              t.slot, format, t.dtype});
  if (lz4_) name.append(".lz4");
}

void TensorFiles::countPayload(DirState& ds, OpOutcome& outcome, uint64_t bytes) const {
  ++outcome.tensors_written;
  outcome.bytes_written += bytes;
  counters_.tensors_written.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_written.fetch_add(bytes, std::memory_order_relaxed);
  ds.tensors.fetch_add(1, std::memory_order_relaxed);
  ds.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void TensorFiles::addStatistics(OpRows& rows, const OpRecord& op, const TensorView& t,
                                uint64_t elements, uint64_t timestamp, const TensorStats& stats,
                                bool row_only) const {
  appendStatisticRow(rows.of(t.io),
                     {op.op_type, op.op_name, op.task_id, op.stream_id, timestamp, t.io, t.slot,
                      sourceBytes(t.dtype, elements), t.dtype, t.shape},
                     stats, plan_.statistic_category, plan_.ms_format);
  rows.row_only += row_only ? 1 : 0;
}

void TensorFiles::statisticsOf(const TensorView& t, uint64_t elements, TensorStats& out) const {
  if (t.sums != nullptr) {
    statsFromSums(*t.sums, out);
  } else {
    computeStats(t.dtype, elements, t.data, stat_options_, out);
  }
}

Status TensorFiles::writeTensor(DirLease& lease, OpRows& rows, const OpRecord& op,
                                const TensorView& t, uint64_t elements, OpOutcome& outcome) const {
  if (t.same_as != nullptr) return writeRepeat(lease, rows, op, t, elements, outcome);
  DirState& ds = lease.state();
  const uint64_t timestamp = t.timestamp_us != 0 ? t.timestamp_us : nowMicros();
  const bool want_payload = op.savesTensors(plan_);
  const bool want_stats = op.savesStatistics(plan_) && hasStatistics(t.dtype);
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
    if (plan_.sample_mode && plan_.sample_num > 0 && elements > plan_.sample_num) {
      sample_shape[0] = plan_.sample_num;
      payload.shape = sample_shape;
      payload.elements = plan_.sample_num;
    }
    // s.name stays untouched until the file is published (publish uses other buffers).
    auto r =
        writePayload(lease, s.name, payload, files_.tensorSync(), t.memo ? &memo.file : nullptr);
    if (!r) return r.error();
    if (r.value().first) {
      countPayload(ds, outcome, r.value().second);
      memo.file_bytes = r.value().second;
    } else {
      ++outcome.tensors_dropped;
      countDropped(&ds, 1, gate_.stopReason());
      memo.payload_dropped = true;
    }
  }
  if (want_stats) {
    TensorStats stats;
    statisticsOf(t, elements, stats);
    addStatistics(rows, op, t, elements, timestamp, stats, !want_payload);
    if (t.memo) memo.stats = stats;
  }
  publishMemo(t, ds, std::move(memo));
  return {};
}

// A tensor that repeats an earlier one (dump once): its file is made from that one's
// (writeRepeatFile), its row has that one's statistics.
Status TensorFiles::writeRepeat(DirLease& lease, OpRows& rows, const OpRecord& op,
                                const TensorView& t, uint64_t elements, OpOutcome& outcome) const {
  DirState& ds = lease.state();
  auto what = [&](const std::string& why) {
    return "tensor " + std::string(op.op_name) + " " + std::string(ioName(t.io)) + " " +
           std::to_string(t.slot) + " " + why;
  };
  auto refuse = [&](const std::string& why) {
    return makeError(ErrorCode::kInvalidArgument, what(why));
  };
  const MemoResult& source = t.same_as->wait();
  if (!source.ok) {
    // This tensor alone fails; the rest of its op is written (a lost source must not take
    // every later tensor of a chain of ops with it).
    std::string why = what("repeats a tensor that was not written: " + source.error);
    ++outcome.tensors_failed;
    if (t.memo != nullptr) t.memo->publish(MemoResult{false, why});
    if (outcome.failure.empty()) outcome.failure = std::move(why);
    return {};
  }
  const uint64_t timestamp = t.timestamp_us != 0 ? t.timestamp_us : nowMicros();
  const bool want_payload = op.savesTensors(plan_);
  const bool want_stats = op.savesStatistics(plan_) && hasStatistics(t.dtype);
  MemoResult memo;
  if (want_payload) {
    bool written = false;
    if (!source.payload_dropped && !gate_.stopped()) {
      if (source.file.empty() || source.dir != ds.path) {
        return refuse("repeats a tensor whose file is not in " + ds.path);
      }
      auto r = writeRepeatFile(lease, op, t, timestamp, outcome, t.memo ? &memo : nullptr);
      if (!r) return r.error();
      written = r.value();
    }
    if (!written) {
      ++outcome.tensors_dropped;
      countDropped(&ds, 1, gate_.stopReason());
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

// A repeat's file: a hard link of the memo's link source, charged nothing. When that file has
// max_links_per_file links already, or the file system refuses the link, a new first file: a
// copy that passes the payload gate (quota, free space) like any payload and becomes the link
// source of later repeats (storage/writer/tensor_memo.h). Returns false when the gate dropped it.
// `memo` (optional) receives the file published.
Result<bool> TensorFiles::writeRepeatFile(DirLease& lease, const OpRecord& op, const TensorView& t,
                                          uint64_t timestamp, OpOutcome& outcome,
                                          MemoResult* memo) const {
  DirState& ds = lease.state();
  Scratch& s = scratch();
  payloadName(s.name, op, t, timestamp);  // untouched by publish (it uses other buffers)
  const std::string_view ext = lz4_ ? ".npy.lz4" : ".npy";
  auto nothing = [](WritableFile&) { return Status{}; };
  std::string* final_name = memo != nullptr ? &memo->file : nullptr;
  LinkSource source = t.same_as->claimLink(max_links_);
  // Each refused link either makes this call the writer of the new first file or finds one
  // another call wrote meanwhile; the bound only stops a file system that refuses them all.
  for (int tries = 0; source.claimed; ++tries) {
    if (tries == kMaxLinkTries) {
      return makeError(ErrorCode::kIo, "link " + ds.path + "/" + source.file + ": refused " +
                                           std::to_string(tries) + " times");
    }
    auto linked = files_.publish(lease, s.name, ext, lz4_, kTensorFileMode, files_.tensorSync(),
                                 nothing, {FileSource::kLink, source.file}, final_name);
    if (linked) {
      countPayload(ds, outcome, 0);
      ++outcome.tensors_linked;
      counters_.tensors_linked.fetch_add(1, std::memory_order_relaxed);
      if (memo != nullptr) memo->file_bytes = source.bytes;
      return true;
    }
    if (linked.error().code != ErrorCode::kUnsupported) return linked.error();
    source = t.same_as->linkRefused(source.file, max_links_);
  }
  // This call writes the new first file; the other repeats wait until it is done.
  struct Rebasing {
    TensorMemo* memo;
    ~Rebasing() {
      if (memo != nullptr) memo->abandonRebase();
    }
  } rebasing{t.same_as};
  Result<bool> admitted = gate_.admit(source.bytes);
  if (!admitted || !admitted.value()) return admitted;
  std::string copy_name;
  auto copied = files_.publish(lease, s.name, ext, lz4_, kTensorFileMode, files_.tensorSync(),
                               nothing, {FileSource::kCopy, source.file}, &copy_name);
  if (!copied) {
    gate_.release(source.bytes, 0);
    return copied.error();
  }
  gate_.release(source.bytes, copied.value());
  rebasing.memo = nullptr;
  t.same_as->rebase(copy_name, copied.value());
  countPayload(ds, outcome, copied.value());
  ++outcome.tensors_linked;
  ++outcome.repeats_copied;
  counters_.tensors_linked.fetch_add(1, std::memory_order_relaxed);
  counters_.repeats_copied.fetch_add(1, std::memory_order_relaxed);
  if (memo != nullptr) {
    memo->file = std::move(copy_name);
    memo->file_bytes = copied.value();
  }
  return true;
}

}  // namespace dumpd::storage
