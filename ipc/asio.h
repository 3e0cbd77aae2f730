// The one place Boost.Asio is included. Boost 1.74's coroutine headers use std::exchange
// without including <utility>, so it must come first.
#pragma once

#include <utility>

#include <boost/asio.hpp>

namespace dumpd {
namespace asio = boost::asio;
}  // namespace dumpd
