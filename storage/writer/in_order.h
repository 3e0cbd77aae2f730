// Hands items to a sink in the order their tickets were taken, whatever order the threads
// holding them finish in. The writer uses it for statistic.csv rows: the daemon takes a ticket
// per op in the producer's order, writer threads complete them in any order, and the rows
// reach the file in ticket order.
//
// Whoever completes the next ticket releases it, and every ticket after it that is already
// complete, outside the lock; a thread completing a ticket meanwhile only deposits its item
// (the releasing thread picks it up before it returns). So the sink is called by one thread
// at a time, in ticket order, and the lock is never held across it.
//
// Every ticket taken must be completed exactly once, or the items after it are held forever.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "base/mutex.h"

namespace dumpd::storage {

template <typename Item>
class InOrder {
 public:
  // Tickets count from 1 (0 is free for "no ticket").
  uint64_t take() {
    MutexLock lock(&mu_);
    return next_ticket_++;
  }

  // Hands over ticket's item; runs `sink(Item&)` for every item now releasable, unless
  // another thread is releasing (it then releases this item too, before it returns).
  // REQUIRES: `ticket` was taken and not completed yet.
  template <typename Sink>
  void complete(uint64_t ticket, Item item, Sink&& sink) {
    MutexLock lock(&mu_);
    held_.emplace(ticket, std::move(item));
    if (releasing_) return;
    releasing_ = true;
    std::vector<Item> run;
    for (;;) {
      for (auto it = held_.begin(); it != held_.end() && it->first == next_release_;
           it = held_.erase(it)) {
        run.push_back(std::move(it->second));
        ++next_release_;
      }
      if (run.empty()) break;
      lock.unlock();
      for (Item& i : run) sink(i);
      run.clear();
      lock.lock();
    }
    releasing_ = false;
  }

  // Items completed but waiting for an earlier ticket.
  size_t held() const {
    MutexLock lock(&mu_);
    return held_.size();
  }

 private:
  mutable Mutex mu_;
  uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  uint64_t next_release_ GUARDED_BY(mu_) = 1;
  bool releasing_ GUARDED_BY(mu_) = false;
  std::map<uint64_t, Item> held_ GUARDED_BY(mu_);
};

}  // namespace dumpd::storage
