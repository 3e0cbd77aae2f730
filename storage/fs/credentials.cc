#include "storage/fs/credentials.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dumpd::storage {
namespace {

// The raw system calls change the calling thread only (see the header); the glibc wrappers
// of setgroups() would change every thread of the daemon.
int setThreadGroups(const std::vector<gid_t>& groups) {
  return static_cast<int>(::syscall(SYS_setgroups, groups.size(), groups.data()));
}

// setfsuid/setfsgid return the previous value and report no error; asking again with an
// invalid id (-1) changes nothing and returns the current one, which tells whether the switch
// took effect.
uid_t threadFsuid() { return static_cast<uid_t>(::syscall(SYS_setfsuid, -1)); }
gid_t threadFsgid() { return static_cast<gid_t>(::syscall(SYS_setfsgid, -1)); }

bool setThreadFsuid(uid_t uid) {
  (void)::syscall(SYS_setfsuid, uid);
  return threadFsuid() == uid;
}

bool setThreadFsgid(gid_t gid) {
  (void)::syscall(SYS_setfsgid, gid);
  return threadFsgid() == gid;
}

// What the thread runs with now. `own` is its state outside any scope, read at first use;
// `current` points at `own` or at the Credentials of the innermost scope that switched.
struct ThreadState {
  Credentials own;
  const Credentials* current = nullptr;
};

ThreadState& threadState() {
  thread_local ThreadState state;
  if (state.current == nullptr) {
    state.own = currentThreadCredentials();
    state.current = &state.own;
  }
  return state;
}

bool same(const Credentials* a, const Credentials* b) { return a == b || *a == *b; }

[[noreturn]] void dieRestoring(const Credentials& from, const Credentials& to, const char* why) {
  std::fprintf(stderr,
               "dumpd: cannot give up the credentials %s (back to %s: %s); a thread must never "
               "keep a client's credentials, aborting\n",
               describe(from).c_str(), describe(to).c_str(), why);
  std::abort();
}

// Switches the thread from `from` back to `to`: uid first (fsuid 0 brings back the
// capabilities), then gid, then groups. Aborts on failure.
void restore(const Credentials& from, const Credentials& to) {
  if (from.uid != to.uid && !setThreadFsuid(to.uid)) {
    dieRestoring(from, to, "setfsuid did not take effect");
  }
  if (from.gid != to.gid && !setThreadFsgid(to.gid)) {
    dieRestoring(from, to, "setfsgid did not take effect");
  }
  if (from.groups != to.groups && setThreadGroups(to.groups) != 0) {
    dieRestoring(from, to, std::strerror(errno));
  }
}

Error switchError(const Credentials& to, std::string what) {
  return makeError(ErrorCode::kPermission, "cannot act as " + describe(to) + ": " + what);
}

}  // namespace

std::string describe(const Credentials& c) {
  std::string out = "uid " + std::to_string(c.uid) + " gid " + std::to_string(c.gid) + " groups [";
  for (size_t i = 0; i < c.groups.size(); ++i) {
    if (i) out.push_back(',');
    out.append(std::to_string(c.groups[i]));
  }
  out.push_back(']');
  return out;
}

Credentials currentThreadCredentials() {
  Credentials c;
  c.uid = threadFsuid();
  c.gid = threadFsgid();
  // The list may not change between the two calls: only this thread changes its own groups.
  long n = ::syscall(SYS_getgroups, 0, nullptr);
  if (n > 0) {
    c.groups.resize(static_cast<size_t>(n));
    n = ::syscall(SYS_getgroups, n, c.groups.data());
    c.groups.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  return c;
}

Status ScopedCredentials::enter(const Credentials* creds) {
  if (entered_ != nullptr) {
    return makeError(ErrorCode::kInternal, "ScopedCredentials entered twice");
  }
  if (creds == nullptr) return {};
  ThreadState& t = threadState();
  const Credentials& from = *t.current;
  entered_ = creds;
  if (same(&from, creds)) return {};  // nested, or already these: nothing to restore either
  // Groups, gid, then uid: the uid switch drops the capabilities the other two need.
  const bool groups = from.groups != creds->groups;
  const bool gid = from.gid != creds->gid;
  if (groups && setThreadGroups(creds->groups) != 0) {
    return switchError(*creds, std::string("setgroups: ") + std::strerror(errno));
  }
  if (gid && !setThreadFsgid(creds->gid)) {
    if (groups) restore(Credentials{from.uid, from.gid, creds->groups}, from);
    return switchError(*creds, "setfsgid did not take effect (no CAP_SETGID?)");
  }
  if (from.uid != creds->uid && !setThreadFsuid(creds->uid)) {
    restore(Credentials{from.uid, creds->gid, creds->groups}, from);
    return switchError(*creds, "setfsuid did not take effect (no CAP_SETUID?)");
  }
  previous_ = &from;
  t.current = creds;
  return {};
}

ScopedCredentials::~ScopedCredentials() {
  if (previous_ == nullptr) return;
  ThreadState& t = threadState();
  if (t.current != entered_) {
    std::fprintf(stderr, "dumpd: credential scopes of a thread ended out of order, aborting\n");
    std::abort();
  }
  restore(*entered_, *previous_);
  t.current = previous_;
}

}  // namespace dumpd::storage
