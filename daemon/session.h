// One client connection. A connection that starts with Hello becomes a dump session: it owns
// the client's ring, a consumer thread that decodes records and hands them to the shared
// writer pool, and the job's storage writer. A connection that only asks for status stays a
// plain request/reply connection.
//
// Threading: socket I/O and every member not marked otherwise run on the io_context thread.
// The consumer thread owns ring_ reads; pool threads complete records through mark_done(),
// which takes mu_. Counters are atomics read by status.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config/daemon_settings.h"
#include "config/dump_plan.h"
#include "config/filter.h"
#include "ipc/asio.h"
#include "ipc/doorbell.h"
#include "ipc/frame.h"
#include "ipc/op_codec.h"
#include "ipc/shm_ring.h"
#include "ipc/unique_fd.h"
#include "proto/dumpd.pb.h"
#include "storage/job_writer.h"
#include "storage/writer_pool.h"

namespace dumpd::daemon {

class Server;

struct SessionCounters {
  std::atomic<uint64_t> records{0};
  std::atomic<uint64_t> tensors_received{0};
  std::atomic<uint64_t> tensors_written{0};
  std::atomic<uint64_t> tensors_dropped{0};
  std::atomic<uint64_t> tensors_failed{0};
  std::atomic<uint64_t> bytes_written{0};
  std::atomic<uint64_t> tensors_filtered{0};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  using Socket = asio::local::stream_protocol::socket;
  Session(Server& server, Socket socket, uint64_t id);
  ~Session();

  void start();
  // Daemon shutdown: drain what the client committed, then close.
  void requestStop();
  void fillStatus(v1::SessionStatus* out) const;
  bool isDumpSession() const { return hello_done_; }
  // Holds a conflict-key claim in the server (set once registerSession succeeded).
  bool registered() const { return registered_; }
  uint64_t id() const { return id_; }
  const std::string& conflictKey() const { return conflict_key_; }
  std::string rootPath() const { return plan_.path; }
  void addTotals(v1::Counts* totals) const;
  uint64_t writeErrors() const;

 private:
  // Socket side (io thread).
  void doRead();
  void onFrame(v1::Envelope& env);
  void handleHello(const v1::Hello& hello);
  void handleFlush(const v1::Flush& flush);
  void peerClosed();
  void send(const v1::Envelope& env);
  void doWrite();
  void sendErrorAndClose(v1::Error::Code code, const std::string& message);
  void closeSocket();
  void checkFlushes();
  void onConsumerDone();

  // Consumer thread.
  void consume();
  bool handleRecord(const ipc::RingConsumer::Record& r);
  bool handleOp(const ipc::RingConsumer::Record& r);
  bool handleControl(const ipc::RingConsumer::Record& r);
  void completeStep();
  // Copies the kernel entries that matched nothing so far to unused_kernels_ (for status).
  void publishUnusedKernels();
  void waitIdle();
  void failFromConsumer(v1::Error::Code code, const std::string& message);

  // Any thread.
  // Queues a record for in-order release; returns its slot for markDone.
  uint64_t pushPending(uint64_t end, uint64_t sequence, bool done);
  void markDone(uint64_t slot);
  // REQUIRES: mu_ held. Releases the done prefix of pending_ to the producer.
  void advanceLocked();
  void noteError(const std::string& message);
  // noteError + a log line, rate-limited per session.
  void warnLimited(const std::string& message);

  Server& server_;
  Socket socket_;
  const uint64_t id_;
  ipc::FrameDecoder decoder_;
  std::vector<ipc::UniqueFd> fds_;
  std::deque<std::string> write_queue_;
  bool writing_ = false;
  bool closing_ = false;  // socket closes once the write queue empties
  bool socket_closed_ = false;
  bool hello_done_ = false;
  bool registered_ = false;
  struct FlushWait {
    uint64_t sequence;
    uint64_t token;
  };
  std::vector<FlushWait> flush_waits_;

  // Session identity (set by handleHello, then read-only).
  pid_t pid_ = 0;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  uint32_t rank_ = 0;
  uint32_t device_ = 0;
  std::string producer_;
  std::string conflict_key_;
  config::DumpPlan plan_;
  std::optional<config::Filter> filter_;  // consumer thread only
  std::optional<ipc::RingConsumer> ring_;
  ipc::Doorbell data_bell_;
  ipc::Doorbell space_bell_;
  ipc::Doorbell stop_bell_;  // wakes the consumer for shutdown / peer close
  std::unique_ptr<storage::JobWriter> writer_;
  std::thread consumer_;
  bool workers_idle_ = true;  // from the settings when the session opened
  std::chrono::steady_clock::time_point started_;

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> consumer_done_{false};
  std::atomic<uint32_t> graph_id_{0};
  std::atomic<uint32_t> iteration_{0};
  SessionCounters counters_;
  std::atomic<uint64_t> done_sequence_{0};  // every record up to it is finished
  std::atomic<uint32_t> flush_waiting_{0};  // flush_waits_.size(), for pool threads

  // In-order release of ring space (mu_).
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  struct Pending {
    uint64_t end;
    uint64_t sequence;
    bool done;
  };
  std::deque<Pending> pending_;
  uint64_t first_pending_slot_ = 0;  // slot number of pending_.front()
  std::string last_error_;
  std::string state_ = "handshake";
  std::vector<std::string> unused_kernels_;
  std::chrono::steady_clock::time_point warn_window_start_{};
  int warn_count_ = 0;
  uint64_t warn_suppressed_ = 0;

  // Consumer-thread state.
  bool have_step_ = false;
  uint32_t step_graph_ = 0;
  uint32_t step_iteration_ = 0;
  uint64_t dropped_reported_ = 0;
};

}  // namespace dumpd::daemon
