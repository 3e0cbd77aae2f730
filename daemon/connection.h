// One accepted connection: framing, the handshake timeout, a bounded reply queue, and the
// hand-over to a DumpSession when a Hello arrives. A connection without a Hello is a plain
// request/reply connection (status).
//
// Time (the handshake timeout, session stop deadlines) is the server's Clock
// (daemon/clock.h), so a test can expire the handshake by moving a fake clock.
//
// Threading: io thread only. Nothing here blocks: socket reads and writes are non-blocking,
// and every step whose cost the client controls (config parsing, ring mapping, directories)
// runs on the session's own thread (daemon/dump_session.h).
//
// Memory a client can make the daemon hold for one connection is bounded: frames are at most
// 16 MiB before the Hello and 64 KiB after it, and partial frames of all connections share
// the daemon-wide max_pending_frame_bytes budget; replies queue up to kMaxQueuedReplyBytes,
// after which frames are left unread until the client reads its replies. Of the frames dumpd
// sends unasked (SelectionUpdate), at most one waits in the queue: a newer one replaces it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "daemon/clock.h"
#include "daemon/session_env.h"
#include "daemon/session_owner.h"
#include "ipc/asio.h"
#include "ipc/frame.h"
#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

class Server;
class DumpSession;

inline constexpr uint32_t kSessionMaxFrameBytes = 64u << 10;
inline constexpr size_t kMaxQueuedReplyBytes = 1u << 20;

class Connection final : public SessionOwner, public std::enable_shared_from_this<Connection> {
 public:
  using Socket = asio::local::stream_protocol::socket;

  Connection(Server& server, Socket socket, uint64_t id, PeerIdentity peer);

  void start();
  // Refuses the connection: one Error frame, then close (connection limits).
  void refuse(v1::Error::Code code, const std::string& message);
  // SessionOwner (a connection without a session uses send and sendErrorAndClose too).
  void send(const v1::Envelope& env) override;
  // Sends an Error, stops reading, ends the session (if any), then closes.
  void sendErrorAndClose(v1::Error::Code code, const std::string& message) override;
  void sessionFinished() override;
  // Daemon shutdown: a plain connection closes now; a session drains until `deadline`.
  void shutdown(TimePoint deadline);

  uint64_t id() const { return id_; }
  const PeerIdentity& peer() const { return peer_; }
  const std::shared_ptr<DumpSession>& session() const { return session_; }

 private:
  void doRead();
  void onReadable();
  // Handles buffered frames while the reply queue has room. False when the connection ended.
  bool processFrames();
  void onFrame(v1::Envelope& env);
  void handleHello(const v1::Hello& hello);
  void doWrite();
  void popFront();
  // One non-blocking attempt to send what is queued (before a forced close).
  void flushNonBlocking();
  void armIdleTimer();
  void stopSession();
  void closeSocket();
  void maybeDone();
  void settleFrameCharge();

  Server& server_;
  Socket socket_;
  const uint64_t id_;
  const PeerIdentity peer_;
  std::unique_ptr<Timer> idle_timer_;
  ipc::FrameDecoder decoder_;
  std::vector<UniqueFd> fds_;
  uint64_t charged_bytes_ = 0;  // of the server's pending-frame budget
  std::deque<std::string> write_queue_;
  size_t queued_bytes_ = 0;
  uint64_t popped_ = 0;                // frames taken off write_queue_ so far
  std::optional<uint64_t> update_at_;  // the last SelectionUpdate queued (popped_ + index)
  bool writing_ = false;
  bool read_pending_ = false;  // an async_wait for readability is outstanding
  bool closing_ = false;       // no more frames; close once the queue is written
  bool socket_closed_ = false;
  bool done_ = false;  // reported to the server
  std::shared_ptr<DumpSession> session_;
};

}  // namespace dumpd::daemon
