// The daemon's own settings file (config/dumpd.json; --config):
// limits, policies, paths. Only the daemon reads it; what a client shares with it (the socket
// path rule, Backpressure) is in ipc/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"
#include "config/write_policy.h"
#include "ipc/backpressure.h"
#include "ipc/socket_path.h"

namespace dumpd::daemon {

using config::Compression;
using config::Durability;
using ipc::Backpressure;
using ipc::kMaxSocketPathBytes;

// True for trace debug info warn error critical off.
bool isValidLogLevel(std::string_view s);

// Validation bounds (see docs/configuration.md).
constexpr uint64_t kMinRingBytes = 64 << 10;  // a ring must hold a few records
constexpr uint64_t kMinWriteQueueBytes = 64 << 10;
constexpr uint32_t kMaxWriterThreads = 64;

// Defaults sized to the node (docs/configuration.md, measured in docs/performance.md "Node
// scale"): one writer thread per core, 2..16 (they run SCHED_IDLE: idle writers cost
// nothing), and 256 MiB of write queue per writer (queued records point into the rings:
// queue bytes are ring space held, not daemon memory). `cores` 0: unknown, taken as 2.
uint32_t autoWriterThreads(unsigned cores);
uint32_t autoWriterThreads();  // for this machine (std::thread::hardware_concurrency)
uint64_t autoWriteQueueBytes(uint32_t writer_threads);

struct DaemonSettings {
  std::string socket_path;      // "" -> $DUMPD_SOCKET, else /run/dumpd/dumpd.sock
  uint32_t socket_mode = 0660;  // octal in the file as a string "0660" or an integer
  std::string socket_group;     // "" -> keep the daemon's group
  uint32_t max_sessions = 64;
  uint64_t max_ring_bytes = 1ull << 30;           // per session
  uint32_t writer_threads = autoWriterThreads();  // "auto" in the file
  // "auto" (or absent): autoWriteQueueBytes(writer_threads), after every key is read.
  uint64_t write_queue_bytes = autoWriteQueueBytes(autoWriterThreads());
  Backpressure backpressure = Backpressure::kBlock;
  uint32_t block_timeout_ms = 0;  // 0 = wait forever
  Durability durability = Durability::kNone;
  uint64_t job_quota_bytes = 0;  // 0 = unlimited
  uint64_t min_free_bytes = 1ull << 30;
  Compression compression = Compression::kNone;
  std::string log_level = "info";  // trace debug info warn error critical off
  // Scheduling of the threads that consume rings and write files: "idle" (SCHED_IDLE: they
  // run only on CPU time the training processes leave over; a saturated node turns into ring
  // backpressure instead of slower steps) or "normal".
  bool workers_idle_priority = true;

  // Isolation limits (docs/operations.md, "Isolation and limits").
  uint32_t max_connections = 256;         // open connections, dump sessions included
  uint32_t max_connections_per_uid = 32;  // per client uid (root's are counted too)
  uint32_t max_sessions_per_uid = 16;     // dump sessions per client uid
  uint32_t handshake_timeout_ms = 10000;  // a connection idle this long without a session
  uint32_t shutdown_timeout_ms = 30000;   // SIGTERM: drain for at most this long, then exit
  // Flight recorder: how long a session waits for the CUDA tensors a client keeps on its
  // device when a trigger needs them (docs/recorder.md).
  uint32_t recorder_fetch_timeout_ms = 30000;
  // Flight recorder: daemon memory the records kept by every session may hold together (each
  // kept record's decoded descriptor); read at start.
  uint64_t recorder_memory_bytes = 1ull << 30;
  // Bytes one job (uid, dump root, rank, net; its reconnections too) may append to its
  // journals (.dump_metadata/control.jsonl, triggers.jsonl) while dumpd runs.
  uint64_t journal_bytes = 16ull << 20;
  uint32_t max_open_directories = 64;              // directory fds one session's writer keeps open
  uint32_t max_links_per_file = 1000;              // dump once: hard links to one file in one step
  uint64_t max_pending_frame_bytes = 64ull << 20;  // partial frames buffered, all connections
};

// Parses the settings JSON. Unknown keys are errors (a typo in a daemon setting should not
// pass silently). Missing keys keep their defaults.
Result<DaemonSettings> parseDaemonSettings(std::string_view json_text);
Result<DaemonSettings> loadDaemonSettings(const std::string& path);

}  // namespace dumpd::daemon
