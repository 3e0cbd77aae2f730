#include "daemon/daemon_settings.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "config/dump_plan.h"
#include "config/json_util.h"

namespace dumpd::daemon {
namespace {

using config::parseCompression;
using config::parseDurability;
using config::readTextFile;
using config::internal::describe;
using config::internal::parseJson;
using ipc::parseBackpressure;

using nlohmann::json;

constexpr std::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

Error invalid(std::string message) {
  return makeError(ErrorCode::kInvalidConfig, "dumpd settings: " + std::move(message));
}

Error badValue(std::string_view key, std::string_view expected, const json& v) {
  // Appended piece by piece: GCC 12 gives a false -Wrestrict on "'" + std::string (its bug
  // 105329) in Release builds.
  std::string message = "'";
  message.append(key).append("' should be ").append(expected).append(", but got: ");
  message += describe(v);
  return invalid(std::move(message));
}

Result<uint64_t> getU64(std::string_view key, const json& v) {
  if (!v.is_number_unsigned()) return badValue(key, "a non-negative integer", v);
  return v.get<uint64_t>();
}

Result<uint64_t> getU64(std::string_view key, const json& v, uint64_t min) {
  auto x = getU64(key, v);
  if (!x) return x.error();
  if (*x < min) return badValue(key, "an integer of at least " + std::to_string(min), v);
  return x;
}

Result<uint32_t> getU32(std::string_view key, const json& v, uint32_t min, uint32_t max) {
  auto x = getU64(key, v);
  if (!x) return x.error();
  if (*x < min || *x > max) {
    return badValue(key, "an integer in " + std::to_string(min) + ".." + std::to_string(max), v);
  }
  return static_cast<uint32_t>(*x);
}

Result<std::string> getString(std::string_view key, const json& v) {
  if (!v.is_string()) return badValue(key, "a string", v);
  const auto& s = v.get_ref<const std::string&>();
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return badValue(key, "a string without control characters", v);
  }
  return s;
}

// "0660" / "660" (octal text) or an integer (the mode's numeric value, 432 == 0660). Only
// permission bits: setuid/setgid/sticky mean nothing on a socket, and the bound catches the
// usual mistake of writing 660 as a JSON integer (decimal 660 is octal 1224).
Result<uint32_t> getSocketMode(const json& v) {
  constexpr std::string_view kKey = "socket_mode";
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s.empty() || s.size() > 4) return badValue(kKey, "an octal string such as \"0660\"", v);
    uint32_t mode = 0;
    for (char c : s) {
      if (c < '0' || c > '7') return badValue(kKey, "an octal string such as \"0660\"", v);
      mode = mode * 8 + static_cast<uint32_t>(c - '0');
    }
    if (mode > 0777) return badValue(kKey, "a permission mode of at most \"0777\"", v);
    return mode;
  }
  if (v.is_number_unsigned()) {
    uint64_t mode = v.get<uint64_t>();
    if (mode > 0777) {
      return badValue(kKey,
                      "at most 511 (0777) as an integer; write octal modes as a string, e.g. "
                      "\"0660\"",
                      v);
    }
    return static_cast<uint32_t>(mode);
  }
  return badValue(kKey, "an octal string such as \"0660\" or an integer", v);
}

template <typename T>
Status assign(Result<T> r, T* out) {
  if (!r) return r.error();
  *out = std::move(r).value();
  return {};
}

// One handler per key; unknown keys are errors.
Status applyKey(const std::string& key, const json& v, DaemonSettings& s) {
  constexpr uint32_t kU32Max = std::numeric_limits<uint32_t>::max();
  if (key == "socket_path") {
    auto path = getString(key, v);
    if (!path) return path.error();
    if (path->size() > kMaxSocketPathBytes) {
      return badValue(key, "at most " + std::to_string(kMaxSocketPathBytes) + " bytes long", v);
    }
    s.socket_path = std::move(path).value();
    return {};
  }
  if (key == "socket_mode") return assign(getSocketMode(v), &s.socket_mode);
  if (key == "socket_group") return assign(getString(key, v), &s.socket_group);
  if (key == "max_sessions") return assign(getU32(key, v, 1, kU32Max), &s.max_sessions);
  if (key == "max_connections") return assign(getU32(key, v, 1, kU32Max), &s.max_connections);
  if (key == "max_connections_per_uid") {
    return assign(getU32(key, v, 1, kU32Max), &s.max_connections_per_uid);
  }
  if (key == "max_sessions_per_uid") {
    return assign(getU32(key, v, 1, kU32Max), &s.max_sessions_per_uid);
  }
  if (key == "handshake_timeout_ms") {
    return assign(getU32(key, v, 100, kU32Max), &s.handshake_timeout_ms);
  }
  if (key == "shutdown_timeout_ms") {
    return assign(getU32(key, v, 100, kU32Max), &s.shutdown_timeout_ms);
  }
  if (key == "recorder_fetch_timeout_ms") {
    return assign(getU32(key, v, 100, kU32Max), &s.recorder_fetch_timeout_ms);
  }
  if (key == "recorder_memory_bytes") {
    return assign(getU64(key, v, 1 << 20), &s.recorder_memory_bytes);
  }
  if (key == "journal_bytes") return assign(getU64(key, v, 4096), &s.journal_bytes);
  if (key == "max_open_directories") {
    return assign(getU32(key, v, 4, 100000), &s.max_open_directories);
  }
  if (key == "max_links_per_file") {
    // Below every file system's own limit (ext4: 65000) by a wide margin.
    return assign(getU32(key, v, 1, 60000), &s.max_links_per_file);
  }
  if (key == "max_pending_frame_bytes") {
    return assign(getU64(key, v), &s.max_pending_frame_bytes);
  }
  if (key == "max_ring_bytes") return assign(getU64(key, v), &s.max_ring_bytes);
  if (key == "writer_threads") {
    if (v.is_string() && v.get<std::string>() == "auto") {
      s.writer_threads = autoWriterThreads();
      return {};
    }
    return assign(getU32(key, v, 1, kMaxWriterThreads), &s.writer_threads);
  }
  if (key == "write_queue_bytes") {
    if (v.is_string() && v.get<std::string>() == "auto") return {};  // resolved at the end
    return assign(getU64(key, v), &s.write_queue_bytes);
  }
  if (key == "backpressure") {
    if (!v.is_string()) return badValue(key, "\"block\" or \"drop\"", v);
    auto b = parseBackpressure(v.get_ref<const std::string&>());
    if (!b) return badValue(key, "\"block\" or \"drop\"", v);
    s.backpressure = *b;
    return {};
  }
  if (key == "block_timeout_ms") return assign(getU32(key, v, 0, kU32Max), &s.block_timeout_ms);
  if (key == "durability") {
    if (!v.is_string()) return badValue(key, "\"none\", \"iteration\" or \"file\"", v);
    auto d = parseDurability(v.get_ref<const std::string&>());
    if (!d) return badValue(key, "\"none\", \"iteration\" or \"file\"", v);
    s.durability = *d;
    return {};
  }
  if (key == "job_quota_bytes") return assign(getU64(key, v), &s.job_quota_bytes);
  if (key == "min_free_bytes") return assign(getU64(key, v), &s.min_free_bytes);
  if (key == "compression") {
    if (!v.is_string()) return badValue(key, "\"none\" or \"lz4\"", v);
    auto c = parseCompression(v.get_ref<const std::string&>());
    if (!c) return badValue(key, "\"none\" or \"lz4\"", v);
    s.compression = *c;
    return {};
  }
  if (key == "worker_priority") {
    if (!v.is_string() || (v.get_ref<const std::string&>() != "idle" &&
                           v.get_ref<const std::string&>() != "normal")) {
      return badValue(key, "\"idle\" or \"normal\"", v);
    }
    s.workers_idle_priority = v.get_ref<const std::string&>() == "idle";
    return {};
  }
  if (key == "log_level") {
    if (!v.is_string() || !isValidLogLevel(v.get_ref<const std::string&>())) {
      return badValue(key, "one of trace, debug, info, warn, error, critical, off", v);
    }
    s.log_level = v.get<std::string>();
    return {};
  }
  return invalid("unknown key '" + printable(key) + "'");
}

// Rules that involve more than one key, checked after every key is read.
Status checkTogether(const DaemonSettings& s) {
  if (s.max_ring_bytes < kMinRingBytes) {
    return invalid("'max_ring_bytes' should be at least " + std::to_string(kMinRingBytes) +
                   ", but got: " + std::to_string(s.max_ring_bytes));
  }
  if (s.write_queue_bytes < kMinWriteQueueBytes) {
    return invalid("'write_queue_bytes' should be at least " + std::to_string(kMinWriteQueueBytes) +
                   ", but got: " + std::to_string(s.write_queue_bytes));
  }
  return {};
}

}  // namespace

uint32_t autoWriterThreads(unsigned cores) {
  return std::clamp<uint32_t>(cores == 0 ? 2 : cores, 2, 16);
}

uint32_t autoWriterThreads() { return autoWriterThreads(std::thread::hardware_concurrency()); }

uint64_t autoWriteQueueBytes(uint32_t writer_threads) {
  return (uint64_t{256} << 20) * std::max<uint32_t>(writer_threads, 1);
}

bool isValidLogLevel(std::string_view s) {
  for (std::string_view level : kLogLevels) {
    if (s == level) return true;
  }
  return false;
}

Result<DaemonSettings> parseDaemonSettings(std::string_view json_text) {
  try {
    auto parsed = parseJson(json_text);
    if (!parsed) return invalid(parsed.error().message);
    const json& root = parsed.value();
    if (!root.is_object()) return invalid("the settings should be a JSON object");
    DaemonSettings settings;
    for (const auto& [key, value] : root.items()) {
      if (auto s = applyKey(key, value, settings); !s) return s.error();
    }
    // The queue follows the writers unless the file sets it.
    const auto queue = root.find("write_queue_bytes");
    if (queue == root.end() || (queue->is_string() && queue->get<std::string>() == "auto")) {
      settings.write_queue_bytes = autoWriteQueueBytes(settings.writer_threads);
    }
    if (auto s = checkTogether(settings); !s) return s.error();
    return settings;
  } catch (const std::exception& e) {
    return makeError(ErrorCode::kInternal,
                     std::string("dumpd settings parser failed: ") + e.what());
  }
}

Result<DaemonSettings> loadDaemonSettings(const std::string& path) {
  auto text = readTextFile(path);
  if (!text) return text.error();
  auto settings = parseDaemonSettings(*text);
  if (!settings) {
    return makeError(settings.error().code, printable(path) + ": " + settings.error().message);
  }
  return settings;
}

}  // namespace dumpd::daemon
