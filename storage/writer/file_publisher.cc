#include "storage/writer/file_publisher.h"

#include "storage/format/names.h"

namespace dumpd::storage {

using config::Durability;

SyncPolicy FilePublisher::tensorSync() const {
  switch (durability_) {
    case Durability::kNone:
      return SyncPolicy::kNone;
    case Durability::kIteration:
      return SyncPolicy::kDeferred;
    case Durability::kFile:
      return SyncPolicy::kNow;
  }
  return SyncPolicy::kNone;
}

Result<uint64_t> FilePublisher::publishText(DirLease& lease, std::string_view name,
                                            std::string_view text, uint32_t mode, SyncPolicy sync,
                                            std::string_view ext) const {
  return publish(lease, name, ext, false, mode, sync,
                 [text](WritableFile& f) { return f.write(asBytes(text)); });
}

Status FilePublisher::appendMapping(DirLease& lease, std::string_view short_name,
                                    std::string_view name, bool lz4_suffix) const {
  // Before the rename: a published file always has its mapping line.
  const size_t cut = lz4_suffix ? 4 : 0;
  std::string line(short_name.substr(0, short_name.size() - cut));
  line.push_back(',');
  line.append(name.substr(0, name.size() - cut));
  line.push_back('\n');
  return appendLine(lease, /*stat_csv=*/false, line);
}

Status FilePublisher::finishPublish(DirLease& lease, WritableFile& f, std::string_view final_name,
                                    SyncPolicy sync) const {
  if (Status s = f.commit(); !s) return s;
  if (sync == SyncPolicy::kNow) return lease.dir().sync();
  if (sync == SyncPolicy::kDeferred) {
    DirState& ds = lease.state();
    MutexLock lock(&ds.mu);
    ds.unsynced.emplace_back(final_name);
  }
  return {};
}

Result<std::unique_ptr<AppendFile>> FilePublisher::openAppender(Directory& dir,
                                                                std::string_view name,
                                                                std::string_view header,
                                                                bool sync_new_entry) {
  auto opened = dir.openAppend(name);
  if (!opened) return opened.error();
  if (opened.value()->size() == 0) {
    if (sync_new_entry) {
      if (Status s = dir.sync(); !s) return s.error();
    }
    if (!header.empty()) {
      if (Status s = opened.value()->append(header); !s) return s.error();
    }
  }
  return opened;
}

Status FilePublisher::appendLine(DirLease& lease, bool stat_csv, std::string_view line) const {
  DirState& ds = lease.state();
  MutexLock lock(&ds.mu);
  HeldAppender& file = stat_csv ? ds.stat_csv : ds.mapping_csv;
  if (!file) {
    // Durability "iteration" syncs the directory at completion; "file" must do it now.
    auto opened = openAppender(lease.dir(), stat_csv ? "statistic.csv" : "mapping.csv",
                               stat_csv ? std::string_view(csv_header_) : std::string_view(),
                               durability_ == Durability::kFile);
    if (!opened) return opened.error();
    file.hold(std::move(opened.value()));
    (stat_csv ? ds.stat_csv_used : ds.mapping_csv_used) = true;
  }
  if (Status s = file->append(line); !s) return s;
  if (durability_ == Durability::kFile) return file->sync();
  return {};
}

Status FilePublisher::syncAtCompletion(DirState& ds, std::shared_ptr<Directory> dir,
                                       FileSystem& fs) const {
  Status result;
  if (!dir) {
    auto reopened = fs.openDirectory(ds.path, {});
    if (!reopened) return reopened.error();
    dir = std::move(reopened.value());
  }
  for (const std::string& name : ds.unsynced) {
    if (Status s = dir->syncFile(name); !s && result) result = s;
  }
  const std::pair<HeldAppender*, bool> csvs[] = {{&ds.stat_csv, ds.stat_csv_used},
                                                 {&ds.mapping_csv, ds.mapping_csv_used}};
  for (auto [file, used] : csvs) {
    Status s;
    if (*file) {
      s = (*file)->sync();
    } else if (used) {  // closed with its directory meanwhile
      s = dir->syncFile(file == &ds.stat_csv ? "statistic.csv" : "mapping.csv");
    }
    if (!s && result) result = s;
  }
  if (Status s = dir->sync(); !s && result) result = s;
  return result;
}

}  // namespace dumpd::storage
