#include "storage/writer/dir_cache.h"

#include <algorithm>

#include "storage/format/names.h"

namespace dumpd::storage {
namespace {

uint64_t iterationKey(uint32_t graph, uint32_t iteration) {
  return (uint64_t{graph} << 32) | iteration;
}

}  // namespace

void DirState::addReason(std::string_view reason) {
  MutexLock lock(&mu);
  if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) {
    reasons.emplace_back(reason);
  }
}

DirCache::DirCache(std::shared_ptr<FileSystem> fs, std::string rank_dir, std::string net_dir,
                   uint32_t max_open, bool sync_created)
    : fs_(std::move(fs)),
      rank_dir_(std::move(rank_dir)),
      net_dir_(std::move(net_dir)),
      max_open_(std::max<size_t>(max_open, 1)),
      sync_created_(sync_created) {}

std::shared_ptr<DirState> DirCache::newState(std::string path) {
  return std::make_shared<DirState>(std::move(path), open_appenders_);
}

Result<DirLease> DirCache::pin(const std::shared_ptr<DirState>& ds) {
  MutexLock lock(&mu_);
  return pinLocked(ds);
}

Result<DirLease> DirCache::pinLocked(const std::shared_ptr<DirState>& ds) {
  if (ds->detached) {
    // Rows held for an earlier ticket past their iteration's completion (a caller that
    // broke completeIteration's contract): never reopen a completed directory.
    return makeError(ErrorCode::kInternal,
                     ds->path + " was completed before all of its rows were written");
  }
  if (ds->dir) {
    lru_.splice(lru_.begin(), lru_, ds->lru_pos);
    ds->pins.fetch_add(1, std::memory_order_relaxed);  // under mu_, as every reader
    return DirLease(ds, ds->dir);
  }
  auto dir = fs_->openDirectory(ds->path, {.create = true, .sync_created = sync_created_});
  if (!dir) return dir.error();
  ds->dir = std::move(dir.value());
  if (!ds->cleaned) {
    ds->cleaned = true;
    // Best effort: a leftover costs space only; failing to remove it must not stop a dump.
    if (auto n = ds->dir->removeStaleTemporaries()) {
      stale_temporaries_removed_.fetch_add(n.value(), std::memory_order_relaxed);
    }
  }
  lru_.push_front(ds.get());
  ds->lru_pos = lru_.begin();
  ds->pins.fetch_add(1, std::memory_order_relaxed);  // before closing others: not this one
  closeLeastRecentlyUsed();
  open_directories_.store(lru_.size(), std::memory_order_relaxed);
  return DirLease(ds, ds->dir);
}

// Closes unpinned directories, least recently used first, until at most the cap are open.
// Their appenders close too; rows written stay in the files, the figures in the DirState.
void DirCache::closeLeastRecentlyUsed() {
  auto it = lru_.end();
  while (lru_.size() > max_open_ && it != lru_.begin()) {
    --it;
    DirState& victim = **it;
    // Acquire: pairs with the release in ~DirLease.
    if (victim.pins.load(std::memory_order_acquire) != 0) continue;
    it = lru_.erase(it);
    victim.dir.reset();
    MutexLock lock(&victim.mu);
    victim.stat_csv.reset();
    victim.mapping_csv.reset();
  }
}

// Takes `ds` out of the open directories; returns its directory (null when closed).
std::shared_ptr<Directory> DirCache::detachLocked(DirState& ds) {
  ds.detached = true;
  if (!ds.dir) return nullptr;
  lru_.erase(ds.lru_pos);
  open_directories_.store(lru_.size(), std::memory_order_relaxed);
  return std::move(ds.dir);
}

Result<DirLease> DirCache::iteration(uint32_t graph, uint32_t iteration) {
  const uint64_t key = iterationKey(graph, iteration);
  MutexLock lock(&mu_);
  auto it = open_iterations_.find(key);
  if (it != open_iterations_.end()) return pinLocked(it->second);
  std::string path = net_dir_;
  path.push_back('/');
  appendDecimal(path, graph);
  path.push_back('/');
  appendDecimal(path, iteration);
  auto ds = newState(std::move(path));
  ds->graph = graph;
  ds->iteration = iteration;
  auto lease = pinLocked(ds);
  if (!lease) return lease.error();
  // Written again after completion: the iteration is reopened and gets a new manifest line.
  completed_.erase(key);
  open_iterations_.emplace(key, std::move(ds));
  return lease;
}

Result<DirLease> DirCache::constants(uint32_t graph) {
  MutexLock lock(&mu_);
  auto it = constants_.find(graph);
  if (it != constants_.end()) return pinLocked(it->second);
  std::string path = net_dir_;
  path.push_back('/');
  appendDecimal(path, graph);
  path.append("/constants");
  auto ds = newState(std::move(path));
  auto lease = pinLocked(ds);
  if (!lease) return lease.error();
  constants_.emplace(graph, std::move(ds));
  return lease;
}

Result<DirLease> DirCache::rankSubdir(const std::string& name) {
  MutexLock lock(&mu_);
  auto it = rank_subdirs_.find(name);
  if (it != rank_subdirs_.end()) return pinLocked(it->second);
  auto ds = newState(rank_dir_ + "/" + name);
  auto lease = pinLocked(ds);
  if (!lease) return lease.error();
  rank_subdirs_.emplace(name, std::move(ds));
  return lease;
}

std::optional<DirCache::Taken> DirCache::takeIteration(uint32_t graph, uint32_t iteration) {
  const uint64_t key = iterationKey(graph, iteration);
  MutexLock lock(&mu_);
  Taken taken;
  auto it = open_iterations_.find(key);
  if (it != open_iterations_.end()) {
    taken.state = std::move(it->second);
    open_iterations_.erase(it);
    taken.dir = detachLocked(*taken.state);
  } else if (completed_.count(key) != 0) {
    return std::nullopt;
  }
  completed_.insert(key);
  return taken;
}

std::vector<DirCache::Taken> DirCache::takeAllIterations() {
  std::vector<Taken> open;
  MutexLock lock(&mu_);
  for (auto& [key, ds] : open_iterations_) {
    std::shared_ptr<Directory> dir = detachLocked(*ds);
    open.push_back({std::move(ds), std::move(dir)});
    completed_.insert(key);
  }
  open_iterations_.clear();
  return open;
}

}  // namespace dumpd::storage
