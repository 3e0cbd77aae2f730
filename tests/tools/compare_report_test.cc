// The HTML report of `dumpctl compare --html`: a self-contained page (no script, nothing
// fetched), an SVG chart with the first divergence marked, exactly the failing rows in its
// table, every string from the dumps escaped, and a bounded size for huge comparisons.
#include "tools/compare_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "tools/svg_chart.h"

namespace dumpd::tools {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

CompareRow tensorRow(std::string op, double cosine, double euclid, double kl) {
  CompareRow row;
  row.kind = RowKind::kTensors;
  row.left_op = op;
  row.right_op = std::move(op);
  row.tensor_index = "output.0";
  row.dtype = "float32";
  row.shape = "[2,3]";
  row.elements = 6;
  row.metrics.cosine = cosine;
  row.metrics.relative_euclidean = euclid;
  row.metrics.kl_divergence = kl;
  row.metrics.max_absolute_error = euclid * 3;
  const Thresholds th;
  row.failed =
      !(cosine >= th.min_cosine) || !(euclid <= th.max_relative_euclidean) || !(kl <= th.max_kl);
  if (row.failed) row.note = "fails the thresholds";
  return row;
}

CompareRow otherRow(RowKind kind, std::string op, std::string note = "") {
  CompareRow row;
  row.kind = kind;
  row.left_op = kind == RowKind::kRightOnly ? "*" : op;
  row.right_op = kind == RowKind::kLeftOnly ? "*" : op;
  row.tensor_index = "input.0";
  row.dtype = "float16";
  row.shape = "[4]";
  row.metrics = {kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan, kNan};
  row.failed = kind == RowKind::kShapeMismatch || kind == RowKind::kError;
  row.note = std::move(note);
  return row;
}

// Sums the rows into the summary and finds the first failure, as the comparison does.
CompareReport finish(CompareReport report) {
  report.pairs = report.failed = report.left_only = report.right_only = report.errors = 0;
  report.first_failure.reset();
  for (size_t i = 0; i < report.rows.size(); ++i) {
    const CompareRow& row = report.rows[i];
    if (row.kind == RowKind::kLeftOnly) ++report.left_only;
    if (row.kind == RowKind::kRightOnly) ++report.right_only;
    if (row.kind == RowKind::kError) ++report.errors;
    if (row.kind == RowKind::kTensors || row.kind == RowKind::kStatistics) {
      ++report.pairs;
      if (row.failed) ++report.failed;
    }
    if (row.failed && !report.first_failure) report.first_failure = i;
  }
  return report;
}

// 60 ops that agree until op 40 (Default_Conv2D-op40), then diverge; a statistics-only pair,
// a shape mismatch, an unreadable file, two unmatched tensors.
CompareReport realisticReport() {
  CompareReport report;
  report.left_root = "/data/left/rank_0";
  report.right_root = "/data/right/rank_0";
  report.bytes_read = 123456789;
  report.seconds = 0.75;
  for (int i = 0; i < 60; ++i) {
    const std::string op =
        (i == 40 ? "Default_Conv2D-op" : "Default_MatMul-op") + std::to_string(i);
    if (i < 40) {
      report.rows.push_back(tensorRow(op, 1 - 1e-7 * i, 1e-6 * (i + 1), 1e-8 * i));
    } else {
      report.rows.push_back(tensorRow(op, 0.9 - 0.005 * (i - 40), 0.2 + 0.01 * i, 0.01 * i));
    }
  }
  CompareRow stats = otherRow(RowKind::kStatistics, "Default_ReduceSum-op61");
  stats.statistics = StatisticPair{1, 1.5, 0, 0, 0.5, 0.6, 2, 2.1, 0.5, "Max Value"};
  stats.failed = true;
  report.rows.push_back(stats);
  report.rows.push_back(otherRow(RowKind::kShapeMismatch, "Default_Reshape-op62",
                                 "4 elements on the left, 6 on the right"));
  report.rows.push_back(otherRow(RowKind::kError, "Default_Add-op63", "truncated .npy"));
  report.rows.push_back(otherRow(RowKind::kLeftOnly, "Default_Cast-op64"));
  report.rows.push_back(otherRow(RowKind::kRightOnly, "Default_Cast-op65"));
  report.rows.push_back(tensorRow("Default_ReLU-op66", 0.999, 0.01, 0.001));
  return finish(std::move(report));
}

std::string render(const CompareReport& report) {
  std::ostringstream out;
  writeHtmlReport(out, report);
  return out.str();
}

std::string svgOf(const std::string& page) {
  const size_t begin = page.find("<svg");
  const size_t end = page.find("</svg>");
  if (begin == std::string::npos || end == std::string::npos) return "";
  return page.substr(begin, end + 6 - begin);
}

// The row indices the failing-pairs table lists, in order.
std::vector<size_t> tableRows(const std::string& page) {
  std::vector<size_t> rows;
  const std::regex attr("data-row=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), attr); it != std::sregex_iterator();
       ++it) {
    rows.push_back(std::stoul((*it)[1]));
  }
  return rows;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(CompareReportTest, PageIsSelfContained) {
  const std::string page = render(realisticReport());
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("</html>"), std::string::npos);
  std::string lower = page;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* banned :
       {"<script", "http:", "https:", "//", "src=", "url(", "@import", "<link", "<img", "<iframe",
        "<object", "<embed", "javascript:", "onload", "onclick", "@font-face"}) {
    EXPECT_EQ(lower.find(banned), std::string::npos) << banned;
  }
}

TEST(CompareReportTest, HeaderShowsRootsThresholdsAndCounts) {
  const std::string page = render(realisticReport());
  EXPECT_NE(page.find("/data/left/rank_0"), std::string::npos);
  EXPECT_NE(page.find("/data/right/rank_0"), std::string::npos);
  EXPECT_NE(page.find("cosine \xE2\x89\xA5 0.99"), std::string::npos);
  EXPECT_NE(page.find("KL divergence \xE2\x89\xA4 0.005"), std::string::npos);
  EXPECT_NE(page.find("<div class=\"n\">62</div><div class=\"k\">pairs</div>"), std::string::npos);
  EXPECT_NE(page.find("<div class=\"n\">21</div><div class=\"k\">failed</div>"), std::string::npos);
  EXPECT_NE(page.find("<div class=\"n\">1</div><div class=\"k\">errors</div>"), std::string::npos);
  EXPECT_NE(page.find("118 MiB in 0.75 s"), std::string::npos);
}

TEST(CompareReportTest, ChartMarksTheFirstDivergenceWithTheOpName) {
  const std::string svg = svgOf(render(realisticReport()));
  ASSERT_FALSE(svg.empty());
  EXPECT_EQ(count(svg, "class=\"marker\""), 1u);
  EXPECT_NE(svg.find("first divergence: row 40 Default_Conv2D-op40 output.0"), std::string::npos);
  EXPECT_NE(svg.find("href=\"#row-40\""), std::string::npos);
  // Three tensor panels and the statistics panel, each with its threshold line.
  EXPECT_EQ(count(svg, "class=\"panel\""), 4u);
  EXPECT_EQ(count(svg, "class=\"thr\""), 4u);
  EXPECT_GT(count(svg, "class=\"fail\""), 20u);
}

TEST(CompareReportTest, TableListsExactlyTheFailingRows) {
  const CompareReport report = realisticReport();
  const std::string page = render(report);
  std::vector<size_t> expected;
  for (size_t i = 40; i < 60; ++i) expected.push_back(i);
  expected.insert(expected.end(), {60, 61, 62});  // statistics, shape mismatch, error
  EXPECT_EQ(tableRows(page), expected);
  EXPECT_NE(page.find("Failing pairs (23)"), std::string::npos);
  EXPECT_EQ(count(page, "class=\"first\""), 1u);
  EXPECT_NE(page.find("<tr id=\"row-40\" data-row=\"40\" class=\"first\">"), std::string::npos);
  EXPECT_NE(page.find("Only on the left (1)"), std::string::npos);
  EXPECT_NE(page.find("Default_Cast-op65"), std::string::npos);
  EXPECT_NE(page.find("4 elements on the left, 6 on the right"), std::string::npos);
}

TEST(CompareReportTest, TableIsCappedWithACountOfTheRest) {
  CompareReport report;
  for (int i = 0; i < 1500; ++i)
    report.rows.push_back(tensorRow("op" + std::to_string(i), 0.5, 1, 1));
  const std::string page = render(finish(std::move(report)));
  EXPECT_EQ(tableRows(page).size(), 1000u);
  EXPECT_NE(page.find("and 500 more failing rows"), std::string::npos);
}

TEST(CompareReportTest, EscapesEveryStringFromTheDumps) {
  const std::string hostile = "<script>alert(1)</script>&\"'";
  CompareReport report = realisticReport();
  report.left_root = "/tmp/" + hostile;
  report.rows[40].left_op = hostile;
  report.rows[40].right_op = hostile + "x";
  report.rows[40].note = hostile;
  report.rows[40].tensor_index = hostile;
  report.rows[64].right_op = hostile;  // right only
  report.rows[45].note = std::string("ctl\x01\x7f bad utf8 \xC3\x28 \xED\xA0\x80 ok \xC3\xA9");
  const std::string page = render(finish(std::move(report)));
  EXPECT_EQ(page.find(hostile), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("alert(1)</script>"), std::string::npos);
  const std::string escaped = "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#39;";
  EXPECT_GE(count(page, escaped), 6u);  // title, header, verdict, marker, tooltip, table, list
  EXPECT_NE(svgOf(page).find(escaped), std::string::npos);
  EXPECT_EQ(page.find('\x01'), std::string::npos);
  EXPECT_EQ(page.find('\x7f'), std::string::npos);
  EXPECT_NE(page.find("ctl\xEF\xBF\xBD\xEF\xBF\xBD bad utf8 \xEF\xBF\xBD( \xEF\xBF\xBD\xEF\xBF\xBD"
                      "\xEF\xBF\xBD ok \xC3\xA9"),
            std::string::npos);
}

TEST(CompareReportTest, NonFiniteMetricsNeverReachACoordinate) {
  CompareReport report;
  report.rows.push_back(tensorRow("a", 1, 0, 0));
  report.rows.push_back(tensorRow("b", kNan, kNan, kNan));
  report.rows.push_back(tensorRow("c", 0.5, kInf, kInf));
  report.rows.push_back(tensorRow("d", -kInf, -kInf, kNan));
  report.rows.push_back(tensorRow("e", 0.99999, 1e-30, -1e-12));  // below the log scale
  report.rows.push_back(tensorRow("f", 1, 0, 0));
  const std::string svg = svgOf(render(finish(std::move(report))));
  ASSERT_FALSE(svg.empty());
  const std::regex attr("\\s(x|y|x1|x2|y1|y2|cx|cy|r|width|height|d|viewBox|points)=\"([^\"]*)\"");
  const std::regex numeric("[-0-9. MLlhz]*");
  size_t checked = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), attr); it != std::sregex_iterator();
       ++it, ++checked) {
    const std::string value = (*it)[2];
    EXPECT_TRUE(std::regex_match(value, numeric)) << (*it)[0];
  }
  EXPECT_GT(checked, 50u);
  // Non-finite values are drawn as markers at the panel's edge, red when the row fails.
  EXPECT_GE(count(svg, "l-4 7h8z"), 3u);
}

TEST(CompareReportTest, AllPassingSaysSoAndMarksNothing) {
  CompareReport report;
  report.left_root = "/l";
  report.right_root = "/r";
  for (int i = 0; i < 40; ++i) report.rows.push_back(tensorRow("op" + std::to_string(i), 1, 0, 0));
  report.rows.push_back(otherRow(RowKind::kLeftOnly, "extra"));
  const std::string page = render(finish(std::move(report)));
  EXPECT_NE(page.find("All 40 pairs pass the thresholds."), std::string::npos);
  EXPECT_EQ(page.find("class=\"marker\""), std::string::npos);
  EXPECT_EQ(page.find("irst divergence"), std::string::npos);
  EXPECT_EQ(page.find("class=\"fail\""), std::string::npos);
  EXPECT_TRUE(tableRows(page).empty());
  EXPECT_NE(page.find("No pair fails the thresholds."), std::string::npos);
  EXPECT_NE(page.find("<svg"), std::string::npos);
}

TEST(CompareReportTest, NumbersHaveSixSignificantDigits) {
  CompareReport report;
  report.rows.push_back(tensorRow("op", 0.123456789, 12345678.9, kNan));
  const std::string page = render(finish(std::move(report)));
  EXPECT_NE(page.find(">0.123457</td>"), std::string::npos);
  EXPECT_NE(page.find(">1.23457e+07</td>"), std::string::npos);
  EXPECT_NE(page.find(">NaN</td>"), std::string::npos);
  EXPECT_EQ(formatNumber(kInf), "inf");
  EXPECT_EQ(formatNumber(-0.0), "0");
}

TEST(CompareReportTest, HundredThousandRowsStayUnderThreeMegabytes) {
  CompareReport report;
  report.left_root = "/l";
  report.right_root = "/r";
  const std::string prefix = "Default--network-TrainOneStepCell--network-WithLossCell--backbone-";
  for (int i = 0; i < 100000; ++i) {
    const double drift = i < 50000 ? 1e-7 * (i % 97) : 0.02 * (i % 13);
    CompareRow row = tensorRow(prefix + "MatMul-op" + std::to_string(i), 1 - drift, drift, drift);
    if (i % 1000 == 7) row.metrics.kl_divergence = kNan;
    report.rows.push_back(std::move(row));
  }
  const CompareReport done = finish(std::move(report));
  ASSERT_EQ(done.first_failure, 50000u);
  const std::string page = render(done);
  EXPECT_LT(page.size(), 3u << 20);
  const std::string svg = svgOf(page);
  EXPECT_LT(count(svg, "<circle") + count(svg, "<path class=\"fail\""), 3 * 2600u);
  EXPECT_NE(svg.find("first divergence: row 50000"), std::string::npos);
  EXPECT_EQ(tableRows(page).size(), 1000u);
}

TEST(DownsampleTest, KeepsExtremesFailingPointsAndTheMarkedOne) {
  std::vector<ChartPoint> points;
  for (size_t i = 0; i < 100000; ++i) points.push_back({i, std::sin(i * 0.001), false});
  points[31337].failing = true;  // fails for another reason: its value is unremarkable
  points[31337].value = 0;
  points[77777].value = kNan;
  const std::vector<ChartPoint> kept = downsamplePoints(points, 1000, 4242);
  EXPECT_LE(kept.size(), 2010u);
  std::set<size_t> xs;
  for (const ChartPoint& p : kept) xs.insert(p.x);
  EXPECT_TRUE(xs.count(31337));
  EXPECT_TRUE(xs.count(77777));
  EXPECT_TRUE(xs.count(4242));
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end(),
                             [](const ChartPoint& a, const ChartPoint& b) { return a.x < b.x; }));
  // The extremes of the finite values survive.
  const auto finiteMinMax = [](const std::vector<ChartPoint>& v) {
    double lo = kInf, hi = -kInf;
    for (const ChartPoint& p : v) {
      if (std::isfinite(p.value)) lo = std::min(lo, p.value), hi = std::max(hi, p.value);
    }
    return std::pair{lo, hi};
  };
  EXPECT_EQ(finiteMinMax(kept), finiteMinMax(points));
}

TEST(DownsampleTest, FewPointsAreKeptAsTheyAre) {
  std::vector<ChartPoint> points;
  for (size_t i = 0; i < 500; ++i) points.push_back({i * 3, 1.0 / (i + 1), i % 7 == 0});
  EXPECT_EQ(downsamplePoints(points, 1000, std::nullopt).size(), 500u);
}

}  // namespace
}  // namespace dumpd::tools
