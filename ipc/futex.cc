#include "ipc/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace dumpd::ipc {

void futexWait(std::atomic<uint32_t>& word, uint32_t expected, int timeout_ms) {
  if (timeout_ms < 0) timeout_ms = 0;
  timespec ts{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
  // Not FUTEX_PRIVATE_FLAG: the word lives in a MAP_SHARED memfd seen by two processes.
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
                  0);
}

void futexBumpAndWake(std::atomic<uint32_t>& word) {
  // seq_cst: ordered after the caller's seq_cst publication (head or tail) and before the
  // wake, so a sleeper that re-reads the word after waking sees the publication too.
  word.fetch_add(1, std::memory_order_seq_cst);
  (void)::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr,
                  nullptr, 0);
}

}  // namespace dumpd::ipc
