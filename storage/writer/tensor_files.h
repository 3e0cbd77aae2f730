// One job's tensors as npy files and statistic.csv rows (file_format "npy"): a tensor's
// payload file (through the payload gate), a repeat's hard link or new first file (dump
// once, see storage/writer/tensor_memo.h), and each tensor's row, gathered per op (OpRows) for the
// writer to append in ticket order. The bin path (storage/writer/bin_op_writer.h) shares the rows
// and the counting.
//
// Thread-safety: const after construction; the members it points to are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"
#include "config/dump_plan.h"
#include "storage/format/npy.h"
#include "storage/format/statistics.h"
#include "storage/writer/dir_cache.h"
#include "storage/writer/file_publisher.h"
#include "storage/writer/job_writer.h"
#include "storage/writer/op_record.h"
#include "storage/writer/payload_gate.h"
#include "storage/writer/writer_counters.h"

namespace dumpd::storage {

inline constexpr uint32_t kTensorFileMode = 0400;  // as MindSpore leaves its tensor files

// The statistic.csv rows of one op, appended when the op is done (in ticket order when it
// has one): its inputs' rows, then its outputs', as MindSpore writes them.
struct OpRows {
  std::shared_ptr<DirState> dir;
  std::string inputs;
  std::string outputs;
  uint32_t row_only = 0;  // rows of tensors without a payload file: what counts them written
  std::string& of(Io io) { return io == Io::kInput ? inputs : outputs; }
};

// Element count of a tensor after checking that its shape, byte size, device statistics or
// repeated tensor agree; the error names the op, the tensor and what is wrong.
Result<uint64_t> checkTensor(const TensorView& t, std::string_view op_name);

// Whether the job's input_output selects a tensor of `io`.
bool ioSelected(config::IoSelect select, Io io);

// Microseconds since the epoch (a tensor without a timestamp gets the time it is written).
uint64_t nowMicros();

class TensorFiles {
 public:
  TensorFiles(const config::DumpPlan& plan, bool lz4, uint32_t max_links_per_file,
              const FilePublisher& files, PayloadGate& gate, WriterCounters& counters);

  // Writes t's payload file (saved_data tensor/full) and adds its row (statistic/full) to
  // `rows`; a repeat (t.same_as) is written from the tensor it repeats. Publishes into
  // t.memo what was written.
  Status writeTensor(DirLease& lease, OpRows& rows, const OpRecord& op, const TensorView& t,
                     uint64_t elements, OpOutcome& outcome) const;

  // Writes one payload file `name` in the lease's directory, admitted by the gate. Returns
  // (written?, bytes); not written = dropped (the gate's stop reason says why).
  Result<std::pair<bool, uint64_t>> writePayload(DirLease& lease, std::string_view name,
                                                 const NpyPayload& payload, SyncPolicy sync,
                                                 std::string* final_name = nullptr) const;

  // Adds t's statistic.csv row to the op's rows. Without a payload file (`row_only`) the row
  // is what counts as the tensor written.
  void addStatistics(OpRows& rows, const OpRecord& op, const TensorView& t, uint64_t elements,
                     uint64_t timestamp, const TensorStats& stats, bool row_only) const;
  // t's statistics: from its device sums, else computed from its bytes.
  void statisticsOf(const TensorView& t, uint64_t elements, TensorStats& out) const;
  void countPayload(DirState& ds, OpOutcome& outcome, uint64_t bytes) const;
  // Counts `n` tensors dropped (in ds when given, with the reason for its manifest line).
  void countDropped(DirState* ds, uint64_t n, std::string_view reason) const;

 private:
  void payloadName(std::string& name, const OpRecord& op, const TensorView& t,
                   uint64_t timestamp) const;
  Status writeRepeat(DirLease& lease, OpRows& rows, const OpRecord& op, const TensorView& t,
                     uint64_t elements, OpOutcome& outcome) const;
  Result<bool> writeRepeatFile(DirLease& lease, const OpRecord& op, const TensorView& t,
                               uint64_t timestamp, OpOutcome& outcome, MemoResult* memo) const;

  const config::DumpPlan& plan_;
  const bool lz4_;
  const uint32_t max_links_;
  const StatOptions stat_options_;
  const FilePublisher& files_;
  PayloadGate& gate_;
  WriterCounters& counters_;
};

}  // namespace dumpd::storage
