#include "daemon/session_setup.h"

#include "storage/fs/file_system.h"

namespace dumpd::daemon {

v1::Error::Code wireCode(ErrorCode c) {
  switch (c) {
    case ErrorCode::kInvalidConfig:
      return v1::Error::INVALID_CONFIG;
    case ErrorCode::kResourceExhausted:
      return v1::Error::RESOURCE_EXHAUSTED;
    case ErrorCode::kProtocol:
    case ErrorCode::kInvalidArgument:
      return v1::Error::PROTOCOL;
    case ErrorCode::kIo:
    case ErrorCode::kNoSpace:
    case ErrorCode::kPermission:
    case ErrorCode::kNotFound:
      return v1::Error::IO;
    default:
      return v1::Error::INTERNAL;
  }
}

Result<PreparedSession> prepareSession(const v1::Hello& h, UniqueFd ring_fd, UniqueFd root_fd,
                                       const DaemonSettings& settings, DumpRoots& roots,
                                       RingSource& rings, const std::atomic<bool>* cancel) {
  // The client's environment, not ours: a config without "path" means
  // $MS_DIAGNOSTIC_DATA_PATH/debug_dump of the training process.
  config::Environment env;
  env.cancel = cancel;
  if (!h.ms_diagnostic_data_path().empty()) {
    env.ms_diagnostic_data_path = h.ms_diagnostic_data_path();
  }
  env.dumpd_ms_format = h.ms_format();  // empty (older clients): the default
  auto plan = config::parseDumpPlan(h.job_config(), env);
  if (!plan) return makeError(ErrorCode::kInvalidConfig, plan.error().message);
  auto filter = config::Filter::create(plan.value());
  if (!filter) return makeError(ErrorCode::kInvalidConfig, filter.error().message);

  auto root = roots.identify(root_fd);
  if (!root) return root.error();
  std::string key = root.value() + ":" + std::to_string(h.rank()) + ":" + plan.value().net_name;
  auto ring = rings.attach(std::move(ring_fd), h.ring_bytes(), settings.max_ring_bytes);
  if (!ring) return ring.error();
  return PreparedSession{std::move(plan.value()), std::move(filter.value()),
                         std::move(ring.value()), std::move(root_fd), std::move(key)};
}

Result<OpenedWriter> openJobWriter(PreparedSession& s, const v1::Hello& h, const PeerIdentity& peer,
                                   const DaemonSettings& settings, DumpRoots& roots,
                                   JobAccounts* accounts) {
  storage::JobOptions opts;
  opts.rank = h.rank();
  opts.device_target = h.device_target().empty() ? "CPU" : h.device_target();
  opts.producer_version = h.producer_version();
  opts.durability = settings.durability;
  opts.compression = settings.compression;
  opts.quota_bytes = settings.job_quota_bytes;
  opts.min_free_bytes = settings.min_free_bytes;
  opts.max_open_directories = settings.max_open_directories;
  opts.max_links_per_file = settings.max_links_per_file;
  opts.journal_bytes = settings.journal_bytes;
  // The job's reconnections are charged to the same account (same uid, root, rank, net).
  if (accounts != nullptr) opts.account = accounts->account(peer.uid, s.conflict_key);
  auto fs = roots.open(std::move(s.root), peer);
  if (!fs) return fs.error();
  auto writer = storage::JobWriter::create(fs.value(), s.plan, opts);
  if (!writer) return writer.error();
  return OpenedWriter{std::move(fs.value()), std::move(writer.value())};
}

}  // namespace dumpd::daemon
