#include "storage/writer/tensor_memo.h"

namespace dumpd::storage {

void TensorMemo::publish(MemoResult result) {
  {
    MutexLock lock(&mu_);
    if (done_) return;
    result_ = std::move(result);
    done_ = true;
  }
  cv_.signalAll();
}

const MemoResult& TensorMemo::wait() const {
  MutexLock lock(&mu_);
  while (!done_) cv_.wait(&mu_);
  return result_;
}

bool TensorMemo::published() const {
  MutexLock lock(&mu_);
  return done_;
}

LinkSource TensorMemo::claimLink(uint32_t max_links) {
  MutexLock lock(&mu_);
  while (rebasing_) cv_.wait(&mu_);
  if (link_file_.empty()) {
    link_file_ = result_.file;
    link_bytes_ = result_.file_bytes;
  }
  LinkSource source{link_file_, link_bytes_, links_ < max_links};
  if (source.claimed) {
    ++links_;
  } else {
    rebasing_ = true;
  }
  return source;
}

LinkSource TensorMemo::linkRefused(const std::string& file, uint32_t max_links) {
  {
    MutexLock lock(&mu_);
    while (rebasing_) cv_.wait(&mu_);
    if (link_file_ == file) {
      links_ = max_links;  // no more links to it: the next claim writes a new first file
    }
  }
  return claimLink(max_links);
}

void TensorMemo::rebase(std::string file, uint64_t bytes) {
  {
    MutexLock lock(&mu_);
    link_file_ = std::move(file);
    link_bytes_ = bytes;
    links_ = 0;
    rebasing_ = false;
  }
  cv_.signalAll();
}

void TensorMemo::abandonRebase() {
  {
    MutexLock lock(&mu_);
    rebasing_ = false;
  }
  cv_.signalAll();
}

}  // namespace dumpd::storage
