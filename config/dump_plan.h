// The job config (data_dump.json) parsed and validated into an immutable DumpPlan.
//
// Behaviour follows MindSpore's own parser (see docs/compatibility.md for every deviation):
// the same keys, types, defaults, forced values and error messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "config/flight_recorder.h"
#include "config/iteration_set.h"
#include "config/kernel_matcher.h"
#include "config/ms_format.h"
#include "config/saved_data.h"

namespace dumpd::config {

enum class DumpMode : uint8_t { kAll = 0, kKernels = 1, kMarked = 2 };
enum class IoSelect : uint8_t { kBoth = 0, kInputs = 1, kOutputs = 2 };
enum class FileFormat : uint8_t { kNpy, kBin };
enum class StatCalcMode : uint8_t { kHost, kDevice };

// One statistic.csv column, in the order MindSpore documents them.
enum class StatCategory : uint8_t {
  kMax,
  kMin,
  kAvg,
  kCount,
  kNegativeZeroCount,
  kPositiveZeroCount,
  kNanCount,
  kNegativeInfCount,
  kPositiveInfCount,
  kZeroCount,
  kL2Norm,
  kMd5,
  kSha1,
};

// The statistic.csv column header of a category ("Max Value", "MD5", ...).
std::string_view statCategoryHeader(StatCategory c);
// The config spelling of a category ("max", "negative zero count", "md5", "hash:sha1").
std::string_view statCategoryName(StatCategory c);

// net_name names a directory of the tree: at most NAME_MAX bytes.
inline constexpr size_t kMaxNetNameBytes = 255;

struct DumpPlan {
  std::string config_text;  // the job config, byte for byte (copied to .dump_metadata/)
  // The MindSpore generation the tree matches: not a key of the file, the producer's choice
  // (client option ms_format or $DUMPD_MS_FORMAT, see Environment).
  MsFormat ms_format = kDefaultMsFormat;

  // common_dump_settings
  DumpMode dump_mode = DumpMode::kAll;  // after forcing (op_debug_mode != 0 -> kAll)
  std::string path;                     // absolute; env fallback applied
  std::string net_name;
  IterationSet iterations;
  IoSelect input_output = IoSelect::kBoth;  // after forcing (op_debug_mode 3 -> kBoth)
  std::vector<std::string> kernels;         // as written in the file (before normalisation)
  // The compiled kernel entries (dump_mode 1), kept from validation so that a Filter built
  // from this plan does not compile every pattern a second time. Shared, immutable.
  std::shared_ptr<const KernelMatcher> compiled_kernels;
  std::vector<uint32_t> support_device;
  uint32_t op_debug_mode = 0;  // 0, 3 or 4 (1 and 2 become 3)
  // op_debug_mode 3: only ops that overflowed are written (their inputs and outputs).
  bool overflowDump() const { return op_debug_mode == 3; }
  uint32_t overflow_number = 0;  // 0 = no limit
  SavedData saved_data = SavedData::kTensor;
  std::vector<StatCategory> statistic_category;  // normalised, de-duplicated, config order
  FileFormat file_format = FileFormat::kNpy;
  uint32_t initial_iteration = 0;
  // dumpd extension: keep the iterations `iterations` does not select, write them on a
  // trigger (config/flight_recorder.h). Empty: no recorder.
  std::optional<FlightRecorderPlan> flight_recorder;

  // e2e_dump_settings
  bool e2e_enable = true;
  bool trans_flag = true;
  bool save_kernel_args = false;
  StatCalcMode stat_calc_mode = StatCalcMode::kHost;
  bool device_stat_precision_high = true;
  bool sample_mode = false;
  uint32_t sample_num = 100;

  // Values the parser forced or ignored, in check order ("op_debug_mode 3 forces
  // input_output to 0, ..."): MindSpore logs these as warnings; callers log or print them.
  std::vector<std::string> warnings;

  bool savesTensors() const { return saved_data != SavedData::kStatistic; }
  bool savesStatistics() const { return saved_data != SavedData::kTensor; }
  // True when a producer may send a device tensor's statistics instead of its bytes: only
  // statistics are saved, and none of their categories needs the bytes (md5, sha1).
  bool statisticsFromSums() const;
  bool supportsDevice(uint32_t device) const;
};

// Where environment values come from; tests pass their own.
struct Environment {
  std::optional<std::string> ms_diagnostic_data_path;  // MS_DIAGNOSTIC_DATA_PATH
  std::optional<std::string> mindspore_dump_config;    // MINDSPORE_DUMP_CONFIG
  // DUMPD_MS_FORMAT, or the client's ms_format option: "2.6" (absent or "": the default) or
  // "2.7". Anything else is an error.
  std::optional<std::string> dumpd_ms_format;
  // Not an environment variable: when set and true, parsing stops early with an error (the
  // daemon sets it when the client hung up while its config was being compiled).
  const std::atomic<bool>* cancel = nullptr;
  static Environment fromProcess();
};

// Parses and validates a job config. Errors carry MindSpore's message for the failing key,
// or "JSON syntax error at line L, column C: ..." for malformed JSON.
Result<DumpPlan> parseDumpPlan(std::string_view json_text, const Environment& env);

// Reads the file and parses it. `path` empty: use $MINDSPORE_DUMP_CONFIG.
Result<DumpPlan> loadDumpPlan(const std::string& path, const Environment& env);

// Reads a whole file; errors name the file.
Result<std::string> readTextFile(const std::string& path);

// One line: net, path, iterations, dump mode (and kernel count), saved_data, categories.
std::string summarizePlan(const DumpPlan& plan);

}  // namespace dumpd::config
