#include "storage/tensor_memo.h"

namespace dumpd::storage {

void TensorMemo::publish(MemoResult result) {
  {
    std::lock_guard lock(mu_);
    if (done_) return;
    result_ = std::move(result);
    done_ = true;
  }
  cv_.notify_all();
}

const MemoResult& TensorMemo::wait() const {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  return result_;
}

bool TensorMemo::published() const {
  std::lock_guard lock(mu_);
  return done_;
}

}  // namespace dumpd::storage
