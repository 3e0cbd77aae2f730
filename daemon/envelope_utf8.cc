#include "daemon/envelope_utf8.h"

#include <string>

#include "base/utf8.h"

namespace dumpd::daemon {
namespace {

// Visits every string field of the messages dumpd sends; `f(std::string*)` may change it.
template <typename F>
void forEachString(v1::Envelope* env, F&& f) {
  if (env->has_welcome()) f(env->mutable_welcome()->mutable_dump_root());
  if (env->has_error()) f(env->mutable_error()->mutable_message());
  if (env->has_flush_reply()) f(env->mutable_flush_reply()->mutable_last_error());
  if (env->has_session_command_reply()) {
    f(env->mutable_session_command_reply()->mutable_message());
  }
  if (env->has_selection_update()) f(env->mutable_selection_update()->mutable_iteration());
  if (env->has_status_reply()) {
    v1::StatusReply* r = env->mutable_status_reply();
    f(r->mutable_version());
    f(r->mutable_socket());
    for (v1::DiskStatus& d : *r->mutable_disks()) f(d.mutable_path());
    for (v1::SessionStatus& s : *r->mutable_sessions()) {
      f(s.mutable_net_name());
      f(s.mutable_path());
      f(s.mutable_state());
      f(s.mutable_last_error());
      f(s.mutable_producer());
      for (std::string& k : *s.mutable_unused_kernels()) f(&k);
      f(s.mutable_stop_reason());
      f(s.mutable_ms_format());
      f(s.mutable_selection());
      f(s.mutable_selection_changed_by());
      if (s.has_recorder()) {
        f(s.mutable_recorder()->mutable_last_trigger());
        f(s.mutable_recorder()->mutable_warning());
      }
    }
  }
}

}  // namespace

bool envelopeIsUtf8(const v1::Envelope& env) {
  bool valid = true;
  // Read only: the visitor never changes a field, and mutable_* of a field that is set
  // (has_* checked above) does not change the message either.
  forEachString(const_cast<v1::Envelope*>(&env),
                [&](std::string* s) { valid = valid && isValidUtf8(*s); });
  return valid;
}

bool makeEnvelopeUtf8(v1::Envelope* env) {
  bool changed = false;
  forEachString(env, [&](std::string* s) {
    if (isValidUtf8(*s)) return;
    *s = toValidUtf8(*s);
    changed = true;
  });
  return changed;
}

}  // namespace dumpd::daemon
