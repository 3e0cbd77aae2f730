// `dumpctl status`: asks the daemon for its figures over the socket.
#pragma once

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "proto/dumpd.pb.h"

namespace dumpd::dumpctl {

// The --json form (docs/operations.md lists every field).
nlohmann::json statusToJson(const v1::StatusReply& r);
// The human form: a header line and one row per session.
std::string statusToTable(const v1::StatusReply& r);

// Exit codes: 0 shown, 1 no daemon or protocol failure (one line on `err`).
// watch: refresh in place every second until interrupted.
int runStatusCommand(const std::string& socket, bool json, bool watch, std::ostream& out,
                     std::ostream& err);

}  // namespace dumpd::dumpctl
