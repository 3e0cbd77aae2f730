#include "storage/writer/job_writer.h"

#include <algorithm>
#include <atomic>

#include "storage/format/names.h"
#include "storage/format/npy.h"
#include "storage/format/statistic_csv.h"
#include "storage/format/statistics.h"
#include "storage/fs/credentials.h"
#include "storage/writer/bin_op_writer.h"
#include "storage/writer/dir_cache.h"
#include "storage/writer/file_publisher.h"
#include "storage/writer/in_order.h"
#include "storage/writer/metadata_files.h"
#include "storage/writer/payload_gate.h"
#include "storage/writer/tensor_files.h"
#include "storage/writer/writer_counters.h"

namespace dumpd::storage {
namespace {

// Publishes "not written" into the memos of op.tensors[from..] that are still open: a
// repeat waiting on one of them must not wait forever (see storage/writer/tensor_memo.h).
void settleMemos(const OpRecord& op, size_t from, const std::string& why) {
  for (size_t i = from; i < op.tensors.size(); ++i) {
    if (op.tensors[i].memo != nullptr) op.tensors[i].memo->publish(MemoResult{false, why});
  }
}

}  // namespace

// The writer's parts, one job each; JobWriter's methods orchestrate them.
struct JobWriter::Impl {
  Impl(std::shared_ptr<FileSystem> file_system, const config::DumpPlan& dump_plan,
       JobOptions job_options)
      : fs(std::move(file_system)),
        plan(dump_plan),
        options(std::move(job_options)),
        rank_dir("rank_" + std::to_string(options.rank)),
        dirs(fs, rank_dir, rank_dir + "/" + sanitizeName(plan.net_name),
             options.max_open_directories, options.durability != config::Durability::kNone),
        files(options.durability, statisticCsvHeader(plan.statistic_category)),
        gate(fs, options.quota_bytes, options.min_free_bytes, options.account,
             options.journal_bytes),
        tensors(plan, options.compression == config::Compression::kLz4, options.max_links_per_file,
                files, gate, counters),
        bin(plan, files, gate, tensors),
        metadata(*fs, dirs, files, counters, dirs.newState(rank_dir + "/.dump_metadata")) {}

  const std::shared_ptr<FileSystem> fs;
  const config::DumpPlan plan;
  const JobOptions options;
  const std::string rank_dir;  // "rank_3"
  // Before everything that holds a DirState: they count their appenders in it.
  DirCache dirs;
  const FilePublisher files;
  PayloadGate gate;
  WriterCounters counters;
  const TensorFiles tensors;
  const BinOpWriter bin;
  MetadataFiles metadata;
  // statistic.csv rows of ops with a ticket (takeRowTicket) are appended in ticket order.
  InOrder<OpRows> row_order;
  std::atomic<uint32_t> overflow_ops{0};  // op_debug_mode 3: ops dumped so far

  // Enters the file system's credentials (FileSystem::credentials()) for a whole call: the
  // file operations inside then switch nothing (a nested scope with the same credentials is
  // free), so a call pays one switch instead of two per file. A failure is recorded.
  Status actAs(ScopedCredentials& scope) {
    if (Status s = scope.enter(fs->credentials()); !s) return counters.recordError(s.error());
    return {};
  }

  // Appends the op's rows to its statistic.csv. The calling thread may be in a call that
  // never entered the credentials (an op with nothing to write, releasing other ops' rows):
  // they are entered here (nested in a call's own scope it is free).
  Status appendRows(OpRows& rows) {
    if (rows.inputs.empty() && rows.outputs.empty()) return {};
    ScopedCredentials scope;
    if (Status s = actAs(scope); !s) return s;
    auto lease = dirs.pin(rows.dir);
    if (!lease) return counters.recordError(lease.error(), rows.dir.get());
    rows.inputs.append(rows.outputs);
    if (Status s = files.appendLine(lease.value(), /*stat_csv=*/true, rows.inputs); !s) {
      return counters.recordError(s.error(), rows.dir.get());
    }
    return {};
  }

  void countRowOnly(const OpRows& rows, OpOutcome& outcome) {
    if (rows.row_only == 0) return;
    outcome.tensors_written += rows.row_only;
    counters.tensors_written.fetch_add(rows.row_only, std::memory_order_relaxed);
    rows.dir->tensors.fetch_add(rows.row_only, std::memory_order_relaxed);
  }

  Result<OpOutcome> writeOpTensors(const OpRecord& op, OpOutcome* partial, OpRows& rows);
  // Overflow mode past overflow_number: the op's selected tensors count as dropped.
  OpOutcome dropOverflow(const OpRecord& op, const uint64_t* counts, DirState& dir);
};

JobWriter::JobWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobWriter::~JobWriter() = default;

Result<std::unique_ptr<JobWriter>> JobWriter::create(std::shared_ptr<FileSystem> fs,
                                                     const config::DumpPlan& plan,
                                                     JobOptions options) {
  if (!fs) return makeError(ErrorCode::kInvalidArgument, "JobWriter needs a file system");
  auto impl = std::make_unique<Impl>(std::move(fs), plan, std::move(options));
  ScopedCredentials scope;
  if (Status s = scope.enter(impl->fs->credentials()); !s) return s.error();
  if (Status s = impl->metadata.writeJobFiles(plan.config_text, impl->options.device_target,
                                              impl->options.producer_version);
      !s) {
    return s.error();
  }
  return std::unique_ptr<JobWriter>(new JobWriter(std::move(impl)));
}

uint64_t JobWriter::takeRowTicket(std::optional<config::SavedData> saved_data) {
  const bool rows =
      saved_data ? *saved_data != config::SavedData::kTensor : impl_->plan.savesStatistics();
  return rows ? impl_->row_order.take() : 0;
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

OpOutcome JobWriter::Impl::dropOverflow(const OpRecord& op, const uint64_t* counts, DirState& dir) {
  OpOutcome outcome;
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    if (!ioSelected(plan.input_output, op.tensors[i].io)) continue;
    if (counts[i] != 0) {
      ++outcome.tensors_dropped;
    } else {
      ++outcome.tensors_skipped;
    }
  }
  tensors.countDropped(&dir, outcome.tensors_dropped,
                       "overflow_number " + std::to_string(plan.overflow_number) + " reached");
  settleMemos(op, 0, "overflow_number reached");
  return outcome;
}

Result<OpOutcome> JobWriter::Impl::writeOpTensors(const OpRecord& op, OpOutcome* partial,
                                                  OpRows& rows) {
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
      return counters.recordError(n.error());
    }
    counts[i] = n.value();
    any_selected |= ioSelected(plan.input_output, t.io) && counts[i] != 0;
    if (plan.overflowDump() && t.io == Io::kOutput) {
      // Each count alone: forged counts must not sum (wrap) to zero.
      overflow = overflow || (t.sums != nullptr ? t.sums->nan != 0 || t.sums->negative_inf != 0 ||
                                                      t.sums->positive_inf != 0
                                                : containsNonFinite(t.dtype, t.data));
    }
  }
  OpOutcome outcome;
  // Overflow dump: only op executions with an inf/NaN output, the first overflow_number.
  if (!any_selected || (plan.overflowDump() && !overflow)) {
    settleMemos(op, 0, "its op was not dumped (input_output, empty, or no overflow)");
    for (size_t i = 0; i < op.tensors.size(); ++i) {
      outcome.tensors_skipped += ioSelected(plan.input_output, op.tensors[i].io) ? 1 : 0;
    }
    return outcome;
  }
  // One switch for the whole op instead of one per file operation (see actAs).
  ScopedCredentials scope;
  if (Status s = actAs(scope); !s) {
    settleMemos(op, 0, s.error().message);
    return s.error();
  }
  auto lease = dirs.iteration(op.graph_id, op.iteration);
  if (!lease) {
    settleMemos(op, 0, lease.error().message);
    return counters.recordError(lease.error());
  }
  DirState& dir = lease.value().state();
  rows.dir = lease.value().sharedState();

  if (plan.overflowDump()) {
    // Relaxed: a counter; which op gets which index orders nothing else.
    const uint32_t index = overflow_ops.fetch_add(1, std::memory_order_relaxed);
    if (plan.overflow_number != 0 && index >= plan.overflow_number) {
      return dropOverflow(op, counts, dir);
    }
  }

  if (plan.file_format == config::FileFormat::kBin) {
    Status s = bin.write(lease.value(), rows, op, counts, outcome);
    settleMemos(op, 0, "file_format bin writes every op's own bytes: no tensor is repeated");
    if (!s) {
      if (partial != nullptr) *partial = outcome;
      return counters.recordError(s.error(), &dir);
    }
    return outcome;
  }
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const TensorView& t = op.tensors[i];
    if (!ioSelected(plan.input_output, t.io) || counts[i] == 0) {
      if (t.memo != nullptr) t.memo->publish(MemoResult{false, "it was not dumped"});
      // MindSpore writes no file for a zero-element tensor (docs/compatibility.md).
      if (ioSelected(plan.input_output, t.io)) ++outcome.tensors_skipped;
      continue;
    }
    if (Status s = tensors.writeTensor(lease.value(), rows, op, t, counts[i], outcome); !s) {
      if (partial != nullptr) *partial = outcome;
      settleMemos(op, i, s.error().message);
      return counters.recordError(s.error(), &dir);
    }
  }
  return outcome;
}

Status JobWriter::writeConstant(uint32_t graph_id, std::string_view data_id,
                                const TensorView& tensor) {
  Impl& m = *impl_;
  auto n = checkTensor(tensor, data_id);
  if (!n) return m.counters.recordError(n.error());
  if (n.value() == 0) return {};
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  auto lease = m.dirs.constants(graph_id);
  if (!lease) return m.counters.recordError(lease.error());
  std::string op_name = "data-";
  appendSanitized(op_name, data_id);
  const uint64_t timestamp = tensor.timestamp_us != 0 ? tensor.timestamp_us : nowMicros();
  if (m.plan.savesTensors()) {
    std::string name = "Parameter." + op_name + ".0.0.";
    appendDecimal(name, timestamp);
    name.append(".output.0.DefaultFormat.");
    name.append(dtypeName(tensor.dtype));
    name.append(m.options.compression == config::Compression::kLz4 ? ".npy.lz4" : ".npy");
    NpyPayload payload{tensor.dtype, tensor.shape, n.value(), tensor.data};
    auto r = m.tensors.writePayload(lease.value(), name, payload, m.files.otherSync());
    if (!r) return m.counters.recordError(r.error());
    if (r.value().first) {
      m.counters.tensors_written.fetch_add(1, std::memory_order_relaxed);
      m.counters.bytes_written.fetch_add(r.value().second, std::memory_order_relaxed);
    } else {
      m.tensors.countDropped(nullptr, 1, {});
    }
  }
  if (m.plan.savesStatistics() && hasStatistics(tensor.dtype)) {
    // constants/statistic.csv, as MindSpore's GPU dump writes it: Op Type "Parameter", Op
    // Name the file's "data-{id}" in both generations.
    TensorStats stats;
    m.tensors.statisticsOf(tensor, n.value(), stats);
    OpRows rows;
    rows.dir = lease.value().sharedState();
    appendStatisticRow(rows.outputs,
                       {"Parameter", op_name, 0, 0, timestamp, Io::kOutput, 0,
                        sourceBytes(tensor.dtype, n.value()), tensor.dtype, tensor.shape},
                       stats, m.plan.statistic_category, m.plan.ms_format);
    if (Status s = m.appendRows(rows); !s) return s;
    if (!m.plan.savesTensors()) m.counters.tensors_written.fetch_add(1, std::memory_order_relaxed);
  }
  return {};
}

Status JobWriter::writeGraph(uint32_t graph_id, std::string_view ir_text,
                             std::string_view pb_bytes) {
  ScopedCredentials scope;
  if (Status s = impl_->actAs(scope); !s) return s;
  return impl_->metadata.writeGraph(graph_id, ir_text, pb_bytes);
}

Status JobWriter::writeExecutionOrder(uint32_t graph_id, const std::vector<std::string>& op_names) {
  ScopedCredentials scope;
  if (Status s = impl_->actAs(scope); !s) return s;
  return impl_->metadata.writeExecutionOrder(graph_id, op_names);
}

Status JobWriter::appendGlobalExecutionOrder(uint32_t graph_id, uint32_t iteration) {
  ScopedCredentials scope;
  if (Status s = impl_->actAs(scope); !s) return s;
  return impl_->metadata.appendGlobalExecutionOrder(graph_id, iteration);
}

Result<bool> JobWriter::appendJournal(std::string_view name, const std::string& line) {
  ScopedCredentials scope;
  if (Status s = impl_->actAs(scope); !s) return s.error();
  auto admitted = impl_->gate.admitJournal(line.size());
  if (!admitted || !admitted.value()) return admitted;
  if (Status s = impl_->metadata.appendJournal(name, line); !s) return s.error();
  return true;
}

std::string JobWriter::journalRefusal() const { return impl_->gate.journalRefusal(); }

Status JobWriter::writeKernelArgs(uint32_t graph_id, uint32_t iteration, std::string_view op_type,
                                  std::string_view op_name,
                                  const std::vector<std::pair<std::string, std::string>>& args) {
  if (!impl_->plan.save_kernel_args) return {};
  ScopedCredentials scope;
  if (Status s = impl_->actAs(scope); !s) return s;
  return impl_->metadata.writeKernelArgs(graph_id, iteration, op_type, op_name, args);
}

Status JobWriter::completeIteration(uint32_t graph_id, uint32_t iteration,
                                    uint64_t dropped_upstream, std::string_view reason,
                                    std::string_view cut_short) {
  Impl& m = *impl_;
  std::optional<DirCache::Taken> taken = m.dirs.takeIteration(graph_id, iteration);
  if (!taken) return {};  // idempotent
  if (dropped_upstream != 0) m.counters.tensors_dropped.fetch_add(dropped_upstream);
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  return m.metadata.completeIteration(graph_id, iteration, std::move(*taken), dropped_upstream,
                                      reason, cut_short);
}

Status JobWriter::finish(uint64_t dropped_upstream, std::string_view cut_short) {
  Impl& m = *impl_;
  std::vector<DirCache::Taken> open = m.dirs.takeAllIterations();
  if (dropped_upstream != 0) m.counters.tensors_dropped.fetch_add(dropped_upstream);
  ScopedCredentials scope;
  if (Status s = m.actAs(scope); !s) return s;
  Status result;
  // Upstream drops of the session's tail belong to its latest iteration.
  for (size_t i = 0; i < open.size(); ++i) {
    const bool last = i + 1 == open.size();
    const DirState& ds = *open[i].state;
    Status s = m.metadata.completeIteration(ds.graph, ds.iteration, std::move(open[i]),
                                            last ? dropped_upstream : 0, {},
                                            last ? cut_short : std::string_view{});
    if (!s && result) result = s;
  }
  return result;
}

JobCounters JobWriter::counters() const {
  const Impl& m = *impl_;
  JobCounters c;
  c.tensors_written = m.counters.tensors_written.load(std::memory_order_relaxed);
  c.tensors_dropped = m.counters.tensors_dropped.load(std::memory_order_relaxed);
  c.bytes_written = m.counters.bytes_written.load(std::memory_order_relaxed);
  c.tensors_linked = m.counters.tensors_linked.load(std::memory_order_relaxed);
  c.repeats_copied = m.counters.repeats_copied.load(std::memory_order_relaxed);
  c.write_errors = m.counters.write_errors.load(std::memory_order_relaxed);
  c.open_directories = m.dirs.openDirectories();
  c.open_fds = c.open_directories + m.dirs.openAppenders();
  c.stale_temporaries_removed = m.dirs.staleTemporariesRemoved();
  c.stop_reason = m.gate.stopReason();
  c.last_error = m.counters.lastError();
  return c;
}

const config::DumpPlan& JobWriter::plan() const { return impl_->plan; }

bool JobWriter::listsEveryIteration() const { return impl_->options.device_target != "CPU"; }

}  // namespace dumpd::storage
