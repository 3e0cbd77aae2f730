// The HTML report of `dumpctl compare --html`: one self-contained page (inline CSS and SVG, no
// script, nothing fetched) with the metrics along execution order as a chart, the first
// divergence marked, and the table of failing pairs.
#pragma once

#include <ostream>

#include "tools/compare_result.h"

namespace dumpd::tools {

void writeHtmlReport(std::ostream& out, const CompareReport& report);

}  // namespace dumpd::tools
