// file_format "bin": one op execution's selected tensors as one Ascend bin file
// (storage/writer/bin_op.h), through the payload gate, with their statistic.csv rows as for npy.
//
// Thread-safety: const after construction; each thread builds its file in a buffer of its own.
#pragma once

#include <cstdint>

#include "base/result.h"
#include "config/dump_plan.h"
#include "storage/writer/file_publisher.h"
#include "storage/writer/job_writer.h"
#include "storage/writer/payload_gate.h"
#include "storage/writer/tensor_files.h"

namespace dumpd::storage {

class BinOpWriter {
 public:
  BinOpWriter(const config::DumpPlan& plan, const FilePublisher& files, PayloadGate& gate,
              const TensorFiles& tensors)
      : plan_(plan), files_(files), gate_(gate), tensors_(tensors) {}

  // Writes op's selected tensors (counts[i] elements each) as one file in the lease's
  // directory and adds their rows to `rows`. A repeat, or device statistics in a job that
  // saves tensors, is refused naming the tensor.
  Status write(DirLease& lease, OpRows& rows, const OpRecord& op, const uint64_t* counts,
               OpOutcome& outcome) const;

 private:
  const config::DumpPlan& plan_;
  const FilePublisher& files_;
  PayloadGate& gate_;
  const TensorFiles& tensors_;
};

}  // namespace dumpd::storage
