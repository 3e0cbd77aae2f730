// How a job's files appear in its directories, as the durability setting asks: every file is
// written under a temporary name and renamed when complete (a name over 255 bytes becomes
// "<digits><ext>", listed in mapping.csv first); csv files are appended to through the
// directory's held appenders; "file" fsyncs each file and its directory entry at once,
// "iteration" defers the fsyncs to the iteration's completion (syncAtCompletion).
//
// Thread-safety: const after construction; the DirState locks guard what they name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"
#include "config/write_policy.h"
#include "storage/format/names.h"
#include "storage/fs/file_system.h"
#include "storage/writer/dir_cache.h"

namespace dumpd::storage {

enum class SyncPolicy { kNone, kNow, kDeferred };

// Where a published file's bytes come from: its body writes them (kWrite), or they are those
// of `from`, a file of the same directory, as a hard link (kLink) or a copy (kCopy).
struct FileSource {
  enum Kind { kWrite, kLink, kCopy } kind = kWrite;
  std::string_view from;
};

class FilePublisher {
 public:
  // `csv_header`: the first line of every new statistic.csv.
  FilePublisher(config::Durability durability, std::string csv_header)
      : durability_(durability), csv_header_(std::move(csv_header)) {}

  SyncPolicy tensorSync() const;
  // Files outside iteration directories (constants, graphs, metadata) are synced at once.
  SyncPolicy otherSync() const {
    return durability_ == config::Durability::kNone ? SyncPolicy::kNone : SyncPolicy::kNow;
  }
  bool syncDirs() const { return durability_ != config::Durability::kNone; }

  // Writes file `name` in the lease's directory. `body(WritableFile&)` writes the contents
  // (source kWrite); a link or copy of another file (`source`) has them already and `body`
  // writes nothing. A name longer than 255 bytes is replaced by "<digits><ext>" and the pair
  // is appended to mapping.csv (names without the ".lz4" suffix: what `lz4 -d` restores).
  // Returns the bytes written (0 for a link). `final_name` (optional) receives the name
  // published.
  template <typename Body>
  Result<uint64_t> publish(DirLease& lease, std::string_view name, std::string_view ext,
                           bool lz4_suffix, uint32_t mode, SyncPolicy sync, Body&& body,
                           FileSource source = {}, std::string* final_name = nullptr) const;

  Result<uint64_t> publishText(DirLease& lease, std::string_view name, std::string_view text,
                               uint32_t mode, SyncPolicy sync, std::string_view ext = {}) const;

  // Appends `line` to the directory's statistic.csv (`stat_csv`) or mapping.csv, opening it
  // (with the header, for statistic.csv) when its appender is closed.
  Status appendLine(DirLease& lease, bool stat_csv, std::string_view line) const;

  // Opens `name` in dir for appending, writing `header` into a new (empty) file; with
  // `sync_new_entry`, a new file's directory entry is made durable at once.
  static Result<std::unique_ptr<AppendFile>> openAppender(Directory& dir, std::string_view name,
                                                          std::string_view header,
                                                          bool sync_new_entry);

  // Syncs what the durability setting deferred to completion in ds (through `dir`, its
  // directory, reopened through `fs` when it was closed), then closes ds's appenders.
  // REQUIRES: ds detached (DirCache::takeIteration).
  Status syncAtCompletion(DirState& ds, std::shared_ptr<Directory> dir, FileSystem& fs) const
      REQUIRES(ds.mu);

 private:
  // Before the rename of a file published under a short name: its mapping.csv line.
  Status appendMapping(DirLease& lease, std::string_view short_name, std::string_view name,
                       bool lz4_suffix) const;
  Status finishPublish(DirLease& lease, WritableFile& f, std::string_view final_name,
                       SyncPolicy sync) const;

  const config::Durability durability_;
  const std::string csv_header_;
};

template <typename Body>
Result<uint64_t> FilePublisher::publish(DirLease& lease, std::string_view name,
                                        std::string_view ext, bool lz4_suffix, uint32_t mode,
                                        SyncPolicy sync, Body&& body, FileSource source,
                                        std::string* final_name_out) const {
  std::string short_name;
  if (name.size() > kMaxFileNameBytes) {
    short_name = randomDigits();
    short_name.append(ext);
  }
  std::string_view final_name = short_name.empty() ? name : std::string_view(short_name);
  Result<std::unique_ptr<WritableFile>> file =
      source.kind == FileSource::kWrite  ? lease.dir().newFile(final_name, mode)
      : source.kind == FileSource::kLink ? lease.dir().linkFile(source.from, final_name)
                                         : lease.dir().copyFile(source.from, final_name, mode);
  if (!file) return file.error();
  WritableFile& f = *file.value();
  if (Status s = body(f); !s) return s.error();
  if (sync == SyncPolicy::kNow) {
    if (Status s = f.sync(); !s) return s.error();
  }
  if (!short_name.empty()) {
    if (Status s = appendMapping(lease, final_name, name, lz4_suffix); !s) return s.error();
  }
  if (Status s = finishPublish(lease, f, final_name, sync); !s) return s.error();
  if (final_name_out != nullptr) final_name_out->assign(final_name);
  return f.bytesWritten();
}

}  // namespace dumpd::storage
