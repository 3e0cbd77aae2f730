// Shared by the file_system_*_test.cc files: the FileSystem contract's harnesses and fixture (POSIX
// and in-memory), and the helpers of the tests that act as real clients.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/fs/credentials.h"
#include "storage/fs/file_system.h"
#include "storage/fs/memory_file_system.h"
#include "tests/storage/storage_test_util.h"

namespace dumpd::storage::testing {

// The same contract tests run against the POSIX and the in-memory implementation.
class FsHarness {
 public:
  virtual ~FsHarness() = default;
  virtual FileSystem& fs() = 0;
  // Regular files beneath the root (root-relative, sorted).
  virtual std::vector<std::string> files() = 0;
  virtual std::optional<std::string> read(const std::string& path) = 0;
  virtual std::optional<uint32_t> mode(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  // Plants a symlink at `path` pointing outside the root (to a real directory for POSIX).
  virtual void plantSymlink(const std::string& path) = 0;
};

class PosixHarness final : public FsHarness {
 public:
  explicit PosixHarness(PosixOptions options = {}) {
    auto fs = openPosixFileSystem(root_.path(), std::move(options));
    EXPECT_TRUE(fs.has_value());
    fs_ = fs.value();
  }
  FileSystem& fs() override { return *fs_; }
  std::vector<std::string> files() override {
    std::vector<std::string> out;
    for (const auto& f : testing::listFiles(root_.path())) {
      if (!std::filesystem::is_symlink(root_.path() + "/" + f)) out.push_back(f);
    }
    return out;
  }
  std::optional<std::string> read(const std::string& path) override {
    return testing::readFile(root_.path() + "/" + path);
  }
  std::optional<uint32_t> mode(const std::string& path) override {
    struct stat st;
    if (::lstat((root_.path() + "/" + path).c_str(), &st) != 0) return std::nullopt;
    return st.st_mode & 07777;
  }
  bool exists(const std::string& path) override {
    struct stat st;
    return ::lstat((root_.path() + "/" + path).c_str(), &st) == 0;
  }
  void plantSymlink(const std::string& path) override {
    std::string full = root_.path() + "/" + path;
    std::filesystem::create_directories(std::filesystem::path(full).parent_path());
    EXPECT_EQ(::symlink(outside_.path().c_str(), full.c_str()), 0);
  }
  const TempDir& outside() const { return outside_; }
  const std::string& root() const { return root_.path(); }

 private:
  TempDir root_;
  TempDir outside_;
  std::shared_ptr<FileSystem> fs_;
};

class MemoryHarness final : public FsHarness {
 public:
  FileSystem& fs() override { return fs_; }
  std::vector<std::string> files() override {
    std::vector<std::string> out;
    for (const auto& e : fs_.list()) {
      if (e.kind == MemoryFileSystem::Entry::Kind::kFile) out.push_back(e.path);
    }
    return out;
  }
  std::optional<std::string> read(const std::string& path) override { return fs_.readFile(path); }
  std::optional<uint32_t> mode(const std::string& path) override { return fs_.fileMode(path); }
  bool exists(const std::string& path) override { return fs_.exists(path); }
  void plantSymlink(const std::string& path) override { fs_.addSymlink(path, "/etc"); }
  MemoryFileSystem& memory() { return fs_; }

 private:
  MemoryFileSystem fs_;
};

class FileSystemContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "posix") {
      h_ = std::make_unique<PosixHarness>();
    } else if (GetParam() == "posix_copy") {  // linkFile's copy, as without hard links
      h_ = std::make_unique<PosixHarness>(PosixOptions{.hard_links = false});
    } else {
      h_ = std::make_unique<MemoryHarness>();
    }
  }
  FileSystem& fs() { return h_->fs(); }
  std::shared_ptr<Directory> dir(const std::string& path) {
    auto d = fs().openDirectory(path, {.create = true});
    EXPECT_TRUE(d.has_value()) << (d ? "" : d.error().message);
    return d ? d.value() : nullptr;
  }
  std::unique_ptr<FsHarness> h_;
};

// Publishes file `name` of `d` with `text`.
inline void commitFile(Directory& d, const std::string& name, const std::string& text,
                       uint32_t mode = 0400) {
  auto f = d.newFile(name, mode);
  ASSERT_TRUE(f.has_value()) << f.error().message;
  ASSERT_TRUE(f.value()->write(asBytes(text)));
  ASSERT_TRUE(f.value()->commit());
}

// What the writer does for a repeated tensor: a hard link, or a copy where the file system
// answers that it links nothing here (kUnsupported).
inline Result<std::unique_ptr<WritableFile>> linkOrCopy(Directory& d, std::string_view existing,
                                                        std::string_view name, uint32_t mode) {
  auto link = d.linkFile(existing, name);
  if (link || link.error().code != ErrorCode::kUnsupported) return link;
  return d.copyFile(existing, name, mode);
}

inline struct stat statOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

// --- Acting as the client (PosixOptions::act_as), with real uids: root only. ---

inline const Credentials kClient{1234, 1234, {}};
inline constexpr uid_t kOtherUser = 1235;

#define SKIP_UNLESS_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: acts as real uids 1234 and 1235"

// mkdir with an owner and an exact mode (the umask does not apply to chmod).
inline void makeDir(const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
  ASSERT_EQ(::chown(path.c_str(), uid, gid), 0) << path;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

inline void makeFile(const std::string& path, uid_t uid, gid_t gid, mode_t mode,
                     const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  ASSERT_EQ(::chown(path.c_str(), uid, gid), 0) << path;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

// The dump root as the daemon gets it: an O_PATH fd (opened here by root).
inline Result<std::shared_ptr<FileSystem>> actAsClient(const std::string& root,
                                                       const Credentials& creds = kClient,
                                                       bool hard_links = true) {
  PosixOptions o;
  o.act_as = creds;
  o.hard_links = hard_links;
  return makePosixFileSystem(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC), o);
}

// A TempDir that others may traverse (mkdtemp makes it 0700).
class TraversableTempDir : public TempDir {
 public:
  TraversableTempDir() { ::chmod(path().c_str(), 0755); }
};

}  // namespace dumpd::storage::testing
