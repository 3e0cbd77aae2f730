// The scheduling policy of the daemon's worker threads (the writers, each session's drain):
// the settings' worker_priority "idle" makes them SCHED_IDLE, so a busy node's training
// processes always run first.
#pragma once

namespace dumpd::daemon {

// Applies SCHED_IDLE (`idle`) or SCHED_OTHER to the calling thread. Failure (a policy the
// thread may not take) is logged at debug level and leaves the thread's policy as it was.
void applyWorkerPriority(bool idle);

}  // namespace dumpd::daemon
