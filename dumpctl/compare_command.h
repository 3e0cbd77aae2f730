// `dumpctl compare LEFT RIGHT [-o result.csv] [--html report.html] [--map names.csv] ...`:
// matches two dump trees tensor by tensor and writes a row of metrics per pair
// (shared/spec/compare.md).
#pragma once

#include <ostream>
#include <string_view>
#include <vector>

namespace dumpd::dumpctl {

// `args` are the words after "compare". Exit code: 0 every pair passed, 1 some pair failed the
// thresholds, 2 usage error, 3 the comparison could not be made (a tree unreadable, nothing
// matched).
int runCompareCommand(const std::vector<std::string_view>& args, std::ostream& out,
                      std::ostream& err);

}  // namespace dumpd::dumpctl
