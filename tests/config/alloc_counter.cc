// Replaces the global operator new/delete with counting versions. Kept in its own file so the
// compiler cannot inline the replacements into callers (g++ 12 then reports a false
// -Wmismatched-new-delete).
#include "tests/config/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace dumpd::testing {

long allocationCount() { return g_allocations.load(std::memory_order_relaxed); }

}  // namespace dumpd::testing
