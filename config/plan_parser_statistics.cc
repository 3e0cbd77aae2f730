#include <algorithm>
#include <set>

#include "config/json_util.h"
#include "config/plan_parser.h"

namespace dumpd::config::internal {
namespace {

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

}  // namespace

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
  if (!plan_.overflowDump()) {
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
  // Only read when statistics are saved, by the job or by its flight recorder's triggers.
  const bool recorder_saves =
      plan_.flight_recorder && plan_.flight_recorder->saved_data != SavedData::kTensor;
  if (!plan_.savesStatistics() && !recorder_saves) return {};
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

}  // namespace dumpd::config::internal
