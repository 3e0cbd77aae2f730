#include "tools/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dumpd::tools {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Layout in SVG user units: a strip for the marker label, then per panel a title strip and the
// plot, then the x axis.
constexpr double kWidth = 1200;
constexpr double kLeft = 76, kRight = 28;
constexpr double kPlotWidth = kWidth - kLeft - kRight;
constexpr double kTop = 30;
constexpr double kTitleHeight = 24, kPlotHeight = 150, kPanelGap = 16;
constexpr double kBottom = 46;
constexpr size_t kMaxTooltipsPerPanel = 300;
constexpr size_t kMaxPlainPoints = 300;  // passing points get a dot when a panel has few
constexpr double kLabelCharWidth = 7.2;  // a generous average at 12px bold

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

// At most `max_chars` code points of `text`, with an ellipsis when it was cut.
std::string shorten(std::string_view text, size_t max_chars) {
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80 && chars++ == max_chars) {
      return std::string(text.substr(0, i)) + "\xE2\x80\xA6";
    }
  }
  return std::string(text);
}

// A coordinate: one decimal, and never anything but a finite number.
std::string coord(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

double plotTop(size_t panel) {
  return kTop + static_cast<double>(panel) * (kTitleHeight + kPlotHeight + kPanelGap) +
         kTitleHeight;
}

double xPosition(const Chart& chart, size_t x) {
  if (chart.x_count <= 1) return kLeft + kPlotWidth / 2;
  return kLeft + static_cast<double>(x) * kPlotWidth / static_cast<double>(chart.x_count - 1);
}

// Where `value` sits in the panel's range: 0 at the bottom, 1 at the top, clamped. NaN goes to
// the failing edge, infinities to their own.
double fraction(const ChartPanel& panel, double value) {
  if (std::isnan(value)) return panel.higher_is_better ? 0 : 1;
  if (std::isinf(value)) return value > 0 ? 1 : 0;
  double t = 0;
  if (panel.scale == ChartScale::kLog) {
    if (value <= 0) return 0;
    t = (std::log10(value) - std::log10(panel.low)) /
        (std::log10(panel.high) - std::log10(panel.low));
  } else {
    t = (value - panel.low) / (panel.high - panel.low);
  }
  return std::isfinite(t) ? std::clamp(t, 0.0, 1.0) : 0;
}

double yPosition(size_t index, const ChartPanel& panel, double value) {
  return plotTop(index) + kPlotHeight * (1 - fraction(panel, value));
}

double niceStep(double span, int ticks) {
  const double rough = span / ticks;
  const double magnitude = std::pow(10, std::floor(std::log10(rough)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= rough) return m * magnitude;
  }
  return 10 * magnitude;
}

struct Tick {
  double value;
  std::string label;
};

std::vector<Tick> yTicks(const ChartPanel& panel) {
  std::vector<Tick> ticks;
  if (panel.scale == ChartScale::kLog) {
    const int lo = static_cast<int>(std::ceil(std::log10(panel.low) - 1e-9));
    const int hi = static_cast<int>(std::floor(std::log10(panel.high) + 1e-9));
    const int step = std::max(1, (hi - lo + 5) / 6);
    for (int e = hi; e >= lo; --e) {
      if (e % step != 0) continue;  // the same decades on every panel
      const double v = std::pow(10.0, e);
      std::string label = e >= -2 && e <= 3 ? formatNumber(v) : "1e" + std::to_string(e);
      // Smaller values (zero included) are drawn on the bottom edge.
      if (fraction(panel, v) <= 0) label = "\xE2\x89\xA4" + label;
      ticks.push_back({v, std::move(label)});
    }
    return ticks;
  }
  const double step = niceStep(panel.high - panel.low, 5);
  for (double k = std::ceil(panel.low / step - 1e-9); k * step <= panel.high + step * 1e-9; ++k) {
    const double v = std::abs(k) < 1e-9 ? 0 : k * step;
    ticks.push_back({v, formatNumber(v)});
  }
  return ticks;
}

void writeMarker(std::ostream& out, const Chart& chart, const ChartMarker& marker, double bottom) {
  const double x = xPosition(chart, marker.x);
  const bool right_half = x > kLeft + kPlotWidth * 0.55;
  if (!marker.anchor.empty()) {
    out << "<a href=\"#";
    writeEscaped(out, marker.anchor);
    out << "\">";
  }
  out << "<g class=\"marker\"><title>";
  writeEscaped(out, marker.label);
  out << "</title><line x1=\"" << coord(x) << "\" y1=\"" << coord(kTop - 8) << "\" x2=\""
      << coord(x) << "\" y2=\"" << coord(bottom) << "\"/><text x=\""
      << coord(right_half ? x - 5 : x + 5) << "\" y=\"" << coord(kTop - 12) << "\" text-anchor=\""
      << (right_half ? "end" : "start") << "\">";
  const double room = right_half ? x - 10 : kWidth - x - 10;
  writeEscaped(out,
               shorten(marker.label, static_cast<size_t>(std::max(room, 0.0) / kLabelCharWidth)));
  out << "</text></g>";
  if (!marker.anchor.empty()) out << "</a>";
  out << "\n";
}

void writePanel(std::ostream& out, const Chart& chart, size_t index, const ChartPanel& panel,
                const std::vector<double>& x_ticks) {
  const double top = plotTop(index), bottom = top + kPlotHeight;
  out << "<g class=\"panel\"><text class=\"ptitle\" x=\"" << coord(kLeft) << "\" y=\""
      << coord(top - 8) << "\">";
  writeEscaped(out, panel.title);
  out << "</text><text class=\"thr-label\" x=\"" << coord(kLeft + kPlotWidth) << "\" y=\""
      << coord(top - 8) << "\" text-anchor=\"end\">threshold "
      << (panel.higher_is_better ? "\xE2\x89\xA5 " : "\xE2\x89\xA4 ")
      << formatNumber(panel.threshold) << "</text>\n";
  out << "<rect class=\"plot\" x=\"" << coord(kLeft) << "\" y=\"" << coord(top) << "\" width=\""
      << coord(kPlotWidth) << "\" height=\"" << coord(kPlotHeight) << "\"/>";
  const double threshold_y = yPosition(index, panel, panel.threshold);
  const double bad_top = panel.higher_is_better ? threshold_y : top;
  const double bad_bottom = panel.higher_is_better ? bottom : threshold_y;
  out << "<rect class=\"bad\" x=\"" << coord(kLeft) << "\" y=\"" << coord(bad_top) << "\" width=\""
      << coord(kPlotWidth) << "\" height=\"" << coord(bad_bottom - bad_top) << "\"/>\n";
  for (double x : x_ticks) {
    out << "<line class=\"grid\" x1=\"" << coord(x) << "\" y1=\"" << coord(top) << "\" x2=\""
        << coord(x) << "\" y2=\"" << coord(bottom) << "\"/>";
  }
  for (const Tick& tick : yTicks(panel)) {
    const double y = yPosition(index, panel, tick.value);
    out << "<line class=\"grid\" x1=\"" << coord(kLeft) << "\" y1=\"" << coord(y) << "\" x2=\""
        << coord(kLeft + kPlotWidth) << "\" y2=\"" << coord(y) << "\"/><text class=\"tick\" x=\""
        << coord(kLeft - 6) << "\" y=\"" << coord(y + 4) << "\" text-anchor=\"end\">" << tick.label
        << "</text>";
  }
  out << "\n";
  const double t = fraction(panel, panel.threshold);
  if (t > 0 && t < 1) {
    out << "<line class=\"thr\" x1=\"" << coord(kLeft) << "\" y1=\"" << coord(threshold_y)
        << "\" x2=\"" << coord(kLeft + kPlotWidth) << "\" y2=\"" << coord(threshold_y) << "\"/>\n";
  }

  // The series: one path, broken where a value is not finite.
  out << "<path class=\"series\" d=\"";
  bool pen_down = false;
  for (const ChartPoint& p : panel.points) {
    if (!std::isfinite(p.value)) {
      pen_down = false;
      continue;
    }
    out << (pen_down ? 'L' : 'M') << coord(xPosition(chart, p.x)) << ' '
        << coord(yPosition(index, panel, p.value));
    pen_down = true;
  }
  out << "\"/>\n";

  // Dots: failing ones always (with a tooltip for the first few hundred), passing ones when
  // there are few; values that are not finite as triangles at the edge they are clamped to.
  const bool plain_dots = panel.points.size() <= kMaxPlainPoints;
  size_t tooltips = 0;
  for (const ChartPoint& p : panel.points) {
    if (!p.failing && !plain_dots && std::isfinite(p.value)) continue;
    const double x = xPosition(chart, p.x), y = yPosition(index, panel, p.value);
    const char* cls = p.failing ? "fail" : "ok";
    if (std::isfinite(p.value)) {
      out << "<circle class=\"" << cls << "\" cx=\"" << coord(x) << "\" cy=\"" << coord(y)
          << "\" r=\"" << (p.failing ? "2.6" : "1.8") << "\"";
    } else {
      const bool at_top = fraction(panel, p.value) >= 1;
      out << "<path class=\"" << cls << "\" d=\"M" << coord(x) << ' ' << coord(y)
          << (at_top ? "l-4 7h8z" : "l-4 -7h8z") << "\"";
    }
    if (p.failing && chart.tooltip && tooltips < kMaxTooltipsPerPanel) {
      ++tooltips;
      out << "><title>";
      writeEscaped(out, chart.tooltip(p.x));
      out << "</title></" << (std::isfinite(p.value) ? "circle" : "path") << ">";
    } else {
      out << "/>";
    }
  }
  out << "</g>\n";
}

}  // namespace

void writeEscaped(std::ostream& out, std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = utf8Length(text, i);
      if (n == 0) {
        out << kReplacement;
        ++i;
      } else {
        out << text.substr(i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '&':
        out << "&amp;";
        break;
      case '<':
        out << "&lt;";
        break;
      case '>':
        out << "&gt;";
        break;
      case '"':
        out << "&quot;";
        break;
      case '\'':
        out << "&#39;";
        break;
      case '\t':
      case '\n':
        out << static_cast<char>(c);
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out << kReplacement;
        } else {
          out << static_cast<char>(c);
        }
    }
    ++i;
  }
}

std::string formatNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", value == 0 ? 0.0 : value);  // no "-0"
  return buf;
}

std::vector<ChartPoint> downsamplePoints(const std::vector<ChartPoint>& points, size_t buckets,
                                         std::optional<size_t> keep_x) {
  buckets = std::max<size_t>(buckets, 1);
  if (points.size() <= 2 * buckets) return points;
  constexpr size_t kNone = static_cast<size_t>(-1);
  const size_t first = points.front().x;
  const size_t span = points.back().x - first + 1;
  const auto bucketOf = [&](size_t x) { return (x - first) / ((span + buckets - 1) / buckets); };
  std::vector<bool> keep(points.size(), false);
  for (size_t i = 0; i < points.size();) {
    const size_t bucket = bucketOf(points[i].x);
    size_t lowest = kNone, highest = kNone, non_finite = kNone, failing = kNone;
    size_t j = i;
    for (; j < points.size() && bucketOf(points[j].x) == bucket; ++j) {
      const ChartPoint& p = points[j];
      if (keep_x && p.x == *keep_x) keep[j] = true;
      if (!std::isfinite(p.value)) {
        if (non_finite == kNone || (p.failing && !points[non_finite].failing)) non_finite = j;
        continue;
      }
      if (lowest == kNone || p.value < points[lowest].value) lowest = j;
      if (highest == kNone || p.value > points[highest].value) highest = j;
      if (p.failing && failing == kNone) failing = j;
    }
    bool kept_failing = false;
    for (size_t k : {lowest, highest, non_finite}) {
      if (k == kNone) continue;
      keep[k] = true;
      kept_failing = kept_failing || points[k].failing;
    }
    if (failing != kNone && !kept_failing) keep[failing] = true;
    i = j;
  }
  std::vector<ChartPoint> kept;
  for (size_t i = 0; i < points.size(); ++i) {
    if (keep[i]) kept.push_back(points[i]);
  }
  return kept;
}

void writeSvgChart(std::ostream& out, const Chart& chart) {
  const size_t panels = std::max<size_t>(chart.panels.size(), 1);
  const double last_bottom = plotTop(panels - 1) + kPlotHeight;
  const double height = last_bottom + kBottom;
  out << "<svg class=\"chart\" viewBox=\"0 0 " << coord(kWidth) << ' ' << coord(height)
      << "\" role=\"img\" aria-label=\"metrics along execution order\">\n";

  // The shared x axis: ticks at round row numbers, labelled under the last panel.
  std::vector<double> x_ticks;
  std::vector<size_t> x_tick_values;
  const size_t last = chart.x_count > 0 ? chart.x_count - 1 : 0;
  const auto step = static_cast<size_t>(
      std::max(1.0, niceStep(static_cast<double>(std::max<size_t>(last, 1)), 10)));
  for (size_t v = 0; v <= last; v += step) {
    x_tick_values.push_back(v);
    x_ticks.push_back(xPosition(chart, v));
  }
  for (size_t i = 0; i < chart.panels.size(); ++i)
    writePanel(out, chart, i, chart.panels[i], x_ticks);
  for (size_t i = 0; i < x_ticks.size(); ++i) {
    out << "<text class=\"tick\" x=\"" << coord(x_ticks[i]) << "\" y=\"" << coord(last_bottom + 16)
        << "\" text-anchor=\"middle\">" << x_tick_values[i] << "</text>";
  }
  out << "\n<text class=\"axis\" x=\"" << coord(kLeft + kPlotWidth / 2) << "\" y=\""
      << coord(last_bottom + 38) << "\" text-anchor=\"middle\">row (execution order)</text>\n";
  if (chart.marker) writeMarker(out, chart, *chart.marker, last_bottom);
  out << "</svg>\n";
}

}  // namespace dumpd::tools
