// Names the calling thread (what top -H, /proc/PID/task/*/comm and profilers show), so a
// node's operator and bench/node_bench.py can tell dumpd's threads apart.
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace dumpd {

// Linux keeps 15 bytes of a thread name; longer names are cut there. Best effort: a failure
// only leaves the inherited name.
inline void setThreadName(std::string_view name) {
  const std::string cut(name.substr(0, 15));
  (void)::pthread_setname_np(::pthread_self(), cut.c_str());
}

}  // namespace dumpd
