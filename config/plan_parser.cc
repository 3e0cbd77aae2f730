#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

#include "config/json_util.h"
#include "config/kernel_matcher.h"
#include "config/plan_parser.h"

namespace dumpd::config::internal {
namespace {

constexpr const char* kCommonDumpSettings = "common_dump_settings";
constexpr const char* kE2eDumpSettings = "e2e_dump_settings";

}  // namespace

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
  // Before statistic_category: a recorder that saves statistics needs the categories even
  // when the job's own saved_data is "tensor".
  if (auto it = root.find("flight_recorder"); it != root.end()) {
    auto recorder = parseFlightRecorder(*it);
    if (!recorder) return recorder.error();
    plan_.flight_recorder = *recorder;
    if (plan_.op_debug_mode != 0) {
      // Overflow mode writes only the tensors that overflowed, of every iteration (4) or the
      // selected ones (3): a recorder keeping whole iterations beside it has nothing to add
      // that its own nan/inf triggers do not do better.
      return invalid("flight_recorder cannot be combined with op_debug_mode " +
                     std::to_string(plan_.op_debug_mode) +
                     " (overflow dump): use the recorder's nan/inf triggers, or remove "
                     "flight_recorder");
    }
  }
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
  // It names a directory of the dump tree (rank_{id}/{net_name}/...): a name the file system
  // cannot hold would fail at the first write (MindSpore checks only the characters; its
  // mkdir then fails with ENAMETOOLONG).
  if (name->size() > kMaxNetNameBytes) {
    return invalid("net_name is " + std::to_string(name->size()) +
                   " characters long; it names a directory of the dump tree, which holds at "
                   "most " +
                   std::to_string(kMaxNetNameBytes) + " (got \"" + name->substr(0, 32) + "...\")");
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

}  // namespace dumpd::config::internal
