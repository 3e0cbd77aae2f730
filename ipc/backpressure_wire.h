// Backpressure on the wire (dumpd.v1.Backpressure in Hello and Welcome) and back: the one
// place the two enums meet, for the client's Hello and the daemon's Welcome alike.
#pragma once

#include <optional>

#include "ipc/backpressure.h"
#include "proto/dumpd.pb.h"

namespace dumpd::ipc {

v1::Backpressure backpressureToWire(Backpressure b);
// BACKPRESSURE_DEFAULT (the job did not choose) and values this build does not know: nullopt.
std::optional<Backpressure> backpressureFromWire(v1::Backpressure w);

}  // namespace dumpd::ipc
