// Writes one job's (one rank's) MindSpore dump tree beneath a dump-root directory fd.
//
// Thread-safety: all methods may be called concurrently from writer-pool threads; rows of one
// statistic.csv/mapping.csv never interleave (one appender per iteration directory).
// Every file is written under a temporary name in its directory and renamed when complete.
// Each call runs with the file system's credentials (FileSystem::credentials()) from start to
// end and gives them up before it returns. Open directories are bounded (JobOptions::
// max_open_directories); the first time the writer opens one it removes the temporary files
// crashed writers left there (Directory::removeStaleTemporaries()): the directories of a job
// belong to its one writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "config/dump_plan.h"
#include "config/write_policy.h"
#include "storage/fs/file_system.h"
#include "storage/writer/op_record.h"
#include "storage/writer/payload_gate.h"

namespace dumpd::storage {

struct JobOptions {
  uint32_t rank = 0;
  std::string device_target = "CPU";  // config.json "device_target"
  std::string producer_version;       // config.json "ms_version"
  config::Durability durability = config::Durability::kNone;
  config::Compression compression = config::Compression::kNone;
  uint64_t quota_bytes = 0;     // 0 = unlimited payload bytes for this job
  uint64_t min_free_bytes = 0;  // stop payloads when the file system has less free space
  // Directories (each an fd, with up to two csv appenders) kept open between calls; beyond
  // it the least recently used is closed and reopened when written again. 0 is taken as 1.
  // Calls in flight pin their directory, so with more threads than this the figure is
  // exceeded by at most one directory per concurrent call.
  uint32_t max_open_directories = 64;
  // Dump once: hard links repeats make to one file in one step. Past it a repeat writes a new
  // first file (a copy, charged as a payload) that later repeats link to (see
  // storage/writer/tensor_memo.h). 0 is taken as 1.
  uint32_t max_links_per_file = 1000;
  // The job's account (payload and journal bytes), shared with the job's other sessions
  // (null: this writer's own).
  std::shared_ptr<QuotaAccount> account;
  uint64_t journal_bytes = 0;  // journal lines the job may append; 0 = unlimited
};

// What one writeOp did.
struct OpOutcome {
  uint32_t tensors_written = 0;  // payload files (or statistic rows when only statistics)
  uint32_t tensors_dropped = 0;  // payload skipped by quota/watermark/overflow limit
  uint64_t bytes_written = 0;
  // Of tensors_written: repeats (dump once) written without their bytes crossing the ring:
  // hard links, plus the new first files of repeats_copied.
  uint32_t tensors_linked = 0;
  uint32_t repeats_copied = 0;  // of tensors_linked: copies (link limit, or no link possible)
  // Repeats whose source was not written (failed, lost, never dumped): each fails alone and
  // the rest of its op is written. `failure` says why the first of them failed.
  uint32_t tensors_failed = 0;
  std::string failure;
  // Tensors given no file by MindSpore's rules: zero elements, or (op_debug_mode 3) an op
  // without an overflow. Counted, so that a record's tensors all add up.
  uint32_t tensors_skipped = 0;
};

struct JobCounters {
  uint64_t tensors_written = 0;
  uint64_t tensors_dropped = 0;
  uint64_t bytes_written = 0;
  uint64_t tensors_linked = 0;  // OpOutcome::tensors_linked, summed
  uint64_t repeats_copied = 0;  // OpOutcome::repeats_copied, summed
  uint64_t write_errors = 0;
  // Descriptors the writer holds between calls: open directories, plus the appenders
  // (statistic.csv, mapping.csv of open directories, manifest.jsonl). A call in flight holds
  // a few more for its duration (the file being written, a directory being resolved).
  uint64_t open_directories = 0;
  uint64_t open_fds = 0;
  // Temporary files of crashed writers (another process's ".dumpd-tmp-*") removed from the
  // job's directories when this writer first opened them.
  uint64_t stale_temporaries_removed = 0;
  std::string stop_reason;  // non-empty once payloads stopped (quota, free space)
  std::string last_error;
};

class JobWriter {
 public:
  // `fs` is the seam all file operations go through, rooted at the dump root (plan.path).
  // Writes .dump_metadata/data_dump.json and config.json under rank_{rank}/ (once).
  // file_format "bin" writes one file per op execution (storage/writer/bin_op.h) in place of the
  // npy files; statistics rows, sampling, quota and overflow mode apply as for npy.
  static Result<std::unique_ptr<JobWriter>> create(std::shared_ptr<FileSystem> fs,
                                                   const config::DumpPlan& plan,
                                                   JobOptions options);
  ~JobWriter();
  JobWriter(const JobWriter&) = delete;
  JobWriter& operator=(const JobWriter&) = delete;

  // Writes the op's tensors per the plan (IO selection, saved_data, sampling, overflow mode,
  // quota). Filtering of ops/iterations is the caller's job. Errors name the file. Writing
  // stops at the first failing tensor; then `partial` (if given) holds what was written and
  // dropped before it, so callers can account for every tensor. Every TensorView::memo of the
  // op is published before it returns (what was written, or why nothing was); a tensor with
  // TensorView::same_as waits until that memo is published.
  //
  // statistic.csv rows: each op's inputs' rows, then its outputs'. An op with a row ticket
  // (OpRecord::row_ticket) appends them after every op holding an earlier ticket, so rows
  // follow the order the tickets were taken in, however many threads write; without one,
  // before the call returns.
  Result<OpOutcome> writeOp(const OpRecord& op, OpOutcome* partial = nullptr);

  // A ticket for the next op's rows (0 when the job, or `saved_data` where given: the op's
  // OpRecord::saved_data, saves no statistics). Take tickets in the producer's order; every
  // ticket taken must reach writeOp (in an OpRecord) once.
  uint64_t takeRowTicket(std::optional<config::SavedData> saved_data = std::nullopt);

  // {net}/{graph}/constants/Parameter.data-{data_id}.0.0.{ts}.output.0.DefaultFormat.{dtype}.npy
  // (saved_data tensor/full) and its row in constants/statistic.csv (statistic/full).
  Status writeConstant(uint32_t graph_id, std::string_view data_id, const TensorView& tensor);
  // graphs/ms_output_trace_code_graph_{g}.ir and/or .pb (empty view = not written)
  Status writeGraph(uint32_t graph_id, std::string_view ir_text, std::string_view pb_bytes);
  // execution_order/ms_execution_order_graph_{g}.csv (header + one full name per line)
  Status writeExecutionOrder(uint32_t graph_id, const std::vector<std::string>& op_names);
  // Appends one line (the iteration) to ms_global_execution_order_graph_{g}.csv.
  Status appendGlobalExecutionOrder(uint32_t graph_id, uint32_t iteration);
  // Whether that file lists every executed iteration (GPU and Ascend producers) or only the
  // dumped ones (CPU), as MindSpore's DumpRunIter does.
  bool listsEveryIteration() const;
  // Appends one line to .dump_metadata/`name` (triggers.jsonl, control.jsonl), synced, once
  // the line passes the job's journal allowance and the free-space floor. False: refused
  // (journalRefusal() says why).
  Result<bool> appendJournal(std::string_view name, const std::string& line);
  std::string journalRefusal() const;
  // {net}/{graph}/{iteration}/{op_type}.{op_name}.json with string values.
  Status writeKernelArgs(uint32_t graph_id, uint32_t iteration, std::string_view op_type,
                         std::string_view op_name,
                         const std::vector<std::pair<std::string, std::string>>& args);

  // Marks an iteration complete: closes its appenders, fsyncs per the durability setting,
  // appends a line to .dump_metadata/manifest.jsonl. Idempotent per (graph, iteration).
  // `dropped_upstream` adds tensors dropped before storage (backpressure drop). `cut_short`:
  // why the job did not finish the iteration whole (empty: it did); the line then says
  // "whole": false with that reason.
  // REQUIRES: no writeOp of this iteration in flight, and every row ticket taken before it
  // completed (its rows may still be held for an earlier ticket otherwise; they are then
  // refused as a write error, not appended). A later writeOp reopens the iteration,
  // and its next completion appends another manifest line (the last line counts).
  Status completeIteration(uint32_t graph_id, uint32_t iteration, uint64_t dropped_upstream = 0,
                           std::string_view reason = {}, std::string_view cut_short = {});

  // Completes every iteration still open (session end). `dropped_upstream` and `cut_short`
  // (the session ended during it) apply to the last of them (in (graph, iteration) order);
  // with none open the drops only count in counters().
  Status finish(uint64_t dropped_upstream = 0, std::string_view cut_short = {});

  JobCounters counters() const;
  const config::DumpPlan& plan() const;

 private:
  struct Impl;
  explicit JobWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dumpd::storage
