#include "tools/compare_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "tools/svg_chart.h"

namespace dumpd::tools {
namespace {

constexpr size_t kMaxTableRows = 1000;
constexpr size_t kMaxUnmatchedListed = 200;
constexpr size_t kChartBuckets = 1000;  // about 2000 points per series at most

// No url(), no @import, no web fonts: the page must render with nothing fetched.
constexpr std::string_view kStyle = R"css(
:root { color-scheme: light; --fg: #1f2937; --muted: #6b7280; --line: #e5e7eb; --bg: #f6f7f9;
  --card: #fff; --red: #c62828; --red-bg: #fdecec; --green: #1b7f3b; --green-bg: #e8f5ec; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 22px; margin: 0 0 14px; }
h2 { font-size: 17px; margin: 30px 0 10px; }
code, td.op { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 12.5px; }
dl.roots { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; margin: 0; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
.verdict { padding: 10px 14px; border: 1px solid; border-radius: 6px; margin: 16px 0 12px; }
.verdict.pass { background: var(--green-bg); border-color: #b7e0c3; color: var(--green); }
.verdict.fail { background: var(--red-bg); border-color: #f3b8b8; color: var(--red); }
.verdict a { color: inherit; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px;
  padding: 7px 14px; min-width: 104px; }
.card .n { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .k { color: var(--muted); font-size: 12px; }
.card.bad .n { color: var(--red); }
.meta { color: var(--muted); margin: 6px 0; }
.figure { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: 8px; }
svg.chart { display: block; width: 100%; height: auto; font-family: inherit; }
svg .plot { fill: #fff; stroke: #cfd4da; }
svg .bad { fill: #fdf2f2; }
svg .grid { stroke: #eef0f3; }
svg .thr { stroke: #b45309; stroke-width: 1.2; stroke-dasharray: 6 4; }
svg .series { fill: none; stroke: #2f6db3; stroke-width: 1.2; stroke-linejoin: round; }
svg .ok { fill: #2f6db3; }
svg .fail { fill: #d32f2f; }
svg .tick { font-size: 11px; fill: #6b7280; }
svg .axis { font-size: 12px; fill: #4b5563; }
svg .ptitle { font-size: 13px; font-weight: 600; fill: #1f2937; }
svg .thr-label { font-size: 11px; fill: #b45309; }
svg .marker line { stroke: #b71c1c; stroke-width: 1.5; stroke-dasharray: 4 3; }
svg .marker text { font-size: 12px; font-weight: 600; fill: #b71c1c; }
.legend { display: flex; flex-wrap: wrap; gap: 18px; color: var(--muted); font-size: 12px;
  padding: 6px 8px 2px; }
.sw { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 5px; }
.sw.line { width: 16px; height: 0; border-radius: 0; border-top: 2px dashed #b45309;
  vertical-align: 3px; }
.sw.mark { width: 0; height: 12px; border-radius: 0; border-left: 2px dashed #b71c1c;
  vertical-align: -1px; }
.tri { display: inline-block; width: 0; height: 0; margin-right: 5px; border-left: 5px solid transparent;
  border-right: 5px solid transparent; border-bottom: 9px solid #6b7280; }
table { border-collapse: collapse; width: 100%; background: var(--card); border: 1px solid var(--line);
  font-size: 12.5px; }
th, td { padding: 5px 7px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #eef1f5; position: sticky; top: 0; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.op { overflow-wrap: anywhere; min-width: 11em; }
td.note { min-width: 12em; }
td.bad { color: var(--red); font-weight: 600; }
tr.first td { background: #fff3f3; }
tr.first td:first-child { box-shadow: inset 3px 0 var(--red); }
.tag { display: inline-block; font-size: 11px; padding: 0 6px; border-radius: 9px;
  background: #fde2e2; color: var(--red); margin-right: 4px; white-space: nowrap; }
.more, .none { color: var(--muted); font-style: italic; }
details { background: var(--card); border: 1px solid var(--line); border-radius: 6px;
  padding: 6px 12px; margin: 8px 0; }
summary { cursor: pointer; font-weight: 600; }
ul.unmatched { margin: 6px 0; padding-left: 20px; }
footer { color: var(--muted); font-size: 12px; margin-top: 36px; }
)css";

void esc(std::ostream& out, std::string_view text) { writeEscaped(out, text); }

bool charted(const CompareRow& row) {
  return row.kind == RowKind::kTensors || row.kind == RowKind::kStatistics;
}

bool listedAsFailing(const CompareRow& row) {
  return (charted(row) && row.failed) || row.kind == RowKind::kShapeMismatch ||
         row.kind == RowKind::kError;
}

// Whether a metric that is a number lies on the failing side of its threshold (NaN does not).
bool belowMin(double value, double min) { return !std::isnan(value) && value < min; }
bool aboveMax(double value, double max) { return !std::isnan(value) && value > max; }

const std::string& opName(const CompareRow& row) {
  return row.left_op == "*" ? row.right_op : row.left_op;
}

std::string humanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  auto v = static_cast<double>(bytes);
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(units)) {
    v /= 1024;
    ++unit;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.3g %s", v, units[unit]);
  return buf;
}

std::string rowLabel(const CompareRow& row) { return opName(row) + " " + row.tensor_index; }

// The chart's panels from the charted rows: a point per row, failing when its metric is on the
// wrong side of the threshold, or in every panel when the row fails for another reason (its
// non-finite values do not match).
Chart buildChart(const CompareReport& report) {
  const Thresholds& th = report.thresholds;
  ChartPanel cosine{"Cosine similarity", ChartScale::kLinear, 0.9, 1, th.min_cosine, true, {}};
  ChartPanel euclid{"Relative Euclidean distance",
                    ChartScale::kLog,
                    1e-8,
                    1,
                    th.max_relative_euclidean,
                    false,
                    {}};
  ChartPanel kl{"KL divergence", ChartScale::kLog, 1e-8, 1, th.max_kl, false, {}};
  ChartPanel stats{"Statistics: largest relative difference",
                   ChartScale::kLog,
                   1e-8,
                   1,
                   th.max_statistic_relative,
                   false,
                   {}};
  double cos_low = 0.9, euclid_high = 0, kl_high = 0, stats_high = 0;
  for (size_t i = 0; i < report.rows.size(); ++i) {
    const CompareRow& row = report.rows[i];
    if (row.kind == RowKind::kStatistics) {
      const double v = row.statistics ? row.statistics->worst_relative : std::nan("");
      if (std::isfinite(v)) stats_high = std::max(stats_high, v);
      stats.points.push_back({i, v, row.failed});
      continue;
    }
    if (row.kind != RowKind::kTensors) continue;
    const PairMetrics& m = row.metrics;
    const bool cos_bad = belowMin(m.cosine, th.min_cosine);
    const bool euclid_bad = aboveMax(m.relative_euclidean, th.max_relative_euclidean);
    const bool kl_bad = aboveMax(m.kl_divergence, th.max_kl);
    const bool other = row.failed && !cos_bad && !euclid_bad && !kl_bad;
    if (std::isfinite(m.cosine)) cos_low = std::min(cos_low, m.cosine);
    if (std::isfinite(m.relative_euclidean)) {
      euclid_high = std::max(euclid_high, m.relative_euclidean);
    }
    if (std::isfinite(m.kl_divergence)) kl_high = std::max(kl_high, m.kl_divergence);
    cosine.points.push_back({i, m.cosine, cos_bad || other});
    euclid.points.push_back({i, m.relative_euclidean, euclid_bad || other});
    kl.points.push_back({i, m.kl_divergence, kl_bad || other});
  }
  // Cosine from min(observed, 0.9) to 1, on a round tenth; the log panels from 1e-8 to the
  // decade above the largest value, and at least a decade above the threshold.
  cosine.low = std::max(-1.0, std::floor(cos_low * 10 + 1e-9) / 10);
  const auto decadeAbove = [](double observed, double threshold) {
    const double top = std::max({observed, threshold * 10, 1e-7});
    return std::pow(10.0, std::ceil(std::log10(top) - 1e-9));
  };
  euclid.high = decadeAbove(euclid_high, th.max_relative_euclidean);
  kl.high = decadeAbove(kl_high, th.max_kl);
  stats.high = decadeAbove(stats_high, th.max_statistic_relative);

  Chart chart;
  chart.x_count = report.rows.size();
  for (ChartPanel* panel : {&cosine, &euclid, &kl, &stats}) {
    if (panel->points.empty()) continue;
    panel->points = downsamplePoints(panel->points, kChartBuckets, report.first_failure);
    chart.panels.push_back(std::move(*panel));
  }
  if (report.first_failure && *report.first_failure < report.rows.size()) {
    const size_t at = *report.first_failure;
    chart.marker = ChartMarker{
        at, "first divergence: row " + std::to_string(at) + " " + rowLabel(report.rows[at]),
        "row-" + std::to_string(at)};
  }
  chart.tooltip = [&report](size_t x) {
    const CompareRow& row = report.rows[x];
    std::string text = "row " + std::to_string(x) + ": " + rowLabel(row);
    if (row.kind == RowKind::kTensors) {
      text += "\ncosine " + formatNumber(row.metrics.cosine) + ", rel. Euclidean " +
              formatNumber(row.metrics.relative_euclidean) + ", KL " +
              formatNumber(row.metrics.kl_divergence);
    }
    if (!row.note.empty()) text += "\n" + row.note;
    return text;
  };
  return chart;
}

void writeHeader(std::ostream& out, const CompareReport& report) {
  const Thresholds& th = report.thresholds;
  out << "<header>\n<h1>Dump comparison</h1>\n<dl class=\"roots\"><dt>Left (my output)</dt><dd>"
         "<code>";
  esc(out, report.left_root);
  out << "</code></dd><dt>Right (ground truth)</dt><dd><code>";
  esc(out, report.right_root);
  out << "</code></dd></dl>\n";

  const size_t mismatched = static_cast<size_t>(
      std::count_if(report.rows.begin(), report.rows.end(),
                    [](const CompareRow& r) { return r.kind == RowKind::kShapeMismatch; }));
  if (report.failed == 0 && report.errors == 0 && mismatched == 0 && report.pairs > 0) {
    out << "<p class=\"verdict pass\">All " << report.pairs << " pairs pass the thresholds.</p>\n";
  } else if (report.pairs == 0 && report.errors == 0 && mismatched == 0) {
    out << "<p class=\"verdict fail\">No tensor pairs were compared.</p>\n";
  } else {
    out << "<p class=\"verdict fail\">" << report.failed << " of " << report.pairs
        << " pairs fail the thresholds";
    if (report.errors > 0) out << "; " << report.errors << " could not be read";
    if (mismatched > 0) out << "; " << mismatched << " differ in shape";
    out << ".";
    if (report.first_failure && *report.first_failure < report.rows.size()) {
      const size_t at = *report.first_failure;
      const CompareRow& row = report.rows[at];
      out << "<br>First divergence: <a href=\"#row-" << at << "\">row " << at << "</a>, <code>";
      esc(out, opName(row));
      out << "</code> ";
      esc(out, row.tensor_index);
      if (!row.note.empty()) {
        out << " \xE2\x80\x94 ";
        esc(out, row.note);
      }
    }
    out << "</p>\n";
  }

  out << "<div class=\"cards\">";
  const auto card = [&out](const char* name, uint64_t n, bool bad) {
    out << "<div class=\"card" << (bad && n > 0 ? " bad" : "") << "\"><div class=\"n\">" << n
        << "</div><div class=\"k\">" << name << "</div></div>";
  };
  card("pairs", report.pairs, false);
  card("failed", report.failed, true);
  card("left only", report.left_only, false);
  card("right only", report.right_only, false);
  card("errors", report.errors, true);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3g", report.seconds);
  out << "</div>\n<p class=\"meta\">Thresholds: cosine \xE2\x89\xA5 " << formatNumber(th.min_cosine)
      << " \xC2\xB7 relative Euclidean distance \xE2\x89\xA4 "
      << formatNumber(th.max_relative_euclidean) << " \xC2\xB7 KL divergence \xE2\x89\xA4 "
      << formatNumber(th.max_kl) << " \xC2\xB7 statistics relative difference \xE2\x89\xA4 "
      << formatNumber(th.max_statistic_relative) << "</p>\n<p class=\"meta\">Read "
      << humanBytes(report.bytes_read) << " in " << seconds << " s";
  if (report.seconds > 0) {
    out << " ("
        << humanBytes(
               static_cast<uint64_t>(static_cast<double>(report.bytes_read) / report.seconds))
        << "/s)";
  }
  out << ".</p>\n</header>\n";
}

void writeChartSection(std::ostream& out, const CompareReport& report) {
  out << "<section>\n<h2>Metrics along execution order</h2>\n";
  const Chart chart = buildChart(report);
  if (chart.panels.empty()) {
    out << "<p class=\"none\">No compared pairs to chart.</p>\n</section>\n";
    return;
  }
  out << "<div class=\"figure\">\n";
  writeSvgChart(out, chart);
  out << "<div class=\"legend\"><span><span class=\"sw\" style=\"background:#2f6db3\"></span>"
         "passes</span><span><span class=\"sw\" style=\"background:#d32f2f\"></span>fails"
         "</span><span><span class=\"sw line\"></span>threshold (failing side shaded)</span>"
         "<span><span class=\"tri\"></span>NaN or infinite, drawn at the panel's edge</span>";
  if (chart.marker) out << "<span><span class=\"sw mark\"></span>first divergence</span>";
  out << "</div>\n</div>\n</section>\n";
}

void writeMetricCell(std::ostream& out, double value, bool bad) {
  out << "<td class=\"num" << (bad ? " bad" : "") << "\">" << formatNumber(value) << "</td>";
}

void writeFailingRow(std::ostream& out, const CompareReport& report, size_t i) {
  const CompareRow& row = report.rows[i];
  const Thresholds& th = report.thresholds;
  const bool first = report.first_failure == i;
  out << "<tr id=\"row-" << i << "\" data-row=\"" << i << "\"" << (first ? " class=\"first\"" : "")
      << "><td class=\"num\">" << i << "</td><td class=\"num\">" << row.rank << '/' << row.graph
      << '/' << row.iteration << "</td><td class=\"op\">";
  esc(out, row.left_op);
  out << "</td><td class=\"op\">";
  esc(out, row.right_op);
  out << "</td><td>";
  esc(out, row.tensor_index);
  out << "</td><td>";
  esc(out, row.dtype);
  out << "</td><td>";
  esc(out, row.shape);
  out << "</td>";
  if (row.kind == RowKind::kTensors) {
    const PairMetrics& m = row.metrics;
    writeMetricCell(out, m.cosine, belowMin(m.cosine, th.min_cosine));
    writeMetricCell(out, m.relative_euclidean,
                    aboveMax(m.relative_euclidean, th.max_relative_euclidean));
    writeMetricCell(out, m.kl_divergence, aboveMax(m.kl_divergence, th.max_kl));
    writeMetricCell(out, m.max_absolute_error, false);
  } else {
    out << "<td class=\"num\">\xE2\x80\x94</td><td class=\"num\">\xE2\x80\x94</td>"
           "<td class=\"num\">\xE2\x80\x94</td><td class=\"num\">\xE2\x80\x94</td>";
  }
  out << "<td class=\"note\">";
  if (row.kind == RowKind::kShapeMismatch) out << "<span class=\"tag\">shape</span>";
  if (row.kind == RowKind::kError) out << "<span class=\"tag\">error</span>";
  if (row.kind == RowKind::kStatistics && row.statistics) {
    out << "<span class=\"tag\">statistics</span>";
    esc(out, row.statistics->worst_column);
    out << " differs by " << formatNumber(row.statistics->worst_relative) << ". ";
  }
  esc(out, row.note);
  out << "</td></tr>\n";
}

void writeFailingTable(std::ostream& out, const CompareReport& report) {
  size_t total = 0;
  for (const CompareRow& row : report.rows) total += listedAsFailing(row) ? 1 : 0;
  out << "<section>\n<h2>Failing pairs (" << total << ")</h2>\n";
  if (total == 0) {
    out << "<p class=\"none\">No pair fails the thresholds.</p>\n</section>\n";
    return;
  }
  out << "<table class=\"failing\">\n<thead><tr><th>Row</th><th>Rank/graph/iter</th>"
         "<th>Left op</th><th>Right op</th><th>Tensor</th><th>Dtype</th>"
         "<th>Shape</th><th>Cosine</th><th>Rel. Euclid.</th><th>KL</th><th>Max abs err</th>"
         "<th>Note</th></tr></thead>\n<tbody>\n";
  size_t listed = 0;
  for (size_t i = 0; i < report.rows.size() && listed < kMaxTableRows; ++i) {
    if (!listedAsFailing(report.rows[i])) continue;
    writeFailingRow(out, report, i);
    ++listed;
  }
  out << "</tbody>\n</table>\n";
  if (total > listed) {
    out << "<p class=\"more\">\xE2\x80\xA6 and " << total - listed
        << " more failing rows not listed here (the CSV has every row).</p>\n";
  }
  out << "</section>\n";
}

void writeUnmatchedList(std::ostream& out, const CompareReport& report, RowKind kind,
                        const char* title) {
  size_t total = 0;
  for (const CompareRow& row : report.rows) total += row.kind == kind ? 1 : 0;
  if (total == 0) return;
  out << "<details><summary>" << title << " (" << total << ")</summary>\n<ul class=\"unmatched\">";
  size_t listed = 0;
  for (size_t i = 0; i < report.rows.size() && listed < kMaxUnmatchedListed; ++i) {
    const CompareRow& row = report.rows[i];
    if (row.kind != kind) continue;
    ++listed;
    out << "<li><code>";
    esc(out, opName(row));
    out << "</code> ";
    esc(out, row.tensor_index);
    out << " \xC2\xB7 rank " << row.rank << ", graph " << row.graph << ", iteration "
        << row.iteration << " \xC2\xB7 ";
    esc(out, row.dtype);
    out << " ";
    esc(out, row.shape);
    out << "</li>\n";
  }
  out << "</ul>";
  if (total > listed)
    out << "<p class=\"more\">\xE2\x80\xA6 and " << total - listed << " more.</p>";
  out << "</details>\n";
}

}  // namespace

void writeHtmlReport(std::ostream& out, const CompareReport& report) {
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
         "<title>dumpctl compare: ";
  esc(out, report.left_root);
  out << " vs ";
  esc(out, report.right_root);
  out << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n<main>\n";
  writeHeader(out, report);
  writeChartSection(out, report);
  writeFailingTable(out, report);
  out << "<section>\n<h2>Unmatched tensors</h2>\n<p class=\"meta\">" << report.left_only
      << " only on the left, " << report.right_only << " only on the right.</p>\n";
  writeUnmatchedList(out, report, RowKind::kLeftOnly, "Only on the left");
  writeUnmatchedList(out, report, RowKind::kRightOnly, "Only on the right");
  out << "</section>\n<footer>Written by <code>dumpctl compare</code>. Metrics as defined in "
         "the Ascend accuracy-comparison tool: x = left, y = right.</footer>\n</main>\n</body>\n"
         "</html>\n";
}

}  // namespace dumpd::tools
