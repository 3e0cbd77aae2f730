#include "storage/fs/memory_file_system.h"

#include <cerrno>
#include <functional>

#include "base/mutex.h"

namespace dumpd::storage {

using Kind = MemoryFileSystem::Entry::Kind;

struct MemoryFileSystem::Node {
  Kind kind = Kind::kDirectory;
  uint32_t mode = 0700;
  std::string data;         // file contents / symlink target
  std::string synced_data;  // contents as of the last fsync
  std::map<std::string, std::shared_ptr<Node>, std::less<>> children;
  std::map<std::string, std::shared_ptr<Node>, std::less<>> synced_children;
};

struct MemoryFileSystem::Shared {
  mutable Mutex mu;
  // The nodes beneath root are guarded by mu too (clang cannot name it from a Node).
  std::shared_ptr<Node> root GUARDED_BY(mu) = std::make_shared<Node>();
  uint64_t capacity GUARDED_BY(mu) = uint64_t{1} << 40;
  uint64_t used GUARDED_BY(mu) = 0;

  Status reserve(uint64_t bytes, std::string_view what, std::string_view path) REQUIRES(mu) {
    if (used + bytes > capacity) return fsError(ENOSPC, what, path);
    used += bytes;
    return {};
  }
};

namespace {

using Node = MemoryFileSystem::Node;
using Shared = MemoryFileSystem::Shared;

class MemWritableFile final : public WritableFile {
 public:
  // `copied`: the file is a copy made by copyFile, of that many bytes; write() is refused.
  MemWritableFile(std::shared_ptr<Shared> shared, std::shared_ptr<Node> dir,
                  std::shared_ptr<Node> file, std::string tmp, std::string name, std::string path,
                  std::optional<uint64_t> copied = std::nullopt)
      : shared_(std::move(shared)),
        dir_(std::move(dir)),
        file_(std::move(file)),
        tmp_(std::move(tmp)),
        name_(std::move(name)),
        path_(std::move(path)),
        written_(copied.value_or(0)),
        linked_(copied.has_value()) {}
  ~MemWritableFile() override { abort(); }

  const std::string& path() const override { return path_; }
  uint64_t bytesWritten() const override { return written_; }

  Status write(std::span<const ConstBuffer> buffers) override {
    if (linked_) {
      return makeError(ErrorCode::kInvalidArgument,
                       "write " + path_ + ": a linked file is read-only");
    }
    uint64_t total = 0;
    for (ConstBuffer b : buffers) total += b.size();
    MutexLock lock(&shared_->mu);
    if (Status s = shared_->reserve(total, "write", path_); !s) return s;
    for (ConstBuffer b : buffers) {
      file_->data.append(reinterpret_cast<const char*>(b.data()), b.size());
    }
    written_ += total;
    return {};
  }

  Status sync() override {
    MutexLock lock(&shared_->mu);
    file_->synced_data = file_->data;
    return {};
  }

  Status commit() override {
    if (done_) return makeError(ErrorCode::kInternal, "commit of a finished file " + path_);
    MutexLock lock(&shared_->mu);
    auto it = dir_->children.find(name_);
    if (it != dir_->children.end()) {
      if (it->second->kind == Kind::kDirectory) {
        lock.unlock();
        abort();
        return fsError(EISDIR, "rename", path_);
      }
      shared_->used -= it->second->data.size();
    }
    dir_->children.erase(tmp_);
    dir_->children[name_] = file_;
    done_ = true;
    return {};
  }

  void abort() override {
    if (done_) return;
    done_ = true;
    MutexLock lock(&shared_->mu);
    auto it = dir_->children.find(tmp_);
    if (it != dir_->children.end() && it->second == file_) dir_->children.erase(it);
    shared_->used -= file_->data.size();
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Node> dir_;
  std::shared_ptr<Node> file_;
  std::string tmp_;
  std::string name_;
  std::string path_;
  uint64_t written_ = 0;
  bool linked_ = false;
  bool done_ = false;
};

class MemAppendFile final : public AppendFile {
 public:
  MemAppendFile(std::shared_ptr<Shared> shared, std::shared_ptr<Node> file, std::string path)
      : shared_(std::move(shared)), file_(std::move(file)), path_(std::move(path)) {
    size_ = file_->data.size();
  }

  const std::string& path() const override { return path_; }
  uint64_t size() const override { return size_; }
  Status append(std::string_view data) override {
    MutexLock lock(&shared_->mu);
    if (Status s = shared_->reserve(data.size(), "append", path_); !s) return s;
    file_->data.append(data);
    size_ = file_->data.size();
    return {};
  }
  Status sync() override {
    MutexLock lock(&shared_->mu);
    file_->synced_data = file_->data;
    return {};
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Node> file_;
  std::string path_;
  uint64_t size_ = 0;
};

class MemDirectory final : public Directory {
 public:
  MemDirectory(std::shared_ptr<Shared> shared, std::shared_ptr<Node> node, std::string path)
      : shared_(std::move(shared)), node_(std::move(node)), path_(std::move(path)) {}

  const std::string& path() const override { return path_; }

  Result<std::unique_ptr<WritableFile>> newFile(std::string_view name, uint32_t mode) override {
    if (Status s = validateName(name); !s) return s.error();
    std::string tmp = temporaryName();
    auto file = std::make_shared<Node>();
    file->kind = Kind::kFile;
    file->mode = mode;
    {
      MutexLock lock(&shared_->mu);
      node_->children[tmp] = file;
    }
    return std::unique_ptr<WritableFile>(std::make_unique<MemWritableFile>(
        shared_, node_, std::move(file), std::move(tmp), std::string(name), joinPath(path_, name)));
  }

  // No hard links here (see the header): the arguments are checked, then refused.
  Result<std::unique_ptr<WritableFile>> linkFile(std::string_view existing,
                                                 std::string_view name) override {
    if (Status s = validateName(existing); !s) return s.error();
    if (Status s = validateName(name); !s) return s.error();
    {
      MutexLock lock(&shared_->mu);
      if (Status s = checkSource(existing, "link"); !s) return s.error();
    }
    return makeError(ErrorCode::kUnsupported, "link " + joinPath(path_, existing) + " to " +
                                                  joinPath(path_, name) +
                                                  ": the memory file system has no hard links");
  }

  // A copy (see the header): a node of its own, with its own mode and durability.
  Result<std::unique_ptr<WritableFile>> copyFile(std::string_view existing, std::string_view name,
                                                 uint32_t mode) override {
    if (Status s = validateName(existing); !s) return s.error();
    if (Status s = validateName(name); !s) return s.error();
    std::string path = joinPath(path_, name);
    std::string tmp = temporaryName();
    auto file = std::make_shared<Node>();
    file->kind = Kind::kFile;
    file->mode = mode;
    {
      MutexLock lock(&shared_->mu);
      if (Status s = checkSource(existing, "copy"); !s) return s.error();
      const Node& source = *node_->children.find(existing)->second;
      if (Status s = shared_->reserve(source.data.size(), "copy", path); !s) return s.error();
      file->data = source.data;
      node_->children[tmp] = file;
    }
    uint64_t copied = file->data.size();
    return std::unique_ptr<WritableFile>(
        std::make_unique<MemWritableFile>(shared_, node_, std::move(file), std::move(tmp),
                                          std::string(name), std::move(path), copied));
  }

  // OK when `existing` is a regular file of this directory; `what` begins the error message.
  Status checkSource(std::string_view existing, std::string_view what) const REQUIRES(shared_->mu) {
    const std::string path = joinPath(path_, existing);
    auto it = node_->children.find(existing);
    if (it == node_->children.end()) return fsError(ENOENT, what, path);
    if (it->second->kind == Kind::kSymlink) return fsError(ELOOP, what, path);
    if (it->second->kind != Kind::kFile) {
      return fsError(EINVAL, std::string(what) + " (not a regular file)", path);
    }
    return {};
  }

  Result<std::unique_ptr<AppendFile>> openAppend(std::string_view name) override {
    if (Status s = validateName(name); !s) return s.error();
    std::string path = joinPath(path_, name);
    std::shared_ptr<Node> file;
    {
      MutexLock lock(&shared_->mu);
      auto it = node_->children.find(name);
      if (it == node_->children.end()) {
        file = std::make_shared<Node>();
        file->kind = Kind::kFile;
        file->mode = 0600;
        node_->children.emplace(std::string(name), file);
      } else if (it->second->kind == Kind::kSymlink) {
        return fsError(ELOOP, "open", path);
      } else if (it->second->kind == Kind::kDirectory) {
        return fsError(EISDIR, "open", path);
      } else {
        file = it->second;
      }
    }
    return std::unique_ptr<AppendFile>(
        std::make_unique<MemAppendFile>(shared_, std::move(file), std::move(path)));
  }

  Status syncFile(std::string_view name) override {
    MutexLock lock(&shared_->mu);
    auto it = node_->children.find(name);
    if (it == node_->children.end()) return fsError(ENOENT, "fsync", joinPath(path_, name));
    if (it->second->kind == Kind::kSymlink) return fsError(ELOOP, "fsync", joinPath(path_, name));
    it->second->synced_data = it->second->data;
    return {};
  }

  Status sync() override {
    MutexLock lock(&shared_->mu);
    node_->synced_children = node_->children;
    return {};
  }

  Result<uint64_t> removeStaleTemporaries() override {
    MutexLock lock(&shared_->mu);
    uint64_t removed = 0;
    for (auto it = node_->children.begin(); it != node_->children.end();) {
      const std::string& name = it->first;
      if (!isTemporaryName(name) || isOwnTemporaryName(name)) {
        ++it;
        continue;
      }
      if (it->second->kind == Kind::kDirectory) {
        return fsError(EISDIR, "remove", joinPath(path_, name));
      }
      if (it->second->kind == Kind::kFile) shared_->used -= it->second->data.size();
      it = node_->children.erase(it);
      ++removed;
    }
    return removed;
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Node> node_;
  std::string path_;
};

// Calls fn(path, node) for every node beneath `dir`, depth first, sorted.
void walk(const std::shared_ptr<Node>& dir, const std::string& prefix,
          const std::function<void(const std::string&, const Node&)>& fn) {
  for (const auto& [name, child] : dir->children) {
    std::string path = joinPath(prefix, name);
    fn(path, *child);
    if (child->kind == Kind::kDirectory) walk(child, path, fn);
  }
}

// Finds the node at `path` without following symlinks.
std::shared_ptr<Node> lookup(const Shared& shared, std::string_view path) REQUIRES(shared.mu) {
  std::shared_ptr<Node> node = shared.root;
  if (path.empty()) return node;
  size_t start = 0;
  while (node) {
    size_t end = path.find('/', start);
    std::string_view component =
        path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (node->kind != Kind::kDirectory) return nullptr;
    auto it = node->children.find(component);
    if (it == node->children.end()) return nullptr;
    node = it->second;
    if (end == std::string_view::npos) return node;
    start = end + 1;
  }
  return nullptr;
}

void crash(Node& dir) {
  dir.children = dir.synced_children;
  for (auto& [name, child] : dir.children) {
    if (child->kind == Kind::kDirectory) {
      crash(*child);
    } else if (child->kind == Kind::kFile) {
      child->data = child->synced_data;
    }
  }
}

}  // namespace

MemoryFileSystem::MemoryFileSystem() : shared_(std::make_shared<Shared>()) {}
MemoryFileSystem::~MemoryFileSystem() = default;

Result<std::shared_ptr<Directory>> MemoryFileSystem::openDirectory(std::string_view path,
                                                                   DirectoryOptions options) {
  if (Status s = validateRelativePath(path); !s) return s.error();
  MutexLock lock(&shared_->mu);
  std::shared_ptr<Node> node = shared_->root;
  size_t start = 0;
  while (!path.empty() && start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view component = path.substr(start, end - start);
    std::string_view sub = path.substr(0, end);
    auto it = node->children.find(component);
    if (it == node->children.end()) {
      if (!options.create) return fsError(ENOENT, "open directory", sub);
      auto dir = std::make_shared<Node>();
      node->children.emplace(std::string(component), dir);
      if (options.sync_created) node->synced_children = node->children;
      node = std::move(dir);
    } else if (it->second->kind == Kind::kSymlink) {
      return fsError(ELOOP, "open directory", sub);
    } else if (it->second->kind != Kind::kDirectory) {
      return fsError(ENOTDIR, "open directory", sub);
    } else {
      node = it->second;
    }
    start = end + 1;
  }
  return std::shared_ptr<Directory>(
      std::make_shared<MemDirectory>(shared_, std::move(node), std::string(path)));
}

Result<uint64_t> MemoryFileSystem::freeBytes() {
  MutexLock lock(&shared_->mu);
  return shared_->capacity > shared_->used ? shared_->capacity - shared_->used : 0;
}

std::vector<MemoryFileSystem::Entry> MemoryFileSystem::list() const {
  MutexLock lock(&shared_->mu);
  std::vector<Entry> out;
  walk(shared_->root, "", [&](const std::string& path, const Node& node) {
    out.push_back(Entry{path, node.kind, node.mode, node.data});
  });
  return out;
}

std::optional<std::string> MemoryFileSystem::readFile(std::string_view path) const {
  MutexLock lock(&shared_->mu);
  auto node = lookup(*shared_, path);
  if (!node || node->kind != Kind::kFile) return std::nullopt;
  return node->data;
}

std::optional<uint32_t> MemoryFileSystem::fileMode(std::string_view path) const {
  MutexLock lock(&shared_->mu);
  auto node = lookup(*shared_, path);
  if (!node) return std::nullopt;
  return node->mode;
}

bool MemoryFileSystem::exists(std::string_view path) const {
  MutexLock lock(&shared_->mu);
  return lookup(*shared_, path) != nullptr;
}

void MemoryFileSystem::addSymlink(std::string_view path, std::string_view target) {
  size_t slash = path.rfind('/');
  std::string_view parent = slash == std::string_view::npos ? "" : path.substr(0, slash);
  std::string_view name = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (!parent.empty()) {
    (void)createDirectories(parent, /*sync_created=*/true);
  }
  MutexLock lock(&shared_->mu);
  auto dir = lookup(*shared_, parent);
  if (!dir || dir->kind != Kind::kDirectory) return;
  auto link = std::make_shared<Node>();
  link->kind = Kind::kSymlink;
  link->mode = 0777;
  link->data = std::string(target);
  dir->children[std::string(name)] = link;
  dir->synced_children = dir->children;
}

void MemoryFileSystem::setCapacity(uint64_t bytes) {
  MutexLock lock(&shared_->mu);
  shared_->capacity = bytes;
}

uint64_t MemoryFileSystem::usedBytes() const {
  MutexLock lock(&shared_->mu);
  return shared_->used;
}

void MemoryFileSystem::simulateCrash() {
  MutexLock lock(&shared_->mu);
  crash(*shared_->root);
  uint64_t used = 0;
  walk(shared_->root, "", [&](const std::string&, const Node& node) {
    if (node.kind == Kind::kFile) used += node.data.size();
  });
  shared_->used = used;
}

}  // namespace dumpd::storage
