// One op execution on its way from the ring to the writer pool (daemon/ring_drain.h): owns
// the decoded descriptor copy; the payload bytes stay in the ring until the record is
// released. The flight recorder keeps these for the iterations it records.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "config/saved_data.h"
#include "ipc/op_codec.h"
#include "storage/format/statistics.h"
#include "storage/writer/op_record.h"
#include "storage/writer/tensor_memo.h"

namespace dumpd::daemon {

struct OpTask {
  ipc::DecodedOp op;
  uint64_t sequence = 0;  // the ring record's
  std::vector<storage::TensorView> views;
  // Device statistics, copied out of shared memory (sized once: views point into it).
  std::vector<storage::StatSums> sums;
  // Dump once: the memos the views name (theirs, and those of the tensors they repeat).
  std::vector<std::shared_ptr<storage::TensorMemo>> memos;
  uint64_t bytes = 0;  // payload bytes of the views
  // Set for iterations the flight recorder writes: its section's saved_data.
  std::optional<config::SavedData> saved_data;

  // The flight recorder's check of a kept record (written by the session thread as it keeps
  // the record, read when the step ends or a trigger fires): the first view
  // holding a NaN and the first holding an infinity (each trigger can be off on its own).
  static constexpr uint32_t kNoView = UINT32_MAX;
  uint32_t nan_view = kNoView;
  uint32_t inf_view = kNoView;
  // A trigger writes it and nothing checked it when it was kept (the recorder has no nan or
  // inf trigger): the writer checks it (daemon/first_nonfinite.h).
  bool check_values = false;

  // Tensors the client keeps on its device (PayloadKind::kDeferred): their views carry the
  // device statistics (`sums`) and no bytes until the client fills them in the ring
  // (DeviceFetch::fetch). Pointers into the ring.
  struct Deferred {
    uint32_t view;
    const std::byte* bytes;
    uint64_t size;
    const uint64_t* state;  // ipc::DeferredPayload::state
  };
  std::vector<Deferred> deferred;
  // The client never answered the fetch: not written, its ring space held to the end.
  bool abandoned = false;
};

}  // namespace dumpd::daemon
