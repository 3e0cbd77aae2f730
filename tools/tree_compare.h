// Comparing two scanned dump trees (tools/dump_tree.h): matching their tensors and computing
// each pair's metrics (tools/compare_metrics.h) on a pool of threads. `dumpctl compare`
// (dumpctl/compare_command.cc) is its command line.
//
// Matching rules (for docs/): same rank, graph, iteration, location (see tools/dump_tree.h),
// op name (the left's after --map), io and slot; when a key occurs several times in one
// iteration the k-th occurrence on the left (by timestamp) meets the k-th on the right.
// Timestamps, op types, task and stream ids play no other part.
//
// Results do not depend on the thread count: a large pair is split into chunks whose partial
// sums are merged in chunk order.
#pragma once

#include <ostream>

#include "tools/compare_csv.h"
#include "tools/compare_result.h"
#include "tools/dump_tree.h"

namespace dumpd::tools {

// Fills `report`'s rows (in the report's order), bytes_read and counts (pairs, failed,
// left_only, right_only, errors, first_failure) from `left` and `right`, with `map` renaming
// left op names and report.thresholds judging each pair. `jobs` threads (0: every core). A
// progress bar is drawn on `progress_out` when `draw_progress`. A pair that cannot be read or
// allocated becomes an error row; the run goes on.
void compareTrees(const DumpTree& left, const DumpTree& right, const NameMap& map, unsigned jobs,
                  std::ostream& progress_out, bool draw_progress, CompareReport& report);

}  // namespace dumpd::tools
