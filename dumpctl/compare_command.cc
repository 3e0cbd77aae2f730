// `dumpctl compare`: the command line. Scans both trees, compares them (tools/tree_compare.h),
// writes the CSV / HTML and the summary.
#include "dumpctl/compare_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "tools/compare_csv.h"
#include "tools/compare_report.h"
#include "tools/dump_tree.h"
#include "tools/tree_compare.h"

namespace dumpd::dumpctl {
namespace {

using tools::CompareReport;
using tools::CompareRow;
using tools::DumpTree;
using tools::NameMap;
using tools::Thresholds;

constexpr std::string_view kUsage =
    "usage: dumpctl compare LEFT RIGHT [options]\n"
    "  Matches two dump trees tensor by tensor (rank, graph, iteration, op name, io, slot)\n"
    "  and computes per pair: cosine similarity, max absolute error, accumulated relative\n"
    "  error, relative Euclidean distance, KL divergence, (mean;std), MAE, RMSE.\n"
    "  -o FILE                        write the result CSV\n"
    "  --html FILE                    write an HTML report\n"
    "  --map FILE                     CSV of \"left name,right name\" op name pairs\n"
    "  --min-cosine X                 fail below this cosine similarity (0.99)\n"
    "  --max-relative-euclidean X     fail above this relative Euclidean distance (0.05)\n"
    "  --max-kl X                     fail above this KL divergence (0.005)\n"
    "  --max-statistic-relative X     statistics-only pairs: fail above this relative\n"
    "                                 difference of Max/Min/Avg/L2Norm (0.05)\n"
    "  -j N                           threads (default: all cores)\n"
    "  -q                             no progress bar\n"
    "Exit: 0 all pairs pass, 1 a pair failed or could not be read, 2 usage,\n"
    "3 nothing to compare (a tree unreadable, no tensors, nothing matched).\n";

struct Options {
  std::string left, right, csv, html, map;
  Thresholds thresholds;
  unsigned jobs = 0;
  bool quiet = false;
  bool help = false;
};

Result<Options> parseArgs(const std::vector<std::string_view>& args) {
  Options o;
  std::vector<std::string_view> positional;
  auto bad = [](const std::string& why) { return makeError(ErrorCode::kInvalidArgument, why); };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    auto value = [&]() -> Result<std::string_view> {
      if (i + 1 >= args.size()) return bad(std::string(a) + " needs a value");
      return args[++i];
    };
    auto number = [&](double& out) -> Status {
      auto v = value();
      if (!v) return v.error();
      std::string text(*v);
      char* end = nullptr;
      out = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(out)) {
        return bad(std::string(a) + ": '" + text + "' is not a finite number");
      }
      return {};
    };
    Status s;
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "-q") {
      o.quiet = true;
    } else if (a == "-o" || a == "--html" || a == "--map") {
      auto v = value();
      if (!v) return v.error();
      (a == "-o" ? o.csv : a == "--html" ? o.html : o.map) = std::string(*v);
    } else if (a == "--min-cosine") {
      s = number(o.thresholds.min_cosine);
    } else if (a == "--max-relative-euclidean") {
      s = number(o.thresholds.max_relative_euclidean);
    } else if (a == "--max-kl") {
      s = number(o.thresholds.max_kl);
    } else if (a == "--max-statistic-relative") {
      s = number(o.thresholds.max_statistic_relative);
    } else if (a == "-j") {
      double n = 0;
      s = number(n);
      if (s && (n < 1 || n > 4096 || n != std::floor(n))) {
        s = bad("-j: '" + std::string(args[i]) + "' is not a thread count (1 to 4096)");
      }
      o.jobs = static_cast<unsigned>(s ? n : 0);
    } else if (a.size() > 1 && a[0] == '-') {
      return bad("unknown option '" + std::string(a) + "'");
    } else {
      positional.push_back(a);
    }
    if (!s) return s.error();
  }
  if (o.help) return o;
  if (positional.size() != 2) return bad("expected LEFT and RIGHT dump directories");
  o.left = std::string(positional[0]);
  o.right = std::string(positional[1]);
  if (o.jobs == 0) o.jobs = std::max(1u, std::thread::hardware_concurrency());
  return o;
}

void printSummary(const CompareReport& r, std::ostream& out) {
  char line[160];
  std::snprintf(line, sizeof line, "compared %llu pairs, %.1f MB in %.2f s (%.2f GB/s)\n",
                static_cast<unsigned long long>(r.pairs), static_cast<double>(r.bytes_read) / 1e6,
                r.seconds,
                r.seconds > 0 ? static_cast<double>(r.bytes_read) / r.seconds / 1e9 : 0.0);
  out << line << "failed " << r.failed << ", left only " << r.left_only << ", right only "
      << r.right_only << ", errors " << r.errors << "\n";
  if (r.first_failure) {
    const CompareRow& f = r.rows[*r.first_failure];
    out << "first divergence: rank " << f.rank << " graph " << f.graph << " iteration "
        << f.iteration << " op " << f.left_op << " " << f.tensor_index << ": " << f.note << "\n";
  } else if (r.errors == 0) {
    out << "all " << r.pairs << " pairs pass\n";
  }
}

}  // namespace

int runCompareCommand(const std::vector<std::string_view>& args, std::ostream& out,
                      std::ostream& err) {
  const auto start = std::chrono::steady_clock::now();
  auto options = parseArgs(args);
  if (!options) {
    err << "dumpctl compare: " << options.error().message << "\n" << kUsage;
    return 2;
  }
  const Options& o = *options;
  if (o.help) {
    out << kUsage;
    return 0;
  }
  NameMap map;
  if (Status s = o.map.empty() ? Status() : tools::readNameMap(o.map, map); !s) {
    err << "dumpctl compare: --map: " << s.error().message << "\n";
    return 2;
  }
  auto left = tools::scanDumpTree(o.left, o.jobs);
  auto right = left ? tools::scanDumpTree(o.right, o.jobs) : Result<DumpTree>(left.error());
  if (!left || !right) {
    err << "dumpctl compare: " << (left ? right : left).error().message << "\n";
    return 3;
  }
  for (const auto* tree : {&left.value(), &right.value()}) {
    if (tree->entries.empty()) {
      err << "dumpctl compare: no tensors found in " << tree->root << "\n";
      return 3;
    }
  }
  CompareReport report;
  report.left_root = o.left;
  report.right_root = o.right;
  report.thresholds = o.thresholds;
  const bool draw = !o.quiet && &err == &std::cerr && ::isatty(STDERR_FILENO) == 1;
  tools::compareTrees(*left, *right, map, o.jobs, err, draw, report);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int code = report.failed > 0 || report.errors > 0 ? 1 : 0;
  if (report.pairs == 0) {
    err << "dumpctl compare: no tensor of " << o.left << " matched one of " << o.right << "\n";
    code = 3;
  }
  if (!o.csv.empty()) {
    if (Status s = tools::writeFileAtomically(o.csv, tools::formatCompareCsv(report)); !s) {
      err << "dumpctl compare: -o: " << s.error().message << "\n";
      code = 3;
    }
  }
  if (!o.html.empty()) {
    std::ostringstream html;
    tools::writeHtmlReport(html, report);
    if (Status s = tools::writeFileAtomically(o.html, html.str()); !s) {
      err << "dumpctl compare: --html: " << s.error().message << "\n";
      code = 3;
    }
  }
  printSummary(report, out);
  return code;
}

}  // namespace dumpd::dumpctl
