// What one job's writer did, counted as it goes (JobWriter::counters() reads them).
//
// Thread-safety: the counters are atomics, relaxed (figures for reports; they order
// nothing); the last error is guarded by the mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/mutex.h"
#include "base/result.h"
#include "storage/writer/dir_cache.h"
#include "storage/writer/tensor_counters.h"

namespace dumpd::storage {

class WriterCounters : public TensorCounters {
 public:
  std::atomic<uint64_t> repeats_copied{0};
  std::atomic<uint64_t> write_errors{0};

  // Counts `e` as a write error (in `ds` too, for its manifest line, when given) and keeps
  // its message as the last one; returns it.
  Error recordError(Error e, DirState* ds = nullptr) {
    write_errors.fetch_add(1, std::memory_order_relaxed);
    if (ds != nullptr) {
      MutexLock lock(&ds->mu);
      ++ds->errors;
    }
    MutexLock lock(&mu_);
    last_error_ = e.message;
    return e;
  }
  std::string lastError() const {
    MutexLock lock(&mu_);
    return last_error_;
  }

 private:
  mutable Mutex mu_;
  std::string last_error_ GUARDED_BY(mu_);
};

}  // namespace dumpd::storage
