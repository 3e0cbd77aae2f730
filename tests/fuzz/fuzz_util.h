// Helpers shared by the fuzz targets.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <google/protobuf/stubs/logging.h>

// Checks an invariant: a violation prints what broke and aborts, which libFuzzer reports as
// a crash (saving the input) and the replay driver as a failed test. Unlike assert(), it
// stays on in release builds.
#define FUZZ_CHECK(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: fuzz invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace dumpd::fuzz {

// Drops protobuf's log lines (one per string field with invalid UTF-8, which fuzz inputs hit
// constantly); parse results are what the targets check. Call at the top of each input.
inline void quietProtobuf() {
  static const bool once = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)once;
}

}  // namespace dumpd::fuzz
