#include "daemon/connection.h"
#include "daemon/session_command.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <optional>

#include "daemon/dump_session.h"
#include "daemon/envelope_utf8.h"
#include "daemon/hello_check.h"
#include "daemon/log_escape.h"
#include "daemon/server.h"
#include "ipc/socket_io.h"

namespace dumpd::daemon {

Connection::Connection(Server& server, Socket socket, uint64_t id, PeerIdentity peer)
    : server_(server),
      socket_(std::move(socket)),
      id_(id),
      peer_(std::move(peer)),
      idle_timer_(server.clock().makeTimer(server.io())) {}

void Connection::start() {
  armIdleTimer();
  doRead();
}

void Connection::refuse(v1::Error::Code code, const std::string& message) {
  server_.peerWarning("connection " + std::to_string(id_) + " (pid " + std::to_string(peer_.pid) +
                      " uid " + std::to_string(peer_.uid) + "): " + escapeForLog(message));
  v1::Envelope env;
  env.mutable_error()->set_code(code);
  env.mutable_error()->set_message(message);
  send(env);
  closing_ = true;
  if (!writing_) closeSocket();
}

void Connection::armIdleTimer() {
  if (session_) return;
  const auto timeout = std::chrono::milliseconds(server_.settings().handshake_timeout_ms);
  idle_timer_->waitUntil(server_.clock().now() + timeout, [weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self || self->session_ || self->socket_closed_) return;
    // Close now, not after the queue is written: a client that reads nothing would otherwise
    // keep its connection (and its slot) forever.
    const std::string message = "no Hello or request within " +
                                std::to_string(self->server_.settings().handshake_timeout_ms) +
                                " ms (handshake_timeout_ms)";
    spdlog::info("connection {}: {}", self->id_, message);
    v1::Envelope env;
    env.mutable_error()->set_code(v1::Error::TIMEOUT);
    env.mutable_error()->set_message(message);  // numbers only: valid UTF-8
    if (auto frame = ipc::encodeFrame(env)) self->write_queue_.push_back(std::move(frame.value()));
    self->flushNonBlocking();
    self->closeSocket();
  });
}

void Connection::doRead() {
  if (socket_closed_ || closing_ || read_pending_) return;
  read_pending_ = true;
  socket_.async_wait(Socket::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       self->read_pending_ = false;
                       if (ec) {
                         if (ec != asio::error::operation_aborted) self->stopSession();
                         self->closeSocket();
                         return;
                       }
                       self->onReadable();
                     });
}

void Connection::onReadable() {
  if (socket_closed_ || closing_) return;
  // One recvmsg per wake-up (64 KiB at most), so one busy client cannot hog the io thread.
  const ssize_t n = ipc::recvWithFds(socket_.native_handle(), decoder_, fds_);
  if (n == -EAGAIN) {
    doRead();
    return;
  }
  if (n <= 0) {
    if (decoder_.buffered() != 0) {
      server_.peerWarning("connection " + std::to_string(id_) + ": closed inside a frame (" +
                          std::to_string(decoder_.buffered()) + " bytes of a partial frame)");
    }
    // No Goodbye came first (that sets closing_): the client died or dropped the session.
    if (session_) session_->noteProducerLost();
    stopSession();
    closeSocket();
    return;
  }
  // Before the Hello a few descriptors are kept, so that a Hello with the wrong number gets
  // checkHello's precise error; after it, none.
  if (fds_.size() > (session_ ? 0 : ipc::kMaxFdsPerMessage)) {
    sendErrorAndClose(v1::Error::PROTOCOL, "unexpected file descriptors");
    return;
  }
  settleFrameCharge();
  if (closing_) return;
  if (processFrames()) doRead();
}

void Connection::settleFrameCharge() {
  const uint64_t buffered = decoder_.buffered();
  if (buffered > charged_bytes_) {
    if (!server_.chargeFrameBytes(buffered - charged_bytes_)) {
      sendErrorAndClose(v1::Error::RESOURCE_EXHAUSTED,
                        "dumpd is receiving too many large frames at once "
                        "(max_pending_frame_bytes); try again");
      return;
    }
  } else if (buffered < charged_bytes_) {
    server_.releaseFrameBytes(charged_bytes_ - buffered);
  }
  charged_bytes_ = buffered;
}

bool Connection::processFrames() {
  while (!closing_ && !socket_closed_) {
    if (queued_bytes_ >= kMaxQueuedReplyBytes) {
      // The client does not read its replies: leave its frames unread until it does
      // (doWrite resumes); the socket's buffer then fills and the client blocks, not us.
      return false;
    }
    auto env = decoder_.next();
    if (!env) {
      sendErrorAndClose(v1::Error::PROTOCOL, env.error().message);
      return false;
    }
    if (!env.value()) break;
    if (!session_) armIdleTimer();
    onFrame(*env.value());
  }
  decoder_.shrinkToFit();
  settleFrameCharge();
  return !closing_ && !socket_closed_;
}

void Connection::onFrame(v1::Envelope& env) {
  switch (env.msg_case()) {
    case v1::Envelope::kHello:
      if (session_) {
        sendErrorAndClose(v1::Error::PROTOCOL, "second Hello on one connection");
        return;
      }
      handleHello(env.hello());
      return;
    case v1::Envelope::kFlush:
      if (!session_) {
        sendErrorAndClose(v1::Error::PROTOCOL, "Flush before Hello");
        return;
      }
      if (!session_->addFlushWait(env.flush().sequence(), env.flush().token())) {
        sendErrorAndClose(v1::Error::PROTOCOL, "more than 1024 flushes outstanding");
      }
      return;
    case v1::Envelope::kStatusRequest: {
      v1::Envelope reply;
      *reply.mutable_status_reply() = server_.status(peer_.uid);
      send(reply);
      return;
    }
    case v1::Envelope::kSessionCommand: {
      if (session_) {
        sendErrorAndClose(v1::Error::PROTOCOL, "a session command on a dump session's connection");
        return;
      }
      CommandOutcome o = runSessionCommand(server_.liveSessions(), peer_, env.session_command());
      if (!o.ok) {
        sendErrorAndClose(o.code, o.message);
        return;
      }
      v1::Envelope reply;
      reply.mutable_session_command_reply()->set_session_id(o.session_id);
      reply.mutable_session_command_reply()->set_message(o.message);
      send(reply);
      return;
    }
    case v1::Envelope::kGoodbye:
      // The client waits for the close: by then the session's last manifest line is written.
      closing_ = true;
      if (session_) session_->noteGoodbye();
      if (session_ && !session_->finished()) {
        stopSession();
      } else if (!writing_) {
        closeSocket();
      }
      return;
    default:
      sendErrorAndClose(v1::Error::PROTOCOL,
                        "unexpected message (field " + std::to_string(env.msg_case()) + ")");
  }
}

void Connection::handleHello(const v1::Hello& h) {
  if (auto bad = checkHello(h, fds_.size())) {
    sendErrorAndClose(bad->code, bad->message);
    return;
  }
  if (server_.stopping()) {
    sendErrorAndClose(v1::Error::SHUTTING_DOWN, "dumpd is shutting down");
    return;
  }
  Result<uint64_t> session_id = server_.admitSession(peer_.uid);
  if (!session_id) {
    sendErrorAndClose(v1::Error::RESOURCE_EXHAUSTED, session_id.error().message);
    return;
  }
  idle_timer_->cancel();
  decoder_.setMaxFrameBytes(kSessionMaxFrameBytes);
  UniqueFd ring = std::move(fds_[kHelloRingFd]);
  UniqueFd root = std::move(fds_[kHelloRootFd]);
  fds_.clear();
  session_ =
      std::make_shared<DumpSession>(server_.sessionContext(), weak_from_this(), session_id.value(),
                                    peer_, h, std::move(ring), std::move(root));
  session_->start();
}

void Connection::send(const v1::Envelope& env) {
  if (socket_closed_) return;
  // A client's bytes in a string field would make the receiver refuse the whole frame.
  std::optional<v1::Envelope> fixed;
  if (!envelopeIsUtf8(env)) {
    fixed = env;
    makeEnvelopeUtf8(&*fixed);
  }
  auto frame = ipc::encodeFrame(fixed ? *fixed : env);
  if (!frame) {
    spdlog::error("connection {}: {}", id_, frame.error().message);
    return;
  }
  if (env.has_selection_update()) {
    // At most one update waits: a newer one replaces it (the client applies only the newest
    // anyway), so a client that never reads cannot make dumpd queue them without bound.
    if (update_at_ && *update_at_ >= popped_) {
      const size_t at = *update_at_ - popped_;
      if (at < write_queue_.size() && !(at == 0 && writing_)) {
        queued_bytes_ -= write_queue_[at].size();
        queued_bytes_ += frame.value().size();
        write_queue_[at] = std::move(frame.value());
        return;
      }
    }
    update_at_ = popped_ + write_queue_.size();
  }
  queued_bytes_ += frame.value().size();
  write_queue_.push_back(std::move(frame.value()));
  if (!writing_) doWrite();
}

void Connection::popFront() {
  queued_bytes_ -= std::min(queued_bytes_, write_queue_.front().size());
  write_queue_.pop_front();
  ++popped_;
}

void Connection::doWrite() {
  if (write_queue_.empty() || socket_closed_) {
    writing_ = false;
    if (closing_ && (!session_ || session_->finished())) {
      closeSocket();
    } else if (!closing_ && processFrames()) {
      doRead();  // reading may have paused on a full reply queue
    }
    return;
  }
  writing_ = true;
  asio::async_write(socket_, asio::buffer(write_queue_.front()),
                    [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                      if (!self->write_queue_.empty()) self->popFront();
                      if (ec) {
                        self->popped_ += self->write_queue_.size();
                        self->write_queue_.clear();
                        self->queued_bytes_ = 0;
                        self->writing_ = false;
                        self->stopSession();
                        self->closeSocket();
                        return;
                      }
                      self->doWrite();
                    });
}

void Connection::sendErrorAndClose(v1::Error::Code code, const std::string& message) {
  server_.peerWarning("connection " + std::to_string(id_) + ": " + escapeForLog(message));
  v1::Envelope env;
  env.mutable_error()->set_code(code);
  env.mutable_error()->set_message(message);
  send(env);
  closing_ = true;
  stopSession();
  if (!writing_ && (!session_ || session_->finished())) closeSocket();
}

void Connection::stopSession() {
  if (session_ && !session_->finished()) {
    session_->requestStop(server_.clock().now() +
                          std::chrono::milliseconds(server_.settings().shutdown_timeout_ms));
  }
}

void Connection::sessionFinished() {
  if (server_.stopping() || socket_closed_) {
    // Shutting down: a client that does not read must not hold up the exit. Flush replies
    // already queued get one non-blocking attempt.
    flushNonBlocking();
    closeSocket();
    return;
  }
  closing_ = true;
  if (!writing_) closeSocket();
}

void Connection::flushNonBlocking() {
  // Only when no async write is in flight: its bytes would interleave with ours.
  if (writing_) return;
  while (!socket_closed_ && !write_queue_.empty()) {
    const std::string& f = write_queue_.front();
    if (::send(socket_.native_handle(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL) !=
        static_cast<ssize_t>(f.size())) {
      break;
    }
    popFront();
  }
}

void Connection::shutdown(TimePoint deadline) {
  if (session_ && !session_->finished()) {
    session_->noteShutdown();
    session_->requestStop(deadline);
    return;
  }
  closeSocket();
}

void Connection::closeSocket() {
  if (!socket_closed_) {
    socket_closed_ = true;
    closing_ = true;
    boost::system::error_code ignored;
    idle_timer_->cancel();
    socket_.close(ignored);
    fds_.clear();
    if (charged_bytes_ != 0) server_.releaseFrameBytes(charged_bytes_);
    charged_bytes_ = 0;
  }
  maybeDone();
}

void Connection::maybeDone() {
  if (done_ || !socket_closed_ || (session_ && !session_->finished())) return;
  done_ = true;
  server_.connectionDone(shared_from_this());
}

}  // namespace dumpd::daemon
