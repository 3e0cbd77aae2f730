#include "daemon/worker_priority.h"

#include <errno.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <string.h>

namespace dumpd::daemon {

void applyWorkerPriority(bool idle) {
  sched_param p{};
  // Per thread (0 = the caller). Lowering the policy needs no privilege, nor does going
  // back to SCHED_OTHER at nice 0 for root; failure only means the worker keeps its policy.
  const int policy = idle ? SCHED_IDLE : SCHED_OTHER;
  if (::sched_getscheduler(0) == policy) return;
  if (::sched_setscheduler(0, policy, &p) != 0) {
    spdlog::debug("{} unavailable: {}", idle ? "SCHED_IDLE" : "SCHED_OTHER", strerror(errno));
  }
}

}  // namespace dumpd::daemon
