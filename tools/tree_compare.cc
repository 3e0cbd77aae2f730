#include "tools/tree_compare.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <thread>
#include <unordered_map>

#include "base/mutex.h"
#include "storage/format/names.h"
#include "tools/compare_metrics.h"
#include "tools/progress.h"

namespace dumpd::tools {
namespace {

// Values per task: a pair larger than this is split so every core works on it.
constexpr uint64_t kChunkValues = uint64_t{1} << 20;

// ---- matching ----

struct Pair {
  const TensorEntry* left = nullptr;
  const TensorEntry* right = nullptr;
};

std::string matchKey(const TensorEntry& e, const std::string& op_name) {
  std::string key = std::to_string(e.rank) + '/' + std::to_string(e.graph) + '/' +
                    std::to_string(e.iteration) + '/' + e.location;
  key.push_back('\0');
  key.append(op_name);
  key.push_back('\0');
  key.append(storage::ioName(e.io));
  key.push_back('.');
  key.append(std::to_string(e.slot));
  return key;
}

// Pairs in the left's execution order, then the right's leftovers in the right's order. An
// entry without an op name (an unreadable directory or csv) stands alone.
std::vector<Pair> matchTrees(const DumpTree& left, const DumpTree& right, const NameMap& map) {
  std::unordered_map<std::string, std::vector<const TensorEntry*>> by_key;
  for (const TensorEntry& e : right.entries) {
    if (!e.op_name.empty()) by_key[matchKey(e, e.op_name)].push_back(&e);
  }
  std::unordered_map<std::string, size_t> used;
  std::unordered_map<const TensorEntry*, bool> matched;
  std::vector<Pair> pairs;
  for (const TensorEntry& e : left.entries) {
    Pair p{&e, nullptr};
    if (!e.op_name.empty()) {
      auto mapped = map.find(e.op_name);
      const std::string key = matchKey(e, mapped == map.end() ? e.op_name : mapped->second);
      auto it = by_key.find(key);
      size_t& k = used[key];
      if (it != by_key.end() && k < it->second.size()) {
        p.right = it->second[k++];
        matched[p.right] = true;
      }
    }
    pairs.push_back(p);
  }
  for (const TensorEntry& e : right.entries) {
    if (!matched.contains(&e)) pairs.push_back(Pair{nullptr, &e});
  }
  return pairs;
}

// ---- rows ----

std::string opLabel(const TensorEntry* e) {
  if (e == nullptr) return "*";
  return e->op_name.empty() ? e->path : e->op_name;
}

CompareRow rowFor(const Pair& p) {
  const TensorEntry& any = p.left != nullptr ? *p.left : *p.right;
  CompareRow row;
  row.rank = any.rank;
  row.graph = any.graph;
  row.iteration = any.iteration;
  row.left_op = opLabel(p.left);
  row.right_op = opLabel(p.right);
  row.tensor_index = std::string(storage::ioName(any.io)) + "." + std::to_string(any.slot);
  row.dtype = any.dtype;
  row.shape = shapeText(any);
  row.metrics = nanMetrics();
  if (!any.error.empty() || (p.left && !p.left->error.empty()) ||
      (p.right && !p.right->error.empty())) {
    row.kind = RowKind::kError;
    for (const TensorEntry* e : {p.left, p.right}) {
      if (e == nullptr || e->error.empty()) continue;
      if (!row.note.empty()) row.note.append("; ");
      row.note.append(e == p.left ? "left: " : "right: ").append(e->error);
    }
  } else if (p.right == nullptr) {
    row.kind = RowKind::kLeftOnly;
  } else if (p.left == nullptr) {
    row.kind = RowKind::kRightOnly;
  }
  return row;
}

void judgeTensors(CompareRow& row, const PairSums& sums, const Thresholds& t) {
  std::string why = tensorFailure(row.metrics, sums, t);
  row.failed = !why.empty();
  if (!why.empty() && !row.note.empty()) why.append("; ");
  row.note = why + row.note;
}

// ---- the pool ----

// Tasks pulled by a fixed set of threads; a task may push more (the chunks of a large pair go
// to the front, so a started pair finishes before new ones open).
class TaskQueue {
 public:
  void push(std::function<void()> task, bool front) {
    {
      MutexLock lock(&mu_);
      if (front) {
        tasks_.push_front(std::move(task));
      } else {
        tasks_.push_back(std::move(task));
      }
    }
    cv_.signal();
  }
  // Returns when every task, including those pushed meanwhile, has run.
  void run(unsigned threads) {
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back([this] { work(); });
    work();
    for (std::thread& t : pool) t.join();
  }

 private:
  void work() {
    MutexLock lock(&mu_);
    for (;;) {
      while (tasks_.empty() && running_ != 0) cv_.wait(&mu_);
      if (tasks_.empty()) break;  // and nothing running: nothing more can come
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      ++running_;
      lock.unlock();
      task();
      lock.lock();
      --running_;
      if (running_ == 0 && tasks_.empty()) cv_.signalAll();
    }
  }

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  unsigned running_ GUARDED_BY(mu_) = 0;
};

// A pair split into chunks: partial sums land in their chunk's slot and are merged in chunk
// order by whoever finishes last, so results do not depend on the thread count.
struct SplitPair {
  std::shared_ptr<TensorData> left, right;
  std::vector<PairSums> sums;
  std::vector<KlSums> kl;
  KlScale scale;
  // acq_rel: the last decrement sees every chunk's slot (pairs with the other decrements).
  std::atomic<size_t> remaining{0};
};

class PairRunner {
 public:
  PairRunner(CompareReport& report, const std::vector<Pair>& pairs, TaskQueue& queue,
             ProgressBar& progress)
      : report_(report), pairs_(pairs), queue_(queue), progress_(progress) {}

  uint64_t bytesRead() const { return bytes_.load(std::memory_order_relaxed); }

  // One pair; a pair that cannot get its memory (a file whose header lies about its size)
  // becomes an error row instead of ending the run.
  void run(size_t i) {
    try {
      runPair(i);
    } catch (const std::bad_alloc&) {
      CompareRow& row = report_.rows[i];
      row.kind = RowKind::kError;
      row.note = "out of memory reading this pair";
      done(0);
    }
  }

 private:
  void runPair(size_t i) {
    CompareRow& row = report_.rows[i];
    const Pair& p = pairs_[i];
    if (row.kind != RowKind::kTensors) return;  // unmatched or error: nothing to read
    const bool files =
        p.left->kind != TensorFileKind::kNone && p.right->kind != TensorFileKind::kNone;
    auto left = openSide(*p.left, row, "left"), right = openSide(*p.right, row, "right");
    if (row.kind == RowKind::kError) return done(0);
    const uint64_t bytes = (left ? left->bytesRead() : 0) + (right ? right->bytesRead() : 0);
    if (!files) return statistics(i, left.get(), right.get(), bytes);
    if (left->values() != right->values()) {
      row.kind = RowKind::kShapeMismatch;
      row.failed = true;
      row.note = "left " + shapeText(*p.left) + " (" + std::to_string(left->elements()) +
                 " elements), right " + shapeText(*p.right) + " (" +
                 std::to_string(right->elements()) + ")";
      if (left->elements() == right->elements()) row.note += ": complex against real";
      return done(bytes);
    }
    if (p.left->shape != p.right->shape) {
      row.note = "shapes differ: left " + shapeText(*p.left) + ", right " + shapeText(*p.right);
    }
    if (p.left->dtype != p.right->dtype) {
      row.note.append(row.note.empty() ? "" : "; ")
          .append("dtypes differ: left " + p.left->dtype + ", right " + p.right->dtype);
    }
    row.elements = left->elements();
    const uint64_t n = left->values();
    if (n <= kChunkValues) {
      PairSums sums;
      row.metrics = comparePair(*left, *right, &sums);
      judgeTensors(row, sums, report_.thresholds);
      checkShrank(row, *left, *right, *p.left, *p.right);
      return done(bytes);
    }
    auto split = std::make_shared<SplitPair>();
    split->left = std::move(left);
    split->right = std::move(right);
    const size_t chunks = static_cast<size_t>((n + kChunkValues - 1) / kChunkValues);
    split->sums.resize(chunks);
    split->kl.resize(chunks);
    split->remaining.store(chunks, std::memory_order_relaxed);
    for (size_t c = 0; c < chunks; ++c) {
      queue_.push([this, i, c, n, split, bytes] { firstPass(i, c, n, split, bytes); }, true);
    }
  }

 private:
  std::shared_ptr<TensorData> openSide(const TensorEntry& e, CompareRow& row, const char* side) {
    if (e.kind == TensorFileKind::kNone) return nullptr;
    auto t =
        TensorData::open(e.kind, e.path, e.bin_dtype, e.bin_elements, e.bin_offset, e.bin_size);
    if (t) return std::make_shared<TensorData>(std::move(t.value()));
    row.kind = RowKind::kError;
    row.note.append(row.note.empty() ? "" : "; ")
        .append(side)
        .append(": ")
        .append(t.error().message);
    return nullptr;
  }

  void statistics(size_t i, const TensorData* left, const TensorData* right, uint64_t bytes) {
    CompareRow& row = report_.rows[i];
    const Pair& p = pairs_[i];
    auto values = [](const TensorEntry& e, const TensorData* t) {
      return e.statistics ? *e.statistics : computeStatistics(*t);
    };
    row.kind = RowKind::kStatistics;
    row.statistics = compareStatistics(values(*p.left, left), values(*p.right, right));
    row.note = statisticFailure(*row.statistics, report_.thresholds);
    row.failed = !row.note.empty();
    done(bytes);
  }

  void firstPass(size_t i, size_t c, uint64_t n, const std::shared_ptr<SplitPair>& sp,
                 uint64_t bytes) {
    const uint64_t begin = c * kChunkValues, end = std::min(n, begin + kChunkValues);
    sp->sums[c] = sumPairs(*sp->left, *sp->right, begin, end);
    if (sp->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    PairSums total;
    for (const PairSums& s : sp->sums) total.merge(s);
    sp->sums.assign(1, total);
    sp->scale = klScale(total);
    if (!sp->scale.defined) return finishSplit(i, sp, bytes);
    sp->remaining.store(sp->kl.size(), std::memory_order_relaxed);
    for (size_t k = 0; k < sp->kl.size(); ++k) {
      queue_.push([this, i, k, n, sp, bytes] { secondPass(i, k, n, sp, bytes); }, true);
    }
  }

  void secondPass(size_t i, size_t c, uint64_t n, const std::shared_ptr<SplitPair>& sp,
                  uint64_t bytes) {
    const uint64_t begin = c * kChunkValues, end = std::min(n, begin + kChunkValues);
    sp->kl[c] = sumKl(sp->scale, *sp->left, *sp->right, begin, end);
    if (sp->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    finishSplit(i, sp, bytes);
  }

  void finishSplit(size_t i, const std::shared_ptr<SplitPair>& sp, uint64_t bytes) {
    KlSums kl;
    for (const KlSums& k : sp->kl) kl.merge(k);
    CompareRow& row = report_.rows[i];
    row.metrics = finishMetrics(sp->sums[0], sp->scale, kl);
    judgeTensors(row, sp->sums[0], report_.thresholds);
    checkShrank(row, *sp->left, *sp->right, *pairs_[i].left, *pairs_[i].right);
    sp->left.reset();  // unmap now, not when the last task copy goes
    sp->right.reset();
    done(bytes);
  }

  // A file that shrank while read gave zeros past its new end: the metrics are not the
  // file's, so the row is an error naming it.
  static void checkShrank(CompareRow& row, const TensorData& left, const TensorData& right,
                          const TensorEntry& left_entry, const TensorEntry& right_entry) {
    if (!left.shrank() && !right.shrank()) return;
    row.kind = RowKind::kError;
    row.failed = false;
    row.metrics = nanMetrics();
    row.note = (left.shrank() ? left_entry.path : right_entry.path) +
               ": the file shrank while it was read";
  }

  void done(uint64_t bytes) {
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    progress_.add(1, bytes);
  }

 private:
  CompareReport& report_;
  const std::vector<Pair>& pairs_;
  TaskQueue& queue_;
  ProgressBar& progress_;
  // relaxed: read after TaskQueue::run joined every thread.
  std::atomic<uint64_t> bytes_{0};
};

void summarize(CompareReport& report) {
  for (size_t i = 0; i < report.rows.size(); ++i) {
    const CompareRow& r = report.rows[i];
    switch (r.kind) {
      case RowKind::kLeftOnly:
        ++report.left_only;
        continue;
      case RowKind::kRightOnly:
        ++report.right_only;
        continue;
      case RowKind::kError:
        ++report.errors;
        if (r.left_op != "*" && r.right_op != "*") ++report.pairs;
        continue;
      default:
        ++report.pairs;
    }
    if (r.failed) {
      ++report.failed;
      if (!report.first_failure) report.first_failure = i;
    }
  }
}

}  // namespace

void compareTrees(const DumpTree& left, const DumpTree& right, const NameMap& map, unsigned jobs,
                  std::ostream& progress_out, bool draw_progress, CompareReport& report) {
  const std::vector<Pair> pairs = matchTrees(left, right, map);
  report.rows.clear();
  report.rows.reserve(pairs.size());
  for (const Pair& p : pairs) report.rows.push_back(rowFor(p));
  {
    ProgressBar progress(progress_out, draw_progress, pairs.size());
    TaskQueue queue;
    PairRunner runner(report, pairs, queue, progress);
    for (size_t i = 0; i < pairs.size(); ++i) queue.push([&runner, i] { runner.run(i); }, false);
    queue.run(jobs);
    progress.stop();
    report.bytes_read = runner.bytesRead();
  }
  summarize(report);
}

}  // namespace dumpd::tools
