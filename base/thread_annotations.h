// Clang's thread-safety attributes, as macros that vanish for other compilers.
//
// Annotate what a lock protects and clang checks every access at compile time
// (-Wthread-safety, a CI stage: scripts/check-thread-safety):
//
//   class Queue {
//     Mutex mu_;
//     std::deque<Item> items_ GUARDED_BY(mu_);   // touching items_ without mu_ is an error
//     void pushLocked(Item i) REQUIRES(mu_);       // callers must hold mu_
//     void push(Item i) EXCLUDES(mu_);             // callers must not (it locks mu_ itself)
//   };
//
// Lock order between two mutexes of one class is declared on the first one taken:
// `Mutex a_ ACQUIRED_BEFORE(b_);`. The vocabulary is clang's (see its ThreadSafetyAnalysis
// documentation); the annotated lock types are in base/mutex.h.
#pragma once

#if defined(__clang__) && !defined(SWIG)
#define DUMPD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DUMPD_THREAD_ANNOTATION(x)
#endif

// A type that is a lock.
#define CAPABILITY(x) DUMPD_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a lock for its lifetime.
#define SCOPED_CAPABILITY DUMPD_THREAD_ANNOTATION(scoped_lockable)

// Data read or written only with the lock held.
#define GUARDED_BY(x) DUMPD_THREAD_ANNOTATION(guarded_by(x))
// The data a pointer points to is read or written only with the lock held.
#define PT_GUARDED_BY(x) DUMPD_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this lock is taken before (after) the named ones when both are held.
#define ACQUIRED_BEFORE(...) DUMPD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) DUMPD_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// The caller must hold (must not hold) the lock.
#define REQUIRES(...) DUMPD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) DUMPD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// The function takes (releases) the lock and returns (returns without) it.
#define ACQUIRE(...) DUMPD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) DUMPD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) DUMPD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// The function returns a reference to the named lock.
#define RETURN_CAPABILITY(x) DUMPD_THREAD_ANNOTATION(lock_returned(x))

// Tells the analysis the lock is held here (checked at run time by nothing: use sparingly).
#define ASSERT_CAPABILITY(x) DUMPD_THREAD_ANNOTATION(assert_capability(x))

// Turns the analysis off for one function; every use says why in a comment.
#define NO_THREAD_SAFETY_ANALYSIS DUMPD_THREAD_ANNOTATION(no_thread_safety_analysis)
