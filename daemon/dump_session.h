// One dump session: the client's ring, its job writer, and the session thread that sets it up
// and then drains the ring. Created by a Connection when a Hello passes the cheap checks; it
// reports to its SessionOwner (the connection) and takes time, the dump root's file system
// and the ring from SessionContext::env (daemon/session_env.h), so a test can run one with a
// fake clock, a memory file system and a ring of its own, without a socket or a process.
//
// Threading:
//   * io thread: start(), requestStop(), addFlushWait(), status (fillStatus, addTotals).
//     Status reads only atomics and immutable snapshots: the io thread never waits on a lock
//     a session or writer thread holds across work (a Snapshot's lock covers a pointer copy).
//   * session thread: set-up (config, filter, ring, directories: all off the io thread),
//     then the drain loop, then finish. It reports to the io thread only by posting.
//   * writer threads: write records through the RingDrain (see ring_drain.h).
// Lifetime: shared_ptr; the io thread joins the session thread in onThreadDone(), so the
// destructor never joins and may run on any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/byte_budget.h"
#include "base/mutex.h"
#include "base/snapshot.h"
#include "daemon/daemon_settings.h"
#include "daemon/job_accounts.h"
#include "daemon/log_limiter.h"
#include "daemon/recorder_budgets.h"
#include "daemon/ring_drain.h"
#include "daemon/runtime_selection.h"
#include "daemon/session_env.h"
#include "daemon/session_owner.h"
#include "daemon/session_setup.h"
#include "ipc/asio.h"
#include "proto/dumpd.pb.h"
#include "storage/writer/writer_pool.h"

namespace dumpd::daemon {

// The (root identity, rank, net) keys of live sessions. Thread-safe; the lock is held only for
// the set operation itself.
class ClaimRegistry {
 public:
  bool claim(const std::string& key);
  void release(const std::string& key);

 private:
  Mutex mu_;
  std::set<std::string> keys_ GUARDED_BY(mu_);
};

// What a session uses of the server.
struct SessionContext {
  asio::io_context& io;
  storage::WriterPool& pool;
  ClaimRegistry& claims;
  DaemonSettings settings;  // a copy: SIGHUP changes apply to new sessions
  SessionEnv env;           // clock, dump roots, rings
  // Shared by every session of the daemon (null: each session has its own).
  std::shared_ptr<JobAccounts> accounts;             // job_quota_bytes and journal_bytes
  std::shared_ptr<RecorderBudgets> recorder_memory;  // recorder_memory_bytes, per uid
};

class DumpSession : public std::enable_shared_from_this<DumpSession> {
 public:
  enum class State : uint8_t { kSetup, kActive, kDraining, kClosed };

  DumpSession(SessionContext ctx, std::weak_ptr<SessionOwner> owner, uint64_t id, PeerIdentity peer,
              v1::Hello hello, UniqueFd ring_fd, UniqueFd root_fd);
  ~DumpSession();

  // io thread: starts the session thread.
  void start();
  // Any thread: the session takes no new records (the ring's closing flag tells the client),
  // writes every record committed before, and gives up on a client still inside a record at
  // `deadline` (a time of ctx.env.clock).
  void requestStop(TimePoint deadline);

  // The client's connection ended without a Goodbye (it was killed or crashed): the flight
  // recorder's "crash" trigger applies. Any thread; call before requestStop().
  void noteProducerLost() { producer_lost_.store(true); }
  // The client said Goodbye: however it exits afterwards, it was not lost.
  void noteGoodbye() { goodbye_.store(true); }
  // dumpd is shutting down (SIGTERM): the session ends by the deadline, so the flight
  // recorder writes nothing more (no trigger fires at the end).
  void noteShutdown() { shutdown_.store(true); }
  // A manual flight recorder trigger (dumpctl trigger): the session thread fires it soon.
  // Any thread.
  void requestTrigger(std::string reason);
  // The info lines operators' accepted commands cause (selection changes, manual triggers):
  // 5 per 10 s a session, like its warnings (docs/operations.md); the rest are counted and
  // said in one line.
  void logCommand(const std::string& line);
  // dumpctl control (io thread): checks and applies `change` requested by `uid`, sends it to
  // the client (which switches at its next step mark), and queues its journal line. Returns
  // what the operator is told, or why it was refused (the job keeps its selection).
  // `uid` nullopt: dumpd changes it itself, for `reason`.
  Result<std::string> control(const v1::ControlChange& change, std::optional<uint32_t> uid,
                              std::string_view reason = {});

  // io thread. False when too many flushes are outstanding (a broken or hostile client).
  bool addFlushWait(uint64_t sequence, uint64_t token);
  bool finished() const { return finished_; }

  // io thread: atomics and Snapshots only (no lock held across anything but a pointer copy).
  void fillStatus(v1::SessionStatus* out) const;
  void addTotals(v1::Counts* totals) const;
  uint64_t writeErrors() const;
  const PeerIdentity& peer() const { return peer_; }
  uint64_t id() const { return id_; }
  uint32_t rank() const { return hello_.rank(); }
  // The job's net_name once set-up is done (empty before).
  std::string netName() const;
  // Why a manual trigger cannot be taken now (no flight recorder, "manual" not among its
  // triggers, stopped after max_triggers, not set up yet); empty when it can. io thread.
  std::string triggerRefusal() const;
  // The dump path and its free bytes as last measured by the session thread (nothing when
  // the session is not set up yet).
  std::optional<std::pair<std::string, uint64_t>> disk() const;

 private:
  struct Info {  // published once set-up succeeded
    std::string net_name;
    std::string path;
    std::string producer;
    std::string ms_format;
  };

  void run();  // session thread
  bool setUp();
  void drainLoop();
  void failSetup(v1::Error::Code code, const std::string& message);
  void postError(v1::Error::Code code, const std::string& message);
  // The client's ring is corrupt: note, log, tell the client; the drain loop then returns.
  void endCorrupt(const std::string& message);
  void onRecordsDone();         // any thread
  void checkFlushes();          // io thread
  void onThreadDone();          // io thread
  void refreshFreeBytes();      // session thread
  bool producerExited() const;  // session thread
  void takeOperatorRequests();  // session thread: dumpctl trigger, control journal lines
  // The flight recorder stopped (max_triggers): the client stops copying what it recorded.
  void recorderStopped();  // io thread

  SessionContext ctx_;
  const std::weak_ptr<SessionOwner> owner_;
  const uint64_t id_;
  const PeerIdentity peer_;
  const v1::Hello hello_;
  UniqueFd ring_fd_;  // handed to set-up
  UniqueFd root_fd_;
  // The client process (pidfd_open of its SO_PEERCRED pid; invalid where unsupported): once
  // it has exited, a reservation it left open will never be committed.
  UniqueFd producer_pidfd_;
  const TimePoint started_;  // ctx_.env.clock
  std::thread thread_;

  // Published by the session thread with a seq_cst store once set-up is done; read by the
  // io thread (status) and requestStop before they touch drain_.
  std::atomic<bool> ready_{false};
  std::shared_ptr<RingDrain> drain_;
  Snapshot<Info> info_;
  std::string claimed_key_;  // session thread
  std::atomic<State> state_{State::kSetup};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> stop_deadline_ns_{INT64_MAX};  // ctx_.env.clock, min of requests
  std::atomic<uint64_t> free_bytes_{0};
  std::atomic<bool> have_free_bytes_{false};
  std::atomic<uint32_t> flush_waiting_{0};
  std::atomic<bool> producer_lost_{false};
  std::atomic<bool> goodbye_{false};
  std::atomic<bool> shutdown_{false};
  std::atomic<bool> operator_pending_{false};
  LogLimiter command_log_{5, std::chrono::seconds(10)};
  Mutex trigger_mu_;
  std::string trigger_reason_ GUARDED_BY(trigger_mu_);
  bool trigger_requested_ GUARDED_BY(trigger_mu_) = false;
  // Set up before ready_ is published; then read-only (the object is thread-safe).
  std::shared_ptr<RuntimeSelection> selection_;

  // io thread.
  struct FlushWait {
    uint64_t sequence;
    uint64_t token;
  };
  std::vector<FlushWait> flush_waits_;
  bool finished_ = false;
};

}  // namespace dumpd::daemon
