// dumpd's C++ client: stream a training process's op inputs and outputs to the node's dumpd
// daemon, which writes them in MindSpore's dump layout.
//
//   #include <dumpd/dumpd.h>
//   auto client = dumpd::client::Client::connect({.config_path = "data_dump.json"});
//
// Link with dumpd::client (CMake: find_package(dumpd CONFIG)) or `pkg-config --libs dumpd`.
// See /usr/share/doc/dumpd/packaging.md ("The client library") and client/client.h.
#pragma once

#include "dumpd/client/client.h"
#include "dumpd/client/replicas.h"
