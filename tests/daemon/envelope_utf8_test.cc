// Every string field dumpd sends is valid UTF-8 (daemon/envelope_utf8.h): a receiver's
// parser refuses a message with one invalid field, and with it every session status shows.
#include "daemon/envelope_utf8.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace dumpd::daemon {
namespace {

const std::string kBad = "op\xff\xfe";
const std::string kFixed = "op\xef\xbf\xbd\xef\xbf\xbd";

struct Case {
  const char* name;
  std::function<void(v1::Envelope*, const std::string&)> set;
  std::function<std::string(const v1::Envelope&)> get;
};

std::vector<Case> cases() {
  using E = v1::Envelope;
  const auto session = [](E* e) { return e->mutable_status_reply()->mutable_sessions()->Add(); };
  const auto first = [](const E& e) -> const v1::SessionStatus& {
    return e.status_reply().sessions(0);
  };
  return {
      {"error.message", [](E* e, const std::string& s) { e->mutable_error()->set_message(s); },
       [](const E& e) { return e.error().message(); }},
      {"welcome.dump_root",
       [](E* e, const std::string& s) { e->mutable_welcome()->set_dump_root(s); },
       [](const E& e) { return e.welcome().dump_root(); }},
      {"flush_reply.last_error",
       [](E* e, const std::string& s) { e->mutable_flush_reply()->set_last_error(s); },
       [](const E& e) { return e.flush_reply().last_error(); }},
      {"session_command_reply.message",
       [](E* e, const std::string& s) { e->mutable_session_command_reply()->set_message(s); },
       [](const E& e) { return e.session_command_reply().message(); }},
      {"status.disks.path",
       [](E* e, const std::string& s) { e->mutable_status_reply()->add_disks()->set_path(s); },
       [](const E& e) { return e.status_reply().disks(0).path(); }},
      {"session.net_name", [=](E* e, const std::string& s) { session(e)->set_net_name(s); },
       [=](const E& e) { return first(e).net_name(); }},
      {"session.path", [=](E* e, const std::string& s) { session(e)->set_path(s); },
       [=](const E& e) { return first(e).path(); }},
      {"session.last_error", [=](E* e, const std::string& s) { session(e)->set_last_error(s); },
       [=](const E& e) { return first(e).last_error(); }},
      {"session.producer", [=](E* e, const std::string& s) { session(e)->set_producer(s); },
       [=](const E& e) { return first(e).producer(); }},
      {"session.unused_kernels",
       [=](E* e, const std::string& s) { session(e)->add_unused_kernels(s); },
       [=](const E& e) { return first(e).unused_kernels(0); }},
      {"session.stop_reason", [=](E* e, const std::string& s) { session(e)->set_stop_reason(s); },
       [=](const E& e) { return first(e).stop_reason(); }},
      {"session.selection", [=](E* e, const std::string& s) { session(e)->set_selection(s); },
       [=](const E& e) { return first(e).selection(); }},
      {"session.selection_changed_by",
       [=](E* e, const std::string& s) { session(e)->set_selection_changed_by(s); },
       [=](const E& e) { return first(e).selection_changed_by(); }},
      {"recorder.last_trigger",
       [=](E* e, const std::string& s) { session(e)->mutable_recorder()->set_last_trigger(s); },
       [=](const E& e) { return first(e).recorder().last_trigger(); }},
      {"recorder.warning",
       [=](E* e, const std::string& s) { session(e)->mutable_recorder()->set_warning(s); },
       [=](const E& e) { return first(e).recorder().warning(); }},
  };
}

TEST(EnvelopeUtf8, EveryListedFieldIsMadeValidAndTheMessageParsesAgain) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    v1::Envelope env;
    c.set(&env, kBad);
    EXPECT_FALSE(envelopeIsUtf8(env));
    EXPECT_TRUE(makeEnvelopeUtf8(&env));
    EXPECT_TRUE(envelopeIsUtf8(env));
    const std::string wire = env.SerializeAsString();
    v1::Envelope back;
    ASSERT_TRUE(back.ParseFromString(wire));  // a proto3 parser refuses invalid UTF-8
    EXPECT_EQ(c.get(back), kFixed);
  }
}

TEST(EnvelopeUtf8, ValidTextIsLeftAlone) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    v1::Envelope env;
    c.set(&env, "Default/Conv2D-op1 \xc3\xa9");
    EXPECT_TRUE(envelopeIsUtf8(env));
    EXPECT_FALSE(makeEnvelopeUtf8(&env));
    EXPECT_EQ(c.get(env), "Default/Conv2D-op1 \xc3\xa9");
  }
}

TEST(EnvelopeUtf8, TheParserReallyRefusesInvalidText) {
  // Why the above matters: without the repair, the whole status reply is lost.
  v1::Envelope env;
  env.mutable_status_reply()->add_sessions()->set_last_error(kBad);
  v1::Envelope back;
  EXPECT_FALSE(back.ParseFromString(env.SerializeAsString()));
}

}  // namespace
}  // namespace dumpd::daemon
