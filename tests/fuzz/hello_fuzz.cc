// Fuzz target: the daemon's handling of a client's Hello, up to a ready filter.
//
// Input: [fds][n: u16 little-endian][n bytes: serialized dumpd.v1.Envelope][job config...].
// `fds` is the descriptor count the Hello arrived with when it is 0..3; any other value
// means the expected 2. A non-empty tail replaces the Hello's job_config, so the JSON can
// be mutated without breaking protobuf length prefixes.
//
// What runs, in the daemon's order: daemon::checkHello; when it passes,
// config::parseDumpPlan(job_config, the client's MS_DIAGNOSTIC_DATA_PATH) and
// config::Filter::create, then Filter::opSelected on names the client controls: each line of
// config_path (up to 8), producer_name and producer_version. Must never crash, leak or hang.
//
// Invariants (abort on violation): every refusal carries a message; a Hello that passes
// checkHello respects its size limits; an accepted plan keeps the config text byte for byte
// and has an absolute dump path; opSelected is true for every name in dump_mode 0, equals
// the set_dump mark in dump_mode 2, and in dump_mode 1 gives the same answer again for the
// same name (from its cache), marked or not.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/dump_plan.h"
#include "config/filter.h"
#include "daemon/hello_check.h"
#include "ipc/frame.h"
#include "tests/fuzz/fuzz_util.h"

namespace dumpd {
namespace {

constexpr size_t kMaxNamesFromConfigPath = 8;

std::vector<std::string_view> namesFrom(const v1::Hello& h) {
  std::vector<std::string_view> names;
  std::string_view lines = h.config_path();
  while (!lines.empty() && names.size() < kMaxNamesFromConfigPath) {
    const size_t nl = lines.find('\n');
    names.push_back(lines.substr(0, nl));
    lines = nl == std::string_view::npos ? std::string_view() : lines.substr(nl + 1);
  }
  names.push_back(h.producer_name());
  names.push_back(h.producer_version());
  return names;
}

void checkFilter(const config::DumpPlan& plan, config::Filter& filter, const v1::Hello& h) {
  for (std::string_view name : namesFrom(h)) {
    const bool unmarked = filter.opSelected(name, false);
    for (const bool marked : {false, true}) {
      const bool selected = filter.opSelected(name, marked);
      switch (plan.dump_mode) {
        case config::DumpMode::kAll:
          FUZZ_CHECK(selected);
          break;
        case config::DumpMode::kKernels:  // the kernel list alone decides, cached or not
          FUZZ_CHECK(selected == unmarked);
          break;
        case config::DumpMode::kMarked:
          FUZZ_CHECK(selected == marked);
          break;
      }
    }
    // All rules together; the rank stands in for an iteration number the client chose.
    (void)filter.shouldDump(h.device(), h.rank(), name, Io::kOutput);
  }
  (void)filter.unusedKernels();
}

void handleHello(const v1::Hello& h, size_t fd_count) {
  if (auto refused = daemon::checkHello(h, fd_count)) {
    FUZZ_CHECK(!refused->message.empty());
    return;
  }
  FUZZ_CHECK(h.protocol_major() == ipc::kProtocolMajor);
  FUZZ_CHECK(fd_count == daemon::kHelloFdCount);
  FUZZ_CHECK(h.job_config().size() <= daemon::kMaxJobConfigBytes);
  FUZZ_CHECK(h.producer_name().size() <= daemon::kMaxProducerBytes);
  FUZZ_CHECK(h.config_path().size() <= daemon::kMaxPathBytes);

  config::Environment env;
  if (!h.ms_diagnostic_data_path().empty()) {
    env.ms_diagnostic_data_path = h.ms_diagnostic_data_path();
  }
  auto plan = config::parseDumpPlan(h.job_config(), env);
  if (!plan) {
    FUZZ_CHECK(!plan.error().message.empty());
    return;
  }
  FUZZ_CHECK(plan->config_text == h.job_config());
  FUZZ_CHECK(!plan->path.empty() && plan->path.front() == '/');
  (void)config::summarizePlan(*plan);
  auto filter = config::Filter::create(*plan);
  if (!filter) {
    FUZZ_CHECK(!filter.error().message.empty());
    return;
  }
  checkFilter(*plan, *filter, h);
}

}  // namespace
}  // namespace dumpd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dumpd::fuzz::quietProtobuf();
  using namespace dumpd;
  if (size < 3) return 0;
  const size_t fd_count = data[0] <= 3 ? data[0] : daemon::kHelloFdCount;
  const size_t n = std::min<size_t>(data[1] | size_t{data[2]} << 8, size - 3);
  v1::Envelope env;
  if (!env.ParseFromArray(data + 3, static_cast<int>(n)) || !env.has_hello()) return 0;
  v1::Hello* hello = env.mutable_hello();
  if (size > 3 + n) {
    hello->set_job_config(reinterpret_cast<const char*>(data + 3 + n), size - 3 - n);
  }
  handleHello(*hello, fd_count);
  return 0;
}
