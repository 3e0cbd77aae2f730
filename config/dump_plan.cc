#include "config/dump_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "config/json_util.h"
#include "config/plan_parser.h"

namespace dumpd::config {
namespace {

using internal::printable;

constexpr size_t kMaxConfigFileBytes = 16u << 20;

std::string joinCategories(const std::vector<StatCategory>& categories) {
  if (categories.empty()) return "none";
  std::string out;
  for (StatCategory c : categories) {
    if (!out.empty()) out += ',';
    out += statCategoryName(c);
  }
  return out;
}

}  // namespace

std::string_view statCategoryHeader(StatCategory c) {
  switch (c) {
    case StatCategory::kMax:
      return "Max Value";
    case StatCategory::kMin:
      return "Min Value";
    case StatCategory::kAvg:
      return "Avg Value";
    case StatCategory::kCount:
      return "Count";
    case StatCategory::kNegativeZeroCount:
      return "Negative Zero Count";
    case StatCategory::kPositiveZeroCount:
      return "Positive Zero Count";
    case StatCategory::kNanCount:
      return "NaN Count";
    case StatCategory::kNegativeInfCount:
      return "Negative Inf Count";
    case StatCategory::kPositiveInfCount:
      return "Positive Inf Count";
    case StatCategory::kZeroCount:
      return "Zero Count";
    case StatCategory::kL2Norm:
      return "L2Norm Value";
    case StatCategory::kMd5:
      return "MD5";
    case StatCategory::kSha1:
      return "SHA1";
  }
  return "";
}

std::string_view statCategoryName(StatCategory c) {
  switch (c) {
    case StatCategory::kMax:
      return "max";
    case StatCategory::kMin:
      return "min";
    case StatCategory::kAvg:
      return "avg";
    case StatCategory::kCount:
      return "count";
    case StatCategory::kNegativeZeroCount:
      return "negative zero count";
    case StatCategory::kPositiveZeroCount:
      return "positive zero count";
    case StatCategory::kNanCount:
      return "nan count";
    case StatCategory::kNegativeInfCount:
      return "negative inf count";
    case StatCategory::kPositiveInfCount:
      return "positive inf count";
    case StatCategory::kZeroCount:
      return "zero count";
    case StatCategory::kL2Norm:
      return "l2norm";
    case StatCategory::kMd5:
      return "md5";
    case StatCategory::kSha1:
      return "hash:sha1";
  }
  return "";
}

bool DumpPlan::statisticsFromSums() const {
  if (saved_data != SavedData::kStatistic) return false;
  return std::none_of(statistic_category.begin(), statistic_category.end(), [](StatCategory c) {
    return c == StatCategory::kMd5 || c == StatCategory::kSha1;
  });
}

bool DumpPlan::supportsDevice(uint32_t device) const {
  return std::find(support_device.begin(), support_device.end(), device) != support_device.end();
}

Environment Environment::fromProcess() {
  Environment env;
  if (const char* v = std::getenv("MS_DIAGNOSTIC_DATA_PATH")) env.ms_diagnostic_data_path = v;
  if (const char* v = std::getenv("MINDSPORE_DUMP_CONFIG")) env.mindspore_dump_config = v;
  if (const char* v = std::getenv("DUMPD_MS_FORMAT")) env.dumpd_ms_format = v;
  return env;
}

Result<DumpPlan> parseDumpPlan(std::string_view json_text, const Environment& env) {
  try {
    return internal::PlanParser(json_text, env).run();
  } catch (const std::exception& e) {
    // Not expected (every access is type-checked first); keeps the no-throw contract.
    return makeError(ErrorCode::kInternal, std::string("job config parser failed: ") + e.what());
  }
}

Result<std::string> readTextFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return makeError(err == ENOENT                     ? ErrorCode::kNotFound
                     : (err == EACCES || err == EPERM) ? ErrorCode::kPermission
                                                       : ErrorCode::kIo,
                     "cannot open " + printable(path) + ": " + std::strerror(err));
  }
  std::string text;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return makeError(ErrorCode::kIo,
                       "cannot read " + printable(path) + ": " + std::strerror(err));
    }
    if (n == 0) break;
    // A bound, so a path such as /dev/zero cannot make the reader grow without limit.
    if (text.size() + static_cast<size_t>(n) > kMaxConfigFileBytes) {
      ::close(fd);
      return makeError(ErrorCode::kInvalidConfig,
                       "cannot read " + printable(path) + ": larger than " +
                           std::to_string(kMaxConfigFileBytes) + " bytes");
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

Result<DumpPlan> loadDumpPlan(const std::string& path, const Environment& env) {
  std::string file = path;
  if (file.empty()) {
    if (!env.mindspore_dump_config || env.mindspore_dump_config->empty()) {
      return makeError(ErrorCode::kNotFound,
                       "no job config: MINDSPORE_DUMP_CONFIG is not set and no file was given");
    }
    file = *env.mindspore_dump_config;
  }
  auto text = readTextFile(file);
  if (!text) return text.error();
  return parseDumpPlan(*text, env);
}

std::string summarizePlan(const DumpPlan& plan) {
  std::string out = "net=" + plan.net_name + " path=" + plan.path +
                    " iterations=" + plan.iterations.toString() +
                    " dump_mode=" + std::to_string(static_cast<int>(plan.dump_mode));
  if (plan.dump_mode == DumpMode::kKernels) {
    auto matcher = KernelMatcher::create(plan.kernels);
    size_t n = matcher ? matcher->size() : 0;
    out += n == 0 ? std::string(" (no kernels: every op)")
                  : " (" + std::to_string(n) + (n == 1 ? " kernel)" : " kernels)");
  }
  out += " saved_data=";
  switch (plan.saved_data) {
    case SavedData::kTensor:
      out += "tensor";
      break;
    case SavedData::kStatistic:
      out += "statistic";
      break;
    case SavedData::kFull:
      out += "full";
      break;
  }
  if (plan.savesStatistics()) out += " categories=" + joinCategories(plan.statistic_category);
  if (plan.op_debug_mode != 0) out += " op_debug_mode=" + std::to_string(plan.op_debug_mode);
  if (plan.file_format == FileFormat::kBin) out += " file_format=bin";
  if (plan.flight_recorder) {
    out += " flight_recorder=" + std::to_string(plan.flight_recorder->steps) + " steps";
  }
  return out;
}

}  // namespace dumpd::config
