#include "storage/writer/bin_op_writer.h"

#include <string>

#include "storage/format/names.h"
#include "storage/writer/bin_op.h"

namespace dumpd::storage {

Status BinOpWriter::write(DirLease& lease, OpRows& rows, const OpRecord& op, const uint64_t* counts,
                          OpOutcome& outcome) const {
  DirState& ds = lease.state();
  const bool want_payload = op.savesTensors(plan_);
  // One timestamp for the file name, dump_time and the op's statistic rows.
  uint64_t timestamp = 0;
  for (size_t i = 0; i < op.tensors.size() && timestamp == 0; ++i) {
    if (ioSelected(plan_.input_output, op.tensors[i].io)) timestamp = op.tensors[i].timestamp_us;
  }
  if (timestamp == 0) timestamp = nowMicros();
  thread_local BinOpFile file;
  file.clear();
  // Empty tensors are in the file too (size 0), so that a reader's index is the slot.
  for (size_t i = 0; i < op.tensors.size(); ++i) {
    const TensorView& t = op.tensors[i];
    if (!ioSelected(plan_.input_output, t.io)) continue;
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
    if (op.savesStatistics(plan_) && hasStatistics(t.dtype) && counts[i] != 0) {
      TensorStats stats;
      tensors_.statisticsOf(t, counts[i], stats);
      tensors_.addStatistics(rows, op, t, counts[i], timestamp, stats, !want_payload);
    }
    if (!want_payload) continue;
    std::string_view format =
        plan_.trans_flag || t.format.empty() ? std::string_view("DefaultFormat") : t.format;
    if (plan_.sample_mode && plan_.sample_num > 0 && counts[i] > plan_.sample_num) {
      const int64_t sample_shape[1] = {static_cast<int64_t>(plan_.sample_num)};
      file.add(t, sample_shape, plan_.sample_num, format);
    } else {
      file.add(t, t.shape, counts[i], format);
    }
  }
  const uint64_t tensors = file.tensorCount();
  if (tensors == 0) return {};
  file.build(op.op_name, timestamp);
  thread_local std::string name;
  name.clear();
  appendBinFileName(name, op.op_type, op.op_name, op.task_id, op.stream_id, timestamp);
  const uint64_t estimate = file.fileSize();
  Result<bool> admitted = gate_.admit(estimate);
  if (!admitted) return admitted.error();
  if (!admitted.value()) {
    outcome.tensors_dropped += static_cast<uint32_t>(tensors);
    tensors_.countDropped(&ds, tensors, gate_.stopReason());
    return {};
  }
  auto written = files_.publish(lease, name, {}, false, kTensorFileMode, files_.tensorSync(),
                                [&](WritableFile& f) { return f.write(file.buffers()); });
  if (!written) {
    gate_.release(estimate, 0);
    return written.error();
  }
  gate_.release(estimate, written.value());
  // The file counts once in bytes; each tensor in it counts as written.
  for (uint64_t k = 0; k < tensors; ++k) {
    tensors_.countPayload(ds, outcome, k == 0 ? written.value() : 0);
  }
  return {};
}

}  // namespace dumpd::storage
