// Every protobuf `string` field dumpd sends must hold valid UTF-8: the receiver's parser
// refuses the whole message otherwise (one op name of bytes \xff\xfe in one session's
// last_error made `dumpctl status` fail for root, hiding every session). Text a client
// chose (op names in errors and triggers, names and paths) is made valid where it is
// recorded (SessionWarnings, FlightRecorder); this is the net under those, applied to
// every envelope a connection sends: each string field a client can reach, replaced byte
// for byte with U+FFFD where it is not UTF-8.
//
// The dumpd.v1 messages are generated for the lite runtime (no reflection), so the fields
// are listed: a string field added to a message dumpd sends belongs here too
// (tests/daemon/envelope_utf8_test.cc checks each listed one).
#pragma once

#include "proto/dumpd.pb.h"

namespace dumpd::daemon {

// Whether every string field of `env` is valid UTF-8.
bool envelopeIsUtf8(const v1::Envelope& env);
// Makes every string field of `env` valid UTF-8; returns whether anything changed.
bool makeEnvelopeUtf8(v1::Envelope* env);

}  // namespace dumpd::daemon
