#include "config/dump_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "config/json_util.h"
#include "config/kernel_matcher.h"

namespace dumpd::config {
namespace {

using internal::describe;
using internal::printable;
using nlohmann::json;

constexpr size_t kMaxConfigFileBytes = 16u << 20;

constexpr const char* kCommonDumpSettings = "common_dump_settings";
constexpr const char* kE2eDumpSettings = "e2e_dump_settings";

// The config spellings MindSpore's host statistics accept, in its message's order.
constexpr const char* kValidCategoryList =
    "['max', 'min', 'avg', 'count', 'negative zero count', 'positive zero count', 'nan count', "
    "'negative inf count', 'positive inf count', 'zero count', 'md5', 'l2norm', 'hash', "
    "'hash:sha1', 'hash:md5']";
// MindSpore 2.6 (ms_format "2.6") has no hash categories.
constexpr const char* kValidCategoryList26 =
    "['max', 'min', 'avg', 'count', 'negative zero count', 'positive zero count', 'nan count', "
    "'negative inf count', 'positive inf count', 'zero count', 'md5', 'l2norm']";

struct CategorySpelling {
  std::string_view name;
  StatCategory category;
};
constexpr CategorySpelling kCategorySpellings[] = {
    {"max", StatCategory::kMax},
    {"min", StatCategory::kMin},
    {"avg", StatCategory::kAvg},
    {"count", StatCategory::kCount},
    {"negative zero count", StatCategory::kNegativeZeroCount},
    {"positive zero count", StatCategory::kPositiveZeroCount},
    {"nan count", StatCategory::kNanCount},
    {"negative inf count", StatCategory::kNegativeInfCount},
    {"positive inf count", StatCategory::kPositiveInfCount},
    {"zero count", StatCategory::kZeroCount},
    {"md5", StatCategory::kMd5},
    {"l2norm", StatCategory::kL2Norm},
    {"hash", StatCategory::kSha1},
    {"hash:sha1", StatCategory::kSha1},
    {"hash:md5", StatCategory::kMd5},
};

bool computableOnDevice(StatCategory c) {
  return c == StatCategory::kMax || c == StatCategory::kMin || c == StatCategory::kAvg ||
         c == StatCategory::kL2Norm;
}

Error invalid(std::string message) {
  return makeError(ErrorCode::kInvalidConfig, std::move(message));
}

std::string notFound(std::string_view key) {
  return "Check dump json failed, " + std::string(key) + " not found";
}

// The reader of one job config. Each step checks one key in MindSpore's order and either
// fills plan_ or returns the error for that key; the first error wins.
class PlanParser {
 public:
  PlanParser(std::string_view text, const Environment& env) : env_(env) {
    plan_.config_text = std::string(text);
  }

  Result<DumpPlan> run();

 private:
  // "unsigned int": a JSON non-negative integer that fits in uint32 (-1, 1.0, "1" rejected).
  static Result<uint32_t> getUint(const json& v, std::string_view key);
  static Result<std::string> getString(const json& v, std::string_view key);
  static Result<bool> getBool(const json& v, std::string_view key);
  static Status checkArray(const json& v, std::string_view key);

  Status parseE2eSettings(const json& root);
  Status parseDumpMode(const json& v);
  Status parsePath(const json& common);
  Status parseNetName(const json& v);
  Status parseIteration(const json& v);
  Status parseInputOutput(const json& v);
  Status parseKernels(const json& v);
  Status parseSupportDevice(const json& v);
  Status parseOpDebugMode(const json& common);
  Status parseFileFormat(const json& common);
  Status parseOverflowNumber(const json& common);
  Status parseSavedData(const json& common);
  Status parseInitialIteration(const json& common);
  void checkStatCalcMode();
  Status parseStatisticCategory(const json& common);

  void warn(std::string message) { plan_.warnings.push_back(std::move(message)); }

  const Environment& env_;
  DumpPlan plan_;
};

Result<uint32_t> PlanParser::getUint(const json& v, std::string_view key) {
  if (!v.is_number_unsigned()) {
    return invalid("Dump config parse failed, " + std::string(key) +
                   " should be unsigned int type, but got: " + describe(v));
  }
  uint64_t x = v.get<uint64_t>();
  if (x > std::numeric_limits<uint32_t>::max()) {
    return invalid("Dump config parse failed, " + std::string(key) +
                   " should be at most 4294967295, but got: " + describe(v));
  }
  return static_cast<uint32_t>(x);
}

Result<std::string> PlanParser::getString(const json& v, std::string_view key) {
  if (!v.is_string()) {
    return invalid("Dump config parse failed, " + std::string(key) +
                   " should be string type, but got: " + describe(v));
  }
  return v.get<std::string>();
}

Result<bool> PlanParser::getBool(const json& v, std::string_view key) {
  if (!v.is_boolean()) {
    return invalid("Dump Json Parse Failed. '" + std::string(key) +
                   "' should be boolean type, but got: " + describe(v));
  }
  return v.get<bool>();
}

Status PlanParser::checkArray(const json& v, std::string_view key) {
  if (!v.is_array()) {
    return invalid("Dump config parse failed, " + std::string(key) +
                   " should be array type, but got: " + describe(v));
  }
  return {};
}

Result<DumpPlan> PlanParser::run() {
  // Not a key of the file, but it decides what the file may say (statistic_category).
  const std::string format_text = env_.dumpd_ms_format.value_or("");
  if (auto f = parseMsFormat(format_text)) {
    plan_.ms_format = *f;
  } else {
    return invalid(
        "ms_format (client option ms_format or DUMPD_MS_FORMAT) should be \"2.6\" or "
        "\"2.7\", but got: " +
        printable(format_text));
  }
  auto parsed = internal::parseJson(plan_.config_text);
  if (!parsed) return parsed.error();
  const json& root = parsed.value();
  if (!root.is_object()) {
    return invalid("Dump config parse failed, the dump json should be an object, but got: " +
                   describe(root));
  }

  if (auto s = parseE2eSettings(root); !s) return s.error();

  auto common_it = root.find(kCommonDumpSettings);
  if (common_it == root.end()) return invalid(notFound(kCommonDumpSettings));
  const json& common = *common_it;
  if (!common.is_object()) {
    return invalid(
        "Dump config parse failed, common_dump_settings should be object type, but "
        "got: " +
        describe(common));
  }
  for (const char* key :
       {"dump_mode", "net_name", "iteration", "input_output", "kernels", "support_device"}) {
    if (!common.contains(key)) return invalid(notFound(key));
  }

  if (auto s = parseDumpMode(common.at("dump_mode")); !s) return s.error();
  if (auto s = parsePath(common); !s) return s.error();
  if (auto s = parseNetName(common.at("net_name")); !s) return s.error();
  if (auto s = parseIteration(common.at("iteration")); !s) return s.error();
  if (auto s = parseInputOutput(common.at("input_output")); !s) return s.error();
  if (auto s = parseKernels(common.at("kernels")); !s) return s.error();
  if (auto s = parseSupportDevice(common.at("support_device")); !s) return s.error();
  if (auto s = parseOpDebugMode(common); !s) return s.error();
  if (auto s = parseFileFormat(common); !s) return s.error();
  if (auto s = parseOverflowNumber(common); !s) return s.error();
  if (auto s = parseSavedData(common); !s) return s.error();
  if (auto s = parseInitialIteration(common); !s) return s.error();
  checkStatCalcMode();
  if (auto s = parseStatisticCategory(common); !s) return s.error();
  return std::move(plan_);
}

Status PlanParser::parseE2eSettings(const json& root) {
  auto it = root.find(kE2eDumpSettings);
  if (it == root.end()) return {};
  const json& e2e = *it;
  if (!e2e.is_object()) {
    return invalid("Dump config parse failed, e2e_dump_settings should be object type, but got: " +
                   describe(e2e));
  }
  if (auto v = e2e.find("enable"); v != e2e.end()) {
    auto b = getBool(*v, "enable");
    if (!b) return b.error();
    plan_.e2e_enable = *b;
  }
  if (auto v = e2e.find("trans_flag"); v != e2e.end()) {
    auto b = getBool(*v, "trans_flag");
    if (!b) return b.error();
    plan_.trans_flag = *b;
  }
  if (auto v = e2e.find("save_kernel_args"); v != e2e.end()) {
    auto b = getBool(*v, "save_kernel_args");
    if (!b) return b.error();
    plan_.save_kernel_args = *b;
  }
  if (auto v = e2e.find("stat_calc_mode"); v != e2e.end()) {
    auto s = getString(*v, "stat_calc_mode");
    if (!s) return s.error();
    if (*s == "host") {
      plan_.stat_calc_mode = StatCalcMode::kHost;
    } else if (*s == "device") {
      plan_.stat_calc_mode = StatCalcMode::kDevice;
    } else {
      return invalid(
          "Dump Json parse failed, 'stat_calc_mode' only supports 'host' or 'device', "
          "but got: " +
          printable(*s) + ". Please set 'stat_calc_mode' to 'host' or 'device'");
    }
  }
  if (auto v = e2e.find("device_stat_precision_mode"); v != e2e.end()) {
    auto s = getString(*v, "device_stat_precision_mode");
    if (!s) return s.error();
    if (*s == "high" || *s == "low") {
      plan_.device_stat_precision_high = *s == "high";
    } else {
      return invalid(
          "Dump Json parse failed, 'device_stat_precision_mode' only supports 'high' or 'low', "
          "but got: " +
          printable(*s) + ". Please set 'device_stat_precision_mode' to 'high' or 'low'");
    }
  }
  if (auto v = e2e.find("sample_mode"); v != e2e.end()) {
    auto mode = getUint(*v, "sample_mode");
    if (!mode) return mode.error();
    if (*mode > 1) {
      return invalid("Dump Json Parse Failed. sample_mode should be 0, 1, but got: " +
                     std::to_string(*mode));
    }
    plan_.sample_mode = *mode == 1;
    // sample_num is read only when sampling is on (MindSpore ignores it otherwise).
    if (auto n = e2e.find("sample_num"); plan_.sample_mode && n != e2e.end()) {
      auto num = getUint(*n, "sample_num");
      if (!num) return num.error();
      if (*num == 0) {
        return invalid("Dump Json Parse Failed. sample_num should be greater than 0, but got: 0");
      }
      plan_.sample_num = *num;
    }
  }
  return {};
}

Status PlanParser::parseDumpMode(const json& v) {
  auto mode = getUint(v, "dump_mode");
  if (!mode) return mode.error();
  if (*mode > 2) {
    return invalid("Dump config parse failed, dump_mode should be 0, 1 or 2, but got " +
                   std::to_string(*mode));
  }
  plan_.dump_mode = static_cast<DumpMode>(*mode);
  return {};
}

Status PlanParser::parsePath(const json& common) {
  std::string path;
  if (auto it = common.find("path"); it != common.end()) {
    auto s = getString(*it, "path");
    if (!s) return s.error();
    path = std::move(s).value();
  }
  if (path.empty()) {
    // Absent or "": MindSpore falls back to $MS_DIAGNOSTIC_DATA_PATH/debug_dump.
    if (!env_.ms_diagnostic_data_path || env_.ms_diagnostic_data_path->empty()) {
      return invalid(
          "Dump path is empty. Please set it in dump json file or environment variable "
          "MS_DIAGNOSTIC_DATA_PATH.");
    }
    path = *env_.ms_diagnostic_data_path + "/debug_dump";
  }
  // dumpd deviation: '.' is accepted too (MindSpore allows only [A-Za-z0-9_/-]); control
  // characters get their own message because they are invisible in the echoed value.
  bool has_control = std::any_of(path.begin(), path.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7f;
  });
  if (has_control) {
    return invalid("Dump path must not contain control characters, but got: " + printable(path));
  }
  bool allowed = std::all_of(path.begin(), path.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '/' || c == '.';
  });
  if (!allowed) {
    return invalid("Dump path only support alphabets, digit or {'-', '_', '/', '.'}, but got: " +
                   printable(path));
  }
  if (path[0] != '/') {
    return invalid("Dump path only support absolute path and should start with '/', but got: " +
                   path);
  }
  plan_.path = std::move(path);
  return {};
}

Status PlanParser::parseNetName(const json& v) {
  auto name = getString(v, "net_name");
  if (!name) return name.error();
  bool ok = !name->empty() && std::all_of(name->begin(), name->end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
  if (!ok) {
    return invalid("net_name only supports alphabetic, digit, or {'-', '_'}, but got: " +
                   printable(*name));
  }
  plan_.net_name = std::move(name).value();
  return {};
}

Status PlanParser::parseIteration(const json& v) {
  auto text = getString(v, "iteration");
  if (!text) return text.error();
  auto set = IterationSet::parse(*text);
  if (!set) return set.error();
  plan_.iterations = std::move(set).value();
  return {};
}

Status PlanParser::parseInputOutput(const json& v) {
  auto io = getUint(v, "input_output");
  if (!io) return io.error();
  if (*io > 2) {
    return invalid("Dump Json Parse Failed. input_output should be 0, 1, 2, but got: " +
                   std::to_string(*io));
  }
  plan_.input_output = static_cast<IoSelect>(*io);
  return {};
}

Status PlanParser::parseKernels(const json& v) {
  if (auto s = checkArray(v, "kernels"); !s) return s;
  for (const json& item : v) {
    // dumpd deviation: MindSpore re-serialises each item (so 12 becomes "12" and a regex's
    // "\\d" stays doubled); dumpd takes the string value and rejects non-strings.
    if (!item.is_string()) {
      return invalid("Dump config parse failed, kernels should be an array of strings, but got: " +
                     describe(item));
    }
    plan_.kernels.push_back(item.get<std::string>());
  }
  // Entries are compiled (and a bad regex rejected) only when they are used, as in MindSpore.
  if (plan_.dump_mode == DumpMode::kKernels) {
    auto matcher = KernelMatcher::create(plan_.kernels, env_.cancel);
    if (!matcher) return matcher.error();
    plan_.compiled_kernels = std::make_shared<const KernelMatcher>(std::move(matcher).value());
  }
  return {};
}

Status PlanParser::parseSupportDevice(const json& v) {
  if (auto s = checkArray(v, "support_device"); !s) return s;
  std::vector<uint32_t> devices;
  for (const json& item : v) {
    auto id = getUint(item, "support_device");
    if (!id) return id.error();
    devices.push_back(*id);
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  plan_.support_device = std::move(devices);
  return {};
}

Status PlanParser::parseOpDebugMode(const json& common) {
  auto it = common.find("op_debug_mode");
  if (it == common.end()) return {};  // optional for dumpd (as in MindSpore's e2e mode)
  auto mode = getUint(*it, "op_debug_mode");
  if (!mode) return mode.error();
  uint32_t m = *mode;
  if (m == 1 || m == 2) {
    warn("op_debug_mode " + std::to_string(m) + " is treated as 3 (overflow dump)");
    m = 3;
  } else if (m != 0 && m != 3 && m != 4) {
    return invalid("Dump Json Parse Failed. op_debug_mode should be 0, 3, 4, but got: " +
                   std::to_string(m));
  }
  plan_.op_debug_mode = m;
  if (m == 4) {
    // Exception dump saves whatever op fails, whenever it fails, whole.
    if (!plan_.iterations.isAll()) {
      warn("op_debug_mode 4 does not support selecting iterations: iteration is set to all");
      plan_.iterations = IterationSet::all();
    }
    if (plan_.sample_mode) {
      warn("op_debug_mode 4 does not support sampling: sample_mode is set to 0");
      plan_.sample_mode = false;
    }
  }
  if (m != 0 && plan_.dump_mode != DumpMode::kAll) {
    warn("op_debug_mode " + std::to_string(m) + " does not support selecting kernels: dump_mode " +
         std::to_string(static_cast<int>(plan_.dump_mode)) + " is set to 0");
    plan_.dump_mode = DumpMode::kAll;
  }
  if (m == 3) {
    if (plan_.input_output != IoSelect::kBoth) {
      warn("op_debug_mode 3 saves inputs and outputs: input_output " +
           std::to_string(static_cast<int>(plan_.input_output)) + " is set to 0");
      plan_.input_output = IoSelect::kBoth;
    }
    if (plan_.stat_calc_mode == StatCalcMode::kDevice && !plan_.e2e_enable) {
      warn("op_debug_mode 3 with enable false: stat_calc_mode is set to 'host'");
      plan_.stat_calc_mode = StatCalcMode::kHost;
    }
  }
  return {};
}

Status PlanParser::parseFileFormat(const json& common) {
  auto it = common.find("file_format");
  if (it == common.end()) return {};  // dumpd default: npy
  auto s = getString(*it, "file_format");
  if (!s) return s.error();
  if (*s == "npy") {
    plan_.file_format = FileFormat::kNpy;
  } else if (*s == "bin") {
    plan_.file_format = FileFormat::kBin;
  } else {
    return invalid(
        "Dump Json Parse Failed. 'file_format' should be either 'npy' or 'bin', but "
        "got: " +
        printable(*s));
  }
  return {};
}

Status PlanParser::parseOverflowNumber(const json& common) {
  auto it = common.find("overflow_number");
  if (it == common.end()) return {};
  if (plan_.op_debug_mode != 3) {
    return invalid(
        "overflow_number only need to be set when op_debug_mode is 3. (got overflow_number: " +
        describe(*it) + " with op_debug_mode: " + std::to_string(plan_.op_debug_mode) + ")");
  }
  auto n = getUint(*it, "overflow_number");
  if (!n) return n.error();
  plan_.overflow_number = *n;
  return {};
}

Status PlanParser::parseSavedData(const json& common) {
  auto it = common.find("saved_data");
  if (it == common.end()) return {};  // default: tensor
  auto s = getString(*it, "saved_data");
  if (!s) return s.error();
  if (*s == "tensor") {
    plan_.saved_data = SavedData::kTensor;
  } else if (*s == "statistic") {
    plan_.saved_data = SavedData::kStatistic;
  } else if (*s == "full") {
    plan_.saved_data = SavedData::kFull;
  } else {
    return invalid(
        "Dump Json parse failed, saved_data only supports statistic, tensor, or full, "
        "but got: " +
        printable(*s) + ". Please set saved_data to either statistic, tensor, or full");
  }
  if (plan_.op_debug_mode == 4 && plan_.saved_data != SavedData::kTensor) {
    warn("op_debug_mode 4 saves tensors only: saved_data " + *s + " is set to tensor");
    plan_.saved_data = SavedData::kTensor;
  }
  return {};
}

Status PlanParser::parseInitialIteration(const json& common) {
  auto it = common.find("initial_iteration");
  if (it == common.end()) return {};
  auto n = getUint(*it, "initial_iteration");
  if (!n) return n.error();
  plan_.initial_iteration = *n;
  return {};
}

void PlanParser::checkStatCalcMode() {
  // Statistics computed by the producer replace the payload, so they cannot go with tensors.
  if (plan_.savesTensors() && plan_.stat_calc_mode == StatCalcMode::kDevice) {
    warn("stat_calc_mode 'device' needs saved_data statistic: stat_calc_mode is set to 'host'");
    plan_.stat_calc_mode = StatCalcMode::kHost;
  }
}

Status PlanParser::parseStatisticCategory(const json& common) {
  if (!plan_.savesStatistics()) return {};  // only read when statistics are saved
  auto it = common.find("statistic_category");
  if (it == common.end()) {
    plan_.statistic_category = {StatCategory::kMax, StatCategory::kMin, StatCategory::kL2Norm};
    return {};
  }
  if (auto s = checkArray(*it, "statistic_category"); !s) return s;
  std::string unsupported;
  std::string host_only;
  std::vector<StatCategory> categories;
  for (const json& item : *it) {
    const CategorySpelling* found = nullptr;
    if (item.is_string()) {
      const auto& name = item.get_ref<const std::string&>();
      for (const auto& spelling : kCategorySpellings) {
        if (spelling.name == name) found = &spelling;
      }
      if (plan_.ms_format == MsFormat::k26 && name.starts_with("hash")) found = nullptr;
    }
    if (found == nullptr) {
      if (!unsupported.empty()) unsupported += ", ";
      unsupported += describe(item);
      continue;
    }
    if (plan_.stat_calc_mode == StatCalcMode::kDevice && !computableOnDevice(found->category)) {
      if (!host_only.empty()) host_only += ", ";
      host_only += found->name;
      continue;
    }
    // Aliases are normalised first, so "hash" and "hash:sha1" are one duplicate. MindSpore 2.6
    // keeps duplicates (a column each).
    if (plan_.ms_format == MsFormat::k26 ||
        std::find(categories.begin(), categories.end(), found->category) == categories.end()) {
      categories.push_back(found->category);
    }
  }
  if (!unsupported.empty()) {
    return invalid("The following statistic_category is invalid: " + unsupported +
                   ", the valid statistic_category are as follows: " +
                   (plan_.ms_format == MsFormat::k26 ? kValidCategoryList26 : kValidCategoryList));
  }
  if (!host_only.empty()) {
    warn("statistic_category " + host_only +
         " can only be computed on host; dropped because stat_calc_mode is 'device' (device "
         "supports ['max', 'min', 'avg', 'l2norm'])");
  }
  plan_.statistic_category = std::move(categories);
  return {};
}

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
    return PlanParser(json_text, env).run();
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
  return out;
}

}  // namespace dumpd::config
