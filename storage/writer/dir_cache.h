// The directories one job (JobWriter) writes into, and what stays open in them between calls.
//
// A DirState is one directory (an iteration directory, constants/, graphs/, ...) with its
// appenders (statistic.csv, mapping.csv) and, for an iteration directory, the figures of its
// manifest line; they outlive the directory's fd. DirCache opens directories on demand (the
// first open also removes the temporary files crashed writers left there), keeps at most
// `max_open` of them open, least recently used closed first, never one a call is using, and
// hands out DirLeases: one call's hold on an open directory.
//
// Thread-safety: DirCache's methods may be called from any thread; its mutex guards its
// tables, the LRU list and each DirState's `dir`, `lru_pos`, `cleaned` and `detached`. A
// DirState's own mutex guards its appenders, flags and lists (never taken with DirCache's
// held, except to close the appenders of a directory being closed: DirCache::mu_ first).
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"
#include "base/result.h"
#include "storage/fs/file_system.h"

namespace dumpd::storage {

// An AppendFile the writer keeps open between calls; counts itself in `open`
// (JobCounters::open_fds). Relaxed: `open` is a figure for reports, it orders nothing.
class HeldAppender {
 public:
  explicit HeldAppender(std::atomic<uint64_t>& open) : open_(open) {}
  ~HeldAppender() { reset(); }
  HeldAppender(const HeldAppender&) = delete;
  HeldAppender& operator=(const HeldAppender&) = delete;

  void hold(std::unique_ptr<AppendFile> file) {
    reset();
    file_ = std::move(file);
    open_.fetch_add(1, std::memory_order_relaxed);
  }
  void reset() {
    if (!file_) return;
    file_.reset();
    open_.fetch_sub(1, std::memory_order_relaxed);
  }
  explicit operator bool() const { return file_ != nullptr; }
  AppendFile* operator->() const { return file_.get(); }

 private:
  std::atomic<uint64_t>& open_;
  std::unique_ptr<AppendFile> file_;
};

// One directory the job writes files into, with its appenders. An iteration directory also
// keeps the figures of its manifest line; they stay here while the directory is closed.
struct DirState {
  DirState(std::string p, std::atomic<uint64_t>& open_appenders)
      : path(std::move(p)), stat_csv(open_appenders), mapping_csv(open_appenders) {}

  const std::string path;  // root-relative
  uint32_t graph = 0;
  uint32_t iteration = 0;

  // Guarded by DirCache::mu_ (the job's table of open directories).
  std::shared_ptr<Directory> dir;          // null while closed (not opened yet, or closed as LRU)
  std::list<DirState*>::iterator lru_pos;  // in DirCache::lru_ while `dir` is set
  bool cleaned = false;                    // stale temporaries removed (at the first open)
  bool detached = false;                   // completed: never opened again
  // Calls using `dir` now (DirLease); a pinned directory is never closed. Raised under
  // DirCache::mu_; lowered without it, with release, pairs with the acquire in
  // DirCache::closeLeastRecentlyUsed(): the holder's uses happen before the close.
  std::atomic<uint32_t> pins{0};

  // Taken after DirCache::mu_ when both are held (closing a directory closes its appenders).
  Mutex mu;
  HeldAppender stat_csv GUARDED_BY(mu);
  HeldAppender mapping_csv GUARDED_BY(mu);
  // An appender was opened here at least once: its file is synced at completion even when
  // the appender was closed meanwhile (directory closed as least recently used).
  bool stat_csv_used GUARDED_BY(mu) = false;
  bool mapping_csv_used GUARDED_BY(mu) = false;
  std::vector<std::string> unsynced
      GUARDED_BY(mu);  // durability "iteration": fsync'ed at completion
  std::vector<std::string> reasons GUARDED_BY(mu);
  uint64_t errors GUARDED_BY(mu) = 0;

  std::atomic<uint64_t> tensors{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> dropped{0};

  void addReason(std::string_view reason);
};

// One call's hold on an open directory (DirCache::pin): the directory is not closed meanwhile.
class DirLease {
 public:
  DirLease(std::shared_ptr<DirState> state, std::shared_ptr<Directory> dir)
      : state_(std::move(state)), dir_(std::move(dir)) {}
  DirLease(DirLease&&) noexcept = default;  // the moved-from lease holds no pin
  DirLease& operator=(DirLease&&) = delete;
  ~DirLease() {
    // Release: pairs with the acquire in DirCache::closeLeastRecentlyUsed().
    if (state_) state_->pins.fetch_sub(1, std::memory_order_release);
  }

  DirState& state() const { return *state_; }
  const std::shared_ptr<DirState>& sharedState() const { return state_; }
  Directory& dir() const { return *dir_; }

 private:
  std::shared_ptr<DirState> state_;
  std::shared_ptr<Directory> dir_;
};

class DirCache {
 public:
  // `rank_dir` "rank_3", `net_dir` "rank_3/Net"; `max_open` 0 is taken as 1; `sync_created`:
  // directories created are made durable in their parents (durability other than "none").
  DirCache(std::shared_ptr<FileSystem> fs, std::string rank_dir, std::string net_dir,
           uint32_t max_open, bool sync_created);

  // A directory of no table (the job's .dump_metadata).
  std::shared_ptr<DirState> newState(std::string path);
  // Pins `ds` open for one call: opens its directory when closed (the first open also removes
  // leftover temporary files), makes it the most recently used, and closes the least recently
  // used unpinned directories beyond the cap.
  Result<DirLease> pin(const std::shared_ptr<DirState>& ds);
  // {net}/{graph}/{iteration}, reopened (for a new manifest line) when it was completed.
  Result<DirLease> iteration(uint32_t graph, uint32_t iteration);
  Result<DirLease> constants(uint32_t graph);            // {net}/{graph}/constants
  Result<DirLease> rankSubdir(const std::string& name);  // {rank}/graphs, {rank}/execution_order

  // An iteration taken out of the open ones to be completed: its state (null when nothing
  // was written to it) and its directory (null when closed).
  struct Taken {
    std::shared_ptr<DirState> state;
    std::shared_ptr<Directory> dir;
  };
  // Takes (graph, iteration) out and marks it completed; nullopt when it was completed and
  // not written to since (completion is idempotent).
  std::optional<Taken> takeIteration(uint32_t graph, uint32_t iteration);
  // Takes every open iteration out, in (graph, iteration) order, and marks them completed.
  std::vector<Taken> takeAllIterations();

  std::atomic<uint64_t>& appenderCount() { return open_appenders_; }
  uint64_t openDirectories() const { return open_directories_.load(std::memory_order_relaxed); }
  uint64_t openAppenders() const { return open_appenders_.load(std::memory_order_relaxed); }
  uint64_t staleTemporariesRemoved() const {
    return stale_temporaries_removed_.load(std::memory_order_relaxed);
  }

 private:
  Result<DirLease> pinLocked(const std::shared_ptr<DirState>& ds) REQUIRES(mu_);
  void closeLeastRecentlyUsed() REQUIRES(mu_);
  std::shared_ptr<Directory> detachLocked(DirState& ds) REQUIRES(mu_);

  // First: the DirStates' appenders count themselves in it until they are destroyed (the
  // writer declares its DirCache before anything else that holds a DirState).
  std::atomic<uint64_t> open_appenders_{0};
  const std::shared_ptr<FileSystem> fs_;
  const std::string rank_dir_;
  const std::string net_dir_;
  const size_t max_open_;
  const bool sync_created_;

  // Taken before any DirState::mu. Also guards each DirState's `dir`, `lru_pos`, `cleaned`
  // and `detached` (clang cannot name it from a DirState).
  Mutex mu_;
  std::map<uint64_t, std::shared_ptr<DirState>> open_iterations_ GUARDED_BY(mu_);
  std::set<uint64_t> completed_ GUARDED_BY(mu_);
  std::map<uint32_t, std::shared_ptr<DirState>> constants_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<DirState>> rank_subdirs_ GUARDED_BY(mu_);
  // The DirStates whose directory is open, most recently used first; at most max_open_ of
  // them unless more are pinned by calls in flight.
  std::list<DirState*> lru_ GUARDED_BY(mu_);
  // Figures for reports, written under mu_; relaxed: they order nothing.
  std::atomic<uint64_t> open_directories_{0};
  std::atomic<uint64_t> stale_temporaries_removed_{0};
};

}  // namespace dumpd::storage
