#include "storage/fs/fault_injection.h"

#include <array>
#include <cerrno>
#include <optional>

#include "base/mutex.h"

namespace dumpd::storage {

struct FaultInjectingFileSystem::State {
  mutable Mutex mu;
  uint64_t calls GUARDED_BY(mu) = 0;
  uint64_t injected GUARDED_BY(mu) = 0;
  std::array<uint64_t, kFsOpCount> calls_by_op GUARDED_BY(mu){};
  std::optional<std::pair<uint64_t, ErrorCode>> fail_index GUARDED_BY(mu);
  std::array<std::optional<ErrorCode>, kFsOpCount> fail_every GUARDED_BY(mu){};

  // Counts the call; returns the injected error, if this call is to fail.
  Status check(FsOp op, std::string_view path) {
    std::optional<ErrorCode> code;
    {
      MutexLock lock(&mu);
      uint64_t index = calls++;
      ++calls_by_op[static_cast<size_t>(op)];
      if (fail_index && fail_index->first == index) code = fail_index->second;
      if (fail_every[static_cast<size_t>(op)]) code = fail_every[static_cast<size_t>(op)];
      if (code) ++injected;
    }
    if (!code) return {};
    int err = EIO;
    if (*code == ErrorCode::kNoSpace) err = ENOSPC;
    if (*code == ErrorCode::kPermission) err = EACCES;
    if (*code == ErrorCode::kUnsupported) err = EMLINK;
    Error e = fsError(err, fsOpName(op), path);
    e.code = *code;
    e.message += " (injected)";
    return e;
  }
};

namespace {

using State = FaultInjectingFileSystem::State;

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(std::unique_ptr<WritableFile> base, std::shared_ptr<State> state)
      : base_(std::move(base)), state_(std::move(state)) {}

  const std::string& path() const override { return base_->path(); }
  uint64_t bytesWritten() const override { return base_->bytesWritten(); }
  Status write(std::span<const ConstBuffer> buffers) override {
    if (Status s = state_->check(FsOp::kWrite, path()); !s) return s;
    return base_->write(buffers);
  }
  Status sync() override {
    if (Status s = state_->check(FsOp::kSyncFile, path()); !s) return s;
    return base_->sync();
  }
  Status commit() override {
    if (Status s = state_->check(FsOp::kCommit, path()); !s) {
      base_->abort();
      return s;
    }
    return base_->commit();
  }
  void abort() override { base_->abort(); }

 private:
  std::unique_ptr<WritableFile> base_;
  std::shared_ptr<State> state_;
};

class FaultAppendFile final : public AppendFile {
 public:
  FaultAppendFile(std::unique_ptr<AppendFile> base, std::shared_ptr<State> state)
      : base_(std::move(base)), state_(std::move(state)) {}

  const std::string& path() const override { return base_->path(); }
  uint64_t size() const override { return base_->size(); }
  Status append(std::string_view data) override {
    if (Status s = state_->check(FsOp::kAppend, path()); !s) return s;
    return base_->append(data);
  }
  Status sync() override {
    if (Status s = state_->check(FsOp::kSyncFile, path()); !s) return s;
    return base_->sync();
  }

 private:
  std::unique_ptr<AppendFile> base_;
  std::shared_ptr<State> state_;
};

class FaultDirectory final : public Directory {
 public:
  FaultDirectory(std::shared_ptr<Directory> base, std::shared_ptr<State> state)
      : base_(std::move(base)), state_(std::move(state)) {}

  const std::string& path() const override { return base_->path(); }
  Result<std::unique_ptr<WritableFile>> newFile(std::string_view name, uint32_t mode) override {
    if (Status s = state_->check(FsOp::kNewFile, joinPath(path(), name)); !s) return s.error();
    auto file = base_->newFile(name, mode);
    if (!file) return file.error();
    return std::unique_ptr<WritableFile>(
        std::make_unique<FaultWritableFile>(std::move(file.value()), state_));
  }
  Result<std::unique_ptr<WritableFile>> linkFile(std::string_view existing,
                                                 std::string_view name) override {
    if (Status s = state_->check(FsOp::kLink, joinPath(path(), name)); !s) return s.error();
    return wrap(base_->linkFile(existing, name));
  }
  Result<std::unique_ptr<WritableFile>> copyFile(std::string_view existing, std::string_view name,
                                                 uint32_t mode) override {
    if (Status s = state_->check(FsOp::kCopy, joinPath(path(), name)); !s) return s.error();
    return wrap(base_->copyFile(existing, name, mode));
  }
  Result<std::unique_ptr<WritableFile>> wrap(Result<std::unique_ptr<WritableFile>> file) {
    if (!file) return file.error();
    return std::unique_ptr<WritableFile>(
        std::make_unique<FaultWritableFile>(std::move(file.value()), state_));
  }
  Result<std::unique_ptr<AppendFile>> openAppend(std::string_view name) override {
    if (Status s = state_->check(FsOp::kOpenAppend, joinPath(path(), name)); !s) {
      return s.error();
    }
    auto file = base_->openAppend(name);
    if (!file) return file.error();
    return std::unique_ptr<AppendFile>(
        std::make_unique<FaultAppendFile>(std::move(file.value()), state_));
  }
  Status syncFile(std::string_view name) override {
    if (Status s = state_->check(FsOp::kSyncFile, joinPath(path(), name)); !s) return s;
    return base_->syncFile(name);
  }
  Status sync() override {
    if (Status s = state_->check(FsOp::kSyncDirectory, path()); !s) return s;
    return base_->sync();
  }
  // Not a numbered call: cleaning is best effort and its failures change no outcome.
  Result<uint64_t> removeStaleTemporaries() override { return base_->removeStaleTemporaries(); }

 private:
  std::shared_ptr<Directory> base_;
  std::shared_ptr<State> state_;
};

}  // namespace

FaultInjectingFileSystem::FaultInjectingFileSystem(std::shared_ptr<FileSystem> base)
    : base_(std::move(base)), state_(std::make_shared<State>()) {}
FaultInjectingFileSystem::~FaultInjectingFileSystem() = default;

Result<std::shared_ptr<Directory>> FaultInjectingFileSystem::openDirectory(
    std::string_view path, DirectoryOptions options) {
  if (Status s = state_->check(FsOp::kOpenDirectory, path); !s) return s.error();
  auto dir = base_->openDirectory(path, options);
  if (!dir) return dir.error();
  return std::shared_ptr<Directory>(
      std::make_shared<FaultDirectory>(std::move(dir.value()), state_));
}

const Credentials* FaultInjectingFileSystem::credentials() const { return base_->credentials(); }

Result<uint64_t> FaultInjectingFileSystem::freeBytes() {
  if (Status s = state_->check(FsOp::kFreeBytes, ""); !s) return s.error();
  return base_->freeBytes();
}

void FaultInjectingFileSystem::failCall(uint64_t index, ErrorCode code) {
  MutexLock lock(&state_->mu);
  state_->fail_index = std::make_pair(index, code);
}

void FaultInjectingFileSystem::failEvery(FsOp op, ErrorCode code) {
  MutexLock lock(&state_->mu);
  state_->fail_every[static_cast<size_t>(op)] = code;
}

void FaultInjectingFileSystem::clearFaults() {
  MutexLock lock(&state_->mu);
  state_->fail_index.reset();
  state_->fail_every.fill(std::nullopt);
}

uint64_t FaultInjectingFileSystem::calls() const {
  MutexLock lock(&state_->mu);
  return state_->calls;
}

uint64_t FaultInjectingFileSystem::calls(FsOp op) const {
  MutexLock lock(&state_->mu);
  return state_->calls_by_op[static_cast<size_t>(op)];
}

uint64_t FaultInjectingFileSystem::faultsInjected() const {
  MutexLock lock(&state_->mu);
  return state_->injected;
}

}  // namespace dumpd::storage
