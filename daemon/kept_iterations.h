// What the flight recorder keeps: the last `steps` iterations' records, oldest first, within
// `max_bytes`. An item is whatever the drain needs to write a record later (its decoded op and
// ring slot); the caller releases the items this class hands back (discarded) or writes them
// (taken by a trigger).
//
// Rules (docs/recorder.md): a new iteration discards those that are no longer among the last
// `steps`; a record that would pass `max_bytes` discards the oldest iterations first; when the
// current iteration alone does not fit, its record is handed back at once and the iteration
// counts as not kept whole. Each record also costs daemon memory (its decoded descriptor),
// charged to a budget shared with other sessions (its uid's share of recorder_memory_bytes): a
// record the budget refuses discards this session's own oldest iterations first (counted, and
// their numbers remembered for the next trigger's journal line), then is handed back.
//
// Thread-safety: none; the session thread owns it (the shared budget is lock-free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "base/byte_budget.h"

namespace dumpd::daemon {

template <typename Item>
class KeptIterations {
 public:
  struct Iteration {
    uint32_t number = 0;
    std::vector<Item> items;
    uint64_t bytes = 0;
    uint64_t memory = 0;  // charged to the shared budget
    bool whole = true;    // no record of it was discarded
  };

  // `max_records`: records kept at most, whatever their bytes (each costs daemon memory).
  // `memory`: the budget every session's kept records share (null: none).
  KeptIterations(uint32_t steps, uint64_t max_bytes, uint64_t max_records = UINT64_MAX,
                 ByteBudget* memory = nullptr)
      : steps_(steps), max_bytes_(max_bytes), max_records_(max_records), memory_(memory) {}
  ~KeptIterations() { releaseMemory(memory_charged_); }
  KeptIterations(const KeptIterations&) = delete;
  KeptIterations& operator=(const KeptIterations&) = delete;

  // The shared budget (before anything is kept).
  void setMemoryBudget(ByteBudget* memory) {
    if (records_ == 0) memory_ = memory;
  }

  // Keeps `item` (`bytes` of ring, `memory` of daemon memory) of iteration `number`. Returns
  // the items discarded to make room, oldest first (`item` itself when the current iteration
  // alone does not fit).
  std::vector<Item> add(uint32_t number, Item item, uint64_t bytes, uint64_t memory = 0) {
    std::vector<Item> out;
    if (kept_.empty() || kept_.back().number != number) {
      kept_.push_back(Iteration{number, {}, 0, 0, true});
      while (kept_.size() > steps_) discardFront(out);
    }
    const auto full = [&] { return bytes_ + bytes > max_bytes_ || records_ + 1 > max_records_; };
    while (full() && kept_.size() > 1) discardFront(out);
    bool charged = !full() && charge(memory);
    while (!charged && !full() && kept_.size() > 1) {
      giveUpForMemory(kept_.front().number);
      discardFront(out);
      charged = charge(memory);
    }
    Iteration& current = kept_.back();
    if (!charged) {
      if (!full()) ++refused_for_memory_;
      if (current.whole) ++not_whole_;
      current.whole = false;
      out.push_back(std::move(item));
      return out;
    }
    current.items.push_back(std::move(item));
    current.bytes += bytes;
    current.memory += memory;
    bytes_ += bytes;
    ++records_;
    return out;
  }

  // Discards the oldest iteration other than the current one (the ring needs the space).
  // Empty when there is none.
  std::vector<Item> discardOldest() {
    std::vector<Item> out;
    if (kept_.size() > 1) discardFront(out);
    return out;
  }

  // Discards what is kept of the current (newest) iteration, which then counts as not kept
  // whole; its later records are kept again (the ring needs the space now).
  std::vector<Item> discardNewest() {
    std::vector<Item> out;
    if (kept_.empty() || kept_.back().items.empty()) return out;
    Iteration& back = kept_.back();
    for (Item& i : back.items) out.push_back(std::move(i));
    records_ -= back.items.size();
    back.items.clear();
    bytes_ -= back.bytes;
    back.bytes = 0;
    releaseMemory(back.memory);
    back.memory = 0;
    if (back.whole) ++not_whole_;
    back.whole = false;
    return out;
  }

  // Calls f(number, item) for each item, oldest iteration first, until f returns false.
  template <typename F>
  void forEach(F&& f) const {
    for (const Iteration& it : kept_) {
      for (const Item& item : it.items) {
        if (!f(it.number, item)) return;
      }
    }
  }

  // The newest iteration (the one being recorded), or null.
  const Iteration* newest() const { return kept_.empty() ? nullptr : &kept_.back(); }

  // Hands every kept iteration over, oldest first (a trigger writes them).
  std::vector<Iteration> takeAll() {
    std::vector<Iteration> out(std::make_move_iterator(kept_.begin()),
                               std::make_move_iterator(kept_.end()));
    kept_.clear();
    bytes_ = 0;
    records_ = 0;
    releaseMemory(memory_charged_);
    return out;
  }

  size_t iterations() const { return kept_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t records() const { return records_; }
  // Daemon memory this session's kept records hold of the shared budget.
  uint64_t memory() const { return memory_charged_; }
  // Records handed back because the shared budget was used up.
  uint64_t refusedForMemory() const { return refused_for_memory_; }
  // Iterations any of whose records were discarded to stay within max_bytes.
  uint64_t notKeptWhole() const { return not_whole_; }
  // Iterations discarded whole to make room in the shared memory budget.
  uint64_t discardedForMemory() const { return discarded_for_memory_; }
  // The numbers of the last `steps` of those (a trigger says why it did not write them), and
  // forgets them.
  std::vector<uint32_t> takeGivenUpForMemory() {
    std::vector<uint32_t> out(given_up_.begin(), given_up_.end());
    given_up_.clear();
    return out;
  }

 private:
  void discardFront(std::vector<Item>& out) {
    Iteration& front = kept_.front();
    for (Item& i : front.items) out.push_back(std::move(i));
    records_ -= front.items.size();
    bytes_ -= front.bytes;
    releaseMemory(front.memory);
    kept_.pop_front();
  }

  void giveUpForMemory(uint32_t number) {
    ++discarded_for_memory_;
    given_up_.push_back(number);
    while (given_up_.size() > steps_) given_up_.pop_front();
  }

  bool charge(uint64_t memory) {
    if (memory_ != nullptr && !memory_->tryCharge(memory)) return false;
    memory_charged_ += memory;
    return true;
  }
  void releaseMemory(uint64_t memory) {
    if (memory_ != nullptr) memory_->release(memory);
    memory_charged_ -= memory;
  }

  const uint32_t steps_;
  const uint64_t max_bytes_;
  const uint64_t max_records_;
  ByteBudget* memory_;
  std::deque<Iteration> kept_;
  uint64_t bytes_ = 0;
  uint64_t records_ = 0;
  uint64_t not_whole_ = 0;
  uint64_t memory_charged_ = 0;
  uint64_t refused_for_memory_ = 0;
  uint64_t discarded_for_memory_ = 0;
  std::deque<uint32_t> given_up_;  // at most steps_
};

}  // namespace dumpd::daemon
