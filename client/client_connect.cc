#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "base/printable.h"
#include "base/utf8.h"
#include "base/version.h"
#include "client/client_impl.h"
#include "ipc/backpressure_wire.h"
#include "ipc/socket_path.h"

namespace dumpd::client {
namespace {

constexpr uint64_t kDefaultRingBytes = 64ull << 20;

std::optional<uint32_t> envUint(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long n = std::strtoul(v, &end, 10);
  if (errno != 0 || *end != '\0' || n > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(n);
}

// mkdir -p with the caller's own permissions (the daemon never creates the root for us).
Status makeDirs(const std::string& path) {
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = path.find('/', i);
    const size_t end = j == std::string::npos ? path.size() : j;
    cur = path.substr(0, end);
    if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
      return makeError(ErrorCode::kIo,
                       "cannot create dump directory " + cur + ": " + strerror(errno));
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return {};
}

ErrorCode codeFromWire(v1::Error::Code c) {
  switch (c) {
    case v1::Error::INVALID_CONFIG:
      return ErrorCode::kInvalidConfig;
    case v1::Error::RESOURCE_EXHAUSTED:
      return ErrorCode::kResourceExhausted;
    case v1::Error::IO:
      return ErrorCode::kIo;
    default:
      return ErrorCode::kUnavailable;
  }
}

}  // namespace

Result<std::unique_ptr<Client>> Client::connect(Options options) {
  auto impl = std::make_unique<Impl>();
  std::string text;
  if (options.config_text) {
    text = *options.config_text;
  } else {
    std::string path = options.config_path;
    if (path.empty()) {
      const char* env = std::getenv("MINDSPORE_DUMP_CONFIG");
      if (env == nullptr || *env == '\0') {
        return makeError(ErrorCode::kInvalidConfig,
                         "no job config: pass one or set MINDSPORE_DUMP_CONFIG");
      }
      path = env;
    }
    auto t = config::readTextFile(path);
    if (!t) return makeError(ErrorCode::kInvalidConfig, t.error().message);
    text = std::move(t.value());
  }
  if (options.flight_recorder) {
    auto merged = config::withFlightRecorder(text, *options.flight_recorder);
    if (!merged) return merged.error();
    text = std::move(merged.value());
  }
  config::Environment env = config::Environment::fromProcess();
  if (!options.ms_format.empty()) env.dumpd_ms_format = options.ms_format;
  auto plan = config::parseDumpPlan(text, env);
  if (!plan) return makeError(ErrorCode::kInvalidConfig, plan.error().message);
  impl->plan = std::move(plan.value());
  auto filter = config::Filter::create(impl->plan);
  if (!filter) return makeError(ErrorCode::kInvalidConfig, filter.error().message);
  impl->filter.emplace(std::move(filter.value()));
  impl->rank = options.rank ? *options.rank : envUint("RANK_ID").value_or(0);
  impl->device = options.device ? *options.device : envUint("DEVICE_ID").value_or(0);
  impl->iteration = impl->plan.initial_iteration;
  impl->updateStepSelected();
  // Device statistics stand in for the bytes only when nothing written needs them: with a
  // flight recorder, its saved_data must be "statistic" too.
  impl->device_statistics =
      impl->plan.statisticsFromSums() &&
      (!impl->plan.flight_recorder ||
       impl->plan.flight_recorder->saved_data == config::SavedData::kStatistic);
  impl->host_statistics = impl->device_statistics && options.host_statistics;

  auto ring =
      ipc::RingProducer::create(options.ring_bytes ? options.ring_bytes : kDefaultRingBytes);
  if (!ring) return ring.error();
  impl->ring.emplace(std::move(ring.value()));

  if (Status s = makeDirs(impl->plan.path); !s) return s.error();
  UniqueFd root(::open(impl->plan.path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) {
    return makeError(ErrorCode::kIo,
                     "cannot open dump path " + impl->plan.path + ": " + strerror(errno));
  }

  const std::string socket_path = ipc::resolveSocketPath(options.socket_path);
  auto sock = ipc::connectUnix(socket_path);
  if (!sock) return sock.error();
  impl->sock = std::move(sock.value());

  v1::Envelope hello_env;
  v1::Hello* hello = hello_env.mutable_hello();
  hello->set_protocol_major(ipc::kProtocolMajor);
  hello->set_protocol_minor(ipc::kProtocolMinor);
  hello->set_pid(::getpid());
  hello->set_rank(impl->rank);
  hello->set_device(impl->device);
  hello->set_job_config(text);
  hello->set_producer_name(toWireText(options.producer_name, 256));
  hello->set_producer_version(toWireText(options.producer_version, 256));
  hello->set_ring_bytes(impl->ring->mappedBytes());
  hello->set_device_staging_bytes(options.device_staging_bytes);
  hello->set_device_target(toWireText(options.device_target, 256));
  hello->set_config_path(toWireText(options.config_path, 4096));  // display only
  hello->set_ms_format(std::string(config::msFormatName(impl->plan.ms_format)));
  // A config without "path" dumps beneath $MS_DIAGNOSTIC_DATA_PATH: the daemon validates it
  // in our environment, so it resolves the same directory.
  if (const char* d = std::getenv("MS_DIAGNOSTIC_DATA_PATH")) {
    // A path: replacing its bytes would name another directory.
    if (!isValidUtf8(d)) {
      return makeError(ErrorCode::kInvalidConfig,
                       "MS_DIAGNOSTIC_DATA_PATH is not valid UTF-8: " + printable(d));
    }
    hello->set_ms_diagnostic_data_path(d);
  }
  if (options.backpressure) {
    hello->set_backpressure(ipc::backpressureToWire(*options.backpressure));
  }
  const int fds[2] = {impl->ring->memfd(), root.get()};
  if (Status s = ipc::sendFrame(impl->sock.get(), hello_env, fds); !s) return s.error();
  auto reply = ipc::recvFrame(impl->sock.get(), impl->decoder, options.connect_timeout_ms);
  if (!reply) return reply.error();
  if (reply->has_error()) {
    return makeError(codeFromWire(reply->error().code()), reply->error().message());
  }
  if (!reply->has_welcome()) {
    return makeError(ErrorCode::kProtocol, "dumpd answered the Hello with an unexpected message");
  }
  const v1::Welcome& w = reply->welcome();
  impl->session_id = w.session_id();
  // The daemon always names one; an unknown value (a newer daemon) waits, the safe choice.
  impl->backpressure =
      ipc::backpressureFromWire(w.backpressure()).value_or(ipc::Backpressure::kBlock);
  impl->block_timeout_ms = w.block_timeout_ms() == 0 ? -1 : static_cast<int>(w.block_timeout_ms());
  impl->options = std::move(options);
  impl->stats.ring_capacity = impl->ring->capacity();
  impl->stats.session_id = impl->session_id;
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { (void)close(); }

const std::string& Client::path() const { return impl_->plan.path; }
const std::string& Client::netName() const { return impl_->plan.net_name; }
const char* libraryVersion() { return kVersion; }
uint32_t Client::rank() const { return impl_->rank; }
uint32_t Client::device() const { return impl_->device; }
bool Client::stepSelected() const { return impl_->step_selected; }
bool Client::statisticsOnly() const { return impl_->device_statistics; }

uint32_t Client::replicaEvery() const { return impl_->replica_every; }

}  // namespace dumpd::client
