// Inline SVG line charts for the HTML report of `dumpctl compare` (tools/compare_report.h):
// stacked panels sharing one x axis, a threshold line per panel, failing points in red and one
// vertical marker. Also the text helpers the report shares: HTML escaping, number formatting.
// The output holds no script and fetches nothing; every coordinate it writes is a finite number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace dumpd::tools {

// Writes `text` with & < > " ' escaped, C0 control characters and invalid UTF-8 replaced by
// U+FFFD: safe as element text and inside a quoted attribute.
void writeEscaped(std::ostream& out, std::string_view text);

// Up to 6 significant digits ("%.6g"); "NaN", "inf", "-inf" for the non-finite.
std::string formatNumber(double value);

struct ChartPoint {
  size_t x = 0;      // position along the shared axis (the report's row index)
  double value = 0;  // may be NaN or infinite: drawn clamped at the panel's failing edge
  bool failing = false;
};

enum class ChartScale : uint8_t { kLinear, kLog };

struct ChartPanel {
  std::string title;  // plain text, escaped when written
  ChartScale scale = ChartScale::kLinear;
  double low = 0, high = 1;  // value range; REQUIRES low < high (and low > 0 on a log scale)
  double threshold = 0;
  bool higher_is_better = false;   // the failing side of the threshold: below when true
  std::vector<ChartPoint> points;  // ascending x
};

struct ChartMarker {
  size_t x = 0;
  std::string label;   // plain text; shortened on the chart, whole in its tooltip
  std::string anchor;  // id of an element on the same page it links to ("" for none)
};

struct Chart {
  size_t x_count = 0;  // the axis spans [0, x_count - 1]
  std::vector<ChartPanel> panels;
  std::optional<ChartMarker> marker;
  // Plain-text tooltip of the failing point at x (the first few hundred per panel get one).
  std::function<std::string(size_t x)> tooltip;
};

// Thins `points` (ascending x) to about 2 * buckets: per bucket of x the lowest and highest
// finite values, plus one non-finite point and one failing point where the extremes include
// none, plus the point at `keep_x`. At most 2 * buckets points are returned unchanged.
std::vector<ChartPoint> downsamplePoints(const std::vector<ChartPoint>& points, size_t buckets,
                                         std::optional<size_t> keep_x);

// Writes one <svg> element (no xmlns: it is inline HTML), about 1200 units wide, scaled to its
// container by the page's CSS. Panels with no points still draw their axes.
void writeSvgChart(std::ostream& out, const Chart& chart);

}  // namespace dumpd::tools
