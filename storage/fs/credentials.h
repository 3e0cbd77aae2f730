// Acting with a client's credentials on one thread (the fix of the confused deputy: the root
// daemon must never use its own rights on a client's behalf).
//
// Linux keeps credentials per thread; glibc hides that by broadcasting set*id() and
// setgroups() to every thread of the process. ScopedCredentials calls the raw system calls,
// which change the calling thread only: setgroups, setfsgid and setfsuid. The kernel checks
// every path lookup and every created entry against the file-system uid/gid and the groups,
// and the file-system uid/gid become the owner of what is created. Leaving fsuid 0 also drops
// CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and CAP_FSETID from the
// thread's effective set (they come back when fsuid returns to 0): without that a root thread
// would still pass every permission check. CAP_SETUID and CAP_SETGID stay, which is what lets
// the thread switch back.
//
// Cost: entering and leaving a scope that changes everything is 10 system calls (3 switches
// and 2 checks in, the same out); tests/storage/credentials_test.cc measures it
// (CredentialsCostTest). What equals the thread's current state is not switched, and a scope
// entered with the credentials the thread already runs with (a nested scope) costs nothing.
//
// REQUIRES (process-wide): nothing else changes a thread's credentials while it uses
// ScopedCredentials: no glibc setuid()/setgid()/setgroups()/setfsuid() after start-up (they
// would overwrite a thread inside a scope, and the thread's cached state would be wrong).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.h"

namespace dumpd::storage {

struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups

  bool operator==(const Credentials&) const = default;
};

// "uid 1234 gid 1234 groups [4321]", for messages.
std::string describe(const Credentials& c);

// The calling thread's credentials as the kernel sees them now (fsuid, fsgid, groups).
Credentials currentThreadCredentials();

// Runs the calling thread with other file-system credentials until the scope ends.
//
//   ScopedCredentials scope;
//   if (Status s = scope.enter(creds); !s) return s;  // nothing changed on error
//   ... openat/mkdirat/renameat as creds ...
//   // destructor: the thread has its previous credentials again
//
// Thread-safety: a scope belongs to the thread that entered it and must end on that thread,
// in LIFO order with other scopes of that thread (it is neither copyable nor movable, so a
// local variable is the only use). Restoring cannot be allowed to fail silently: a thread
// that kept a client's credentials would act for that client in the next session's
// operations, so a failure to restore aborts the process.
class ScopedCredentials {
 public:
  ScopedCredentials() = default;
  ~ScopedCredentials();
  ScopedCredentials(const ScopedCredentials&) = delete;
  ScopedCredentials& operator=(const ScopedCredentials&) = delete;

  // Switches the calling thread to `creds` (null: does nothing). When the thread already runs
  // with equal credentials nothing is switched and nothing will be restored. On error
  // (kPermission: the process may not switch, e.g. it lacks CAP_SETUID/CAP_SETGID) the thread
  // is back to its previous credentials. REQUIRES: not entered yet; `*creds` outlives the
  // scope.
  [[nodiscard]] Status enter(const Credentials* creds);
  [[nodiscard]] Status enter(const Credentials& creds) { return enter(&creds); }

  // True when enter() switched something (the destructor will switch back).
  bool switched() const { return previous_ != nullptr; }

 private:
  const Credentials* entered_ = nullptr;   // what the thread runs with inside the scope
  const Credentials* previous_ = nullptr;  // what the destructor restores; null: nothing
};

}  // namespace dumpd::storage
