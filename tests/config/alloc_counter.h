// Counts calls to the global operator new in a test binary that links alloc_counter.cc.
#pragma once

namespace dumpd::testing {

long allocationCount();

}  // namespace dumpd::testing
