// What a DumpSession tells the connection that owns it: its replies (Welcome, FlushReply),
// the error that ends it, and that it has finished. Connection implements it; a unit test
// implements it to record what a session says, without a socket.
//
// Threading: called on the io thread only (the session thread posts these calls there).
#pragma once

#include <string>

#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

class SessionOwner {
 public:
  virtual void send(const v1::Envelope& env) = 0;
  // Sends an Error, stops reading, ends the session, then closes.
  virtual void sendErrorAndClose(v1::Error::Code code, const std::string& message) = 0;
  // The session thread has finished: every committed record is written.
  virtual void sessionFinished() = 0;

 protected:
  ~SessionOwner() = default;  // owned through the implementation's own shared_ptr
};

}  // namespace dumpd::daemon
