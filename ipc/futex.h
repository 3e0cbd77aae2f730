// Wake-ups through 32-bit words in the shared ring (Linux futexes, shared across processes).
//
// Why not eventfds: an fd the peer holds is the peer's to configure. A client could make an
// eventfd blocking and saturate its counter so that the daemon's write(2) never returns.
// FUTEX_WAKE never blocks, and FUTEX_WAIT always has a timeout here, so a hostile peer can at
// worst cause spurious wake-ups of its own session's thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace dumpd::ipc {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

// Sleeps while *word == expected, at most timeout_ms (>= 0). Returns on a wake, a changed
// value, a signal or the timeout; callers re-check their condition.
void futexWait(std::atomic<uint32_t>& word, uint32_t expected, int timeout_ms);
// Bumps *word (so a sleeper about to wait sees a changed value) and wakes every sleeper.
// Never blocks.
void futexBumpAndWake(std::atomic<uint32_t>& word);

}  // namespace dumpd::ipc
