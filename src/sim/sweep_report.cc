// Renders a policy sweep as one HTML page. Everything is inline (no scripts, no style sheets,
// fonts or images from elsewhere) so the file can be archived or attached to an issue and
// still open years later; the SVGs carry their own styling attributes so that one cut out of
// the page renders the same on its own.
#include "sim/sweep_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "core/error.h"
#include "sim/chart_ticks.h"

namespace moex::sim {
namespace {

// ---------------------------------------------------------------------------------------
// Text and numbers

std::string EscapeHtml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatFixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

// `digits` significant digits, never in exponent notation, which readers of a table of
// timings do not expect: 1234.5 -> "1235", 83.21 -> "83.2", 0.012345 -> "0.0123".
std::string FormatSignificant(double value, int digits = 3) {
  if (value == 0) return "0";
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(value))));
  return FormatFixed(value, std::max(0, digits - 1 - magnitude));
}

// SVG coordinates: a tenth of a pixel is finer than any screen needs.
std::string Coord(double value) {
  return FormatFixed(value, 1);
}

// A display unit: shown value = raw value * scale, followed by suffix.
struct Unit {
  double scale = 1;
  std::string suffix;
};

const Unit kPercent{100, "%"};
const Unit kMilliseconds{1, " ms"};

// The largest binary unit in which max_bytes is still >= 1, so all labels of one axis share
// a unit and stay short.
Unit ByteUnit(double max_bytes) {
  static const char* const kSuffixes[] = {" B", " KiB", " MiB", " GiB", " TiB"};
  int index = 0;
  double scale = 1;
  while (index < 4 && max_bytes * scale >= 1024) {
    scale /= 1024;
    ++index;
  }
  return {scale, kSuffixes[index]};
}

std::string FormatInUnit(double raw, const Unit& unit) {
  return FormatSignificant(raw * unit.scale) + unit.suffix;
}

std::string FormatBytes(double bytes) {
  return FormatInUnit(bytes, ByteUnit(bytes));
}

// ---------------------------------------------------------------------------------------
// Validation

void CheckValue(double value, const SweepPoint& point, size_t index, const char* field) {
  Check(std::isfinite(value), "sweep report: point ", index, " (policy '", point.policy,
        "') has a non-finite ", field);
  Check(value >= 0, "sweep report: point ", index, " (policy '", point.policy, "') has a negative ",
        field, " (", value, ")");
}

// Charts start at 0 and cannot show NaN, infinities or negative values, so they are refused
// here with the point named rather than drawn as garbage.
void Validate(const SweepReport& report) {
  Check(!report.points.empty(), "sweep report has no points");
  for (size_t i = 0; i < report.points.size(); ++i) {
    const SweepPoint& p = report.points[i];
    Check(!p.policy.empty(), "sweep report: point ", i, " has an empty policy name");
    CheckValue(p.budget_fraction, p, i, "budget_fraction");
    CheckValue(static_cast<double>(p.budget_bytes), p, i, "budget_bytes");
    CheckValue(p.hit_rate, p, i, "hit_rate");
    Check(p.hit_rate <= 1, "sweep report: point ", i, " (policy '", p.policy,
          "') has a hit_rate above 1 (", p.hit_rate, ")");
    CheckValue(p.bytes_per_token, p, i, "bytes_per_token");
    CheckValue(p.tpot_ms, p, i, "tpot_ms");
    CheckValue(p.ttft_ms, p, i, "ttft_ms");
  }
}

// ---------------------------------------------------------------------------------------
// Series: one per policy, with its look

constexpr std::string_view kBoundPolicy = "belady";

// Okabe-Ito colours, which stay distinct under the common colour-vision deficiencies, less
// yellow (too pale on white) and black (reserved for the optimal bound), plus grey and brown.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#7F7F7F", "#8C564B"};
// Dash patterns cycle at a different period than the colours, so lines also differ in
// black-and-white print and no two of the first 24 policies look alike.
constexpr const char* kDashes[] = {"", "8 3", "2 2"};
constexpr const char* kBoundColour = "#000000";
constexpr const char* kBoundDash = "6 4";

struct Series {
  std::string policy;
  std::string label;               // legend text
  std::string colour;              // SVG colour
  std::string dash;                // SVG stroke-dasharray; empty for a solid line
  std::vector<SweepPoint> points;  // sorted by budget
};

// Policies in the order they first appear; the optimal bound takes no palette slot so that
// the first real policy is always blue.
std::vector<Series> GroupByPolicy(const std::vector<SweepPoint>& points) {
  std::vector<Series> series;
  size_t styled = 0;
  for (const SweepPoint& point : points) {
    auto it = std::find_if(series.begin(), series.end(),
                           [&](const Series& s) { return s.policy == point.policy; });
    if (it == series.end()) {
      Series s;
      s.policy = point.policy;
      if (point.policy == kBoundPolicy) {
        s.label = point.policy + " (optimal on-demand)";
        s.colour = kBoundColour;
        s.dash = kBoundDash;
      } else {
        s.label = point.policy;
        s.colour = kPalette[styled % std::size(kPalette)];
        s.dash = kDashes[styled % std::size(kDashes)];
        ++styled;
      }
      series.push_back(std::move(s));
      it = series.end() - 1;
    }
    it->points.push_back(point);
  }
  for (Series& s : series) {
    std::stable_sort(s.points.begin(), s.points.end(),
                     [](const SweepPoint& a, const SweepPoint& b) {
                       return a.budget_fraction < b.budget_fraction;
                     });
  }
  return series;
}

// ---------------------------------------------------------------------------------------
// Charts

using Metric = double (*)(const SweepPoint&);

struct Axis {
  std::string title;
  Unit unit;
  AxisTicks ticks;  // in shown units (after unit.scale)

  std::string TickLabel(double shown) const {
    return FormatFixed(shown, ticks.decimals) + unit.suffix;
  }
};

Axis MakeAxis(std::string title, Unit unit, double max_raw) {
  Axis axis{std::move(title), std::move(unit), {}};
  axis.ticks = NiceTicks(max_raw * axis.unit.scale);
  return axis;
}

double MaxOf(const std::vector<SweepPoint>& points, Metric metric) {
  double max = 0;
  for (const SweepPoint& p : points) max = std::max(max, metric(p));
  return max;
}

struct ChartSpec {
  std::string id;     // for the SVG's accessible name
  std::string title;  // chart heading
  Metric metric;
  Axis y;
};

// Pixel layout of one chart: the plot area and the legend to its right.
constexpr double kPlotWidth = 560;
constexpr double kPlotHeight = 280;
constexpr double kMarginLeft = 82;  // room for tick labels like "1.5 MiB" and the axis title
constexpr double kMarginTop = 82;   // chart title and the trace / model / hardware lines
constexpr double kMarginBottom = 54;
constexpr double kLegendGap = 24;
constexpr double kLegendRow = 20;
constexpr double kMarginRight = 12;
constexpr double kCharWidth = 6.6;  // rough width of one 12px sans-serif character

// Maps data to pixels inside the plot area.
struct Plot {
  const Axis& x;
  const Axis& y;

  double X(double raw) const { return kMarginLeft + raw * x.unit.scale / x.ticks.top * kPlotWidth; }
  double Y(double raw) const {
    return kMarginTop + kPlotHeight - raw * y.unit.scale / y.ticks.top * kPlotHeight;
  }
  double XShown(double shown) const { return kMarginLeft + shown / x.ticks.top * kPlotWidth; }
  double YShown(double shown) const {
    return kMarginTop + kPlotHeight - shown / y.ticks.top * kPlotHeight;
  }
};

std::string RenderGridAndAxes(const Plot& plot) {
  const double left = kMarginLeft, right = kMarginLeft + kPlotWidth;
  const double top = kMarginTop, bottom = kMarginTop + kPlotHeight;
  std::string out = "<g class=\"axes\" stroke-width=\"1\">\n";
  // Horizontal grid lines carry the y ticks; the line at 0 is the x axis itself.
  for (double shown : plot.y.ticks.values) {
    const std::string y = Coord(plot.YShown(shown));
    out += "<line x1=\"" + Coord(left) + "\" y1=\"" + y + "\" x2=\"" + Coord(right) + "\" y2=\"" +
           y + "\" stroke=\"" + (shown == 0 ? "#333333" : "#e0e0e0") + "\"/>\n";
    out += "<text x=\"" + Coord(left - 8) + "\" y=\"" + y +
           "\" text-anchor=\"end\" dominant-baseline=\"middle\" fill=\"#333333\">" +
           plot.y.TickLabel(shown) + "</text>\n";
  }
  // Vertical tick marks below the x axis, with fainter grid lines above it.
  for (double shown : plot.x.ticks.values) {
    const std::string x = Coord(plot.XShown(shown));
    if (shown != 0) {
      out += "<line x1=\"" + x + "\" y1=\"" + Coord(top) + "\" x2=\"" + x + "\" y2=\"" +
             Coord(bottom) + "\" stroke=\"#f0f0f0\"/>\n";
    }
    out += "<line x1=\"" + x + "\" y1=\"" + Coord(bottom) + "\" x2=\"" + x + "\" y2=\"" +
           Coord(bottom + 5) + "\" stroke=\"#333333\"/>\n";
    out += "<text x=\"" + x + "\" y=\"" + Coord(bottom + 18) +
           "\" text-anchor=\"middle\" fill=\"#333333\">" + plot.x.TickLabel(shown) + "</text>\n";
  }
  out += "<line x1=\"" + Coord(left) + "\" y1=\"" + Coord(top) + "\" x2=\"" + Coord(left) +
         "\" y2=\"" + Coord(bottom) + "\" stroke=\"#333333\"/>\n";
  // Axis titles: x centred below the tick labels, y rotated along the left edge.
  out += "<text x=\"" + Coord(left + kPlotWidth / 2) + "\" y=\"" + Coord(bottom + 42) +
         "\" text-anchor=\"middle\" fill=\"#333333\">" + EscapeHtml(plot.x.title) + "</text>\n";
  const std::string mid_y = Coord(top + kPlotHeight / 2);
  out += "<text x=\"16\" y=\"" + mid_y + "\" transform=\"rotate(-90 16 " + mid_y +
         ")\" text-anchor=\"middle\" fill=\"#333333\">" + EscapeHtml(plot.y.title) + "</text>\n";
  out += "</g>\n";
  return out;
}

std::string StrokeAttributes(const Series& s) {
  std::string out = "stroke=\"" + s.colour + "\" stroke-width=\"2\" fill=\"none\"";
  if (!s.dash.empty()) out += " stroke-dasharray=\"" + s.dash + "\"";
  return out;
}

std::string Marker(double x, double y, const std::string& colour, const std::string& tooltip) {
  std::string out = "<circle cx=\"" + Coord(x) + "\" cy=\"" + Coord(y) + "\" r=\"3.5\" fill=\"" +
                    colour + "\" stroke=\"#ffffff\" stroke-width=\"1\"";
  if (tooltip.empty()) return out + "/>\n";
  // An SVG <title> is a native hover tooltip: exact values without any script.
  return out + "><title>" + tooltip + "</title></circle>\n";
}

// One polyline per policy, then a marker per point; markers carry the exact value.
std::string RenderSeries(const Plot& plot, const Series& s, Metric metric) {
  std::string points, markers;
  for (const SweepPoint& p : s.points) {
    const double x = plot.X(p.budget_fraction), y = plot.Y(metric(p));
    if (!points.empty()) points += ' ';
    points += Coord(x) + "," + Coord(y);
    const std::string tooltip = EscapeHtml(s.label) + ", budget " +
                                FormatInUnit(p.budget_fraction, kPercent) + ": " +
                                FormatInUnit(metric(p), plot.y.unit);
    markers += Marker(x, y, s.colour, tooltip);
  }
  return "<g class=\"series\">\n<polyline points=\"" + points + "\" " + StrokeAttributes(s) +
         "/>\n" + markers + "</g>\n";
}

double LegendWidth(const std::vector<Series>& series) {
  size_t longest = 0;
  for (const Series& s : series) longest = std::max(longest, s.label.size());
  return 40 + kCharWidth * static_cast<double>(longest);
}

// A line sample (with the series' dash and marker) and the label, one row per policy.
std::string RenderLegend(const std::vector<Series>& series, double left) {
  std::string out = "<g class=\"legend\">\n";
  double y = kMarginTop + 8;
  for (const Series& s : series) {
    const std::string row_y = Coord(y);
    out += "<g class=\"legend-entry\">\n<line x1=\"" + Coord(left) + "\" y1=\"" + row_y +
           "\" x2=\"" + Coord(left + 28) + "\" y2=\"" + row_y + "\" " + StrokeAttributes(s) +
           "/>\n" + Marker(left + 14, y, s.colour, "") + "<text x=\"" + Coord(left + 36) +
           "\" y=\"" + row_y + "\" dominant-baseline=\"middle\" fill=\"#222222\">" +
           EscapeHtml(s.label) + "</text>\n</g>\n";
    y += kLegendRow;
  }
  out += "</g>\n";
  return out;
}

// `context`: the trace, model and hardware lines drawn under the title, so a chart cut out
// of the page still says what it shows.
std::string RenderChart(const ChartSpec& spec, const Axis& x_axis,
                        const std::vector<Series>& series,
                        const std::vector<std::string>& context) {
  const Plot plot{x_axis, spec.y};
  const double legend_left = kMarginLeft + kPlotWidth + kLegendGap;
  const double width = legend_left + LegendWidth(series) + kMarginRight;
  // A long legend stretches the chart rather than running off its bottom.
  const double height = std::max(kMarginTop + kPlotHeight + kMarginBottom,
                                 kMarginTop + 8 + kLegendRow * static_cast<double>(series.size()));
  const std::string title_id = "chart-" + spec.id + "-title";

  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Coord(width) +
                    "\" height=\"" + Coord(height) + "\" viewBox=\"0 0 " + Coord(width) + " " +
                    Coord(height) + "\" role=\"img\" aria-labelledby=\"" + title_id +
                    "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  out += "<title id=\"" + title_id + "\">" + EscapeHtml(spec.title) + "</title>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  out += "<text x=\"" + Coord(kMarginLeft) + "\" y=\"22\" font-size=\"15\" font-weight=\"bold\" " +
         "fill=\"#111111\">" + EscapeHtml(spec.title) + "</text>\n";
  for (size_t i = 0; i < context.size(); ++i)
    out += "<text x=\"" + Coord(kMarginLeft) + "\" y=\"" + Coord(40 + 13 * static_cast<double>(i)) +
           "\" font-size=\"10\" fill=\"#555555\">" + EscapeHtml(context[i]) + "</text>\n";
  out += RenderGridAndAxes(plot);
  for (const Series& s : series) out += RenderSeries(plot, s, spec.metric);
  out += RenderLegend(series, legend_left);
  out += "</svg>\n";
  return out;
}

std::vector<ChartSpec> MakeChartSpecs(const std::vector<SweepPoint>& points) {
  const Metric hit_rate = [](const SweepPoint& p) { return p.hit_rate; };
  const Metric bytes = [](const SweepPoint& p) { return p.bytes_per_token; };
  const Metric tpot = [](const SweepPoint& p) { return p.tpot_ms; };
  const double max_bytes = MaxOf(points, bytes);
  return {
      {"hit-rate", "Hit rate vs cache budget", hit_rate,
       MakeAxis("hit rate", kPercent, MaxOf(points, hit_rate))},
      {"bytes-per-token", "Bytes read per token vs cache budget", bytes,
       MakeAxis("bytes read from the slow tier per token", ByteUnit(max_bytes), max_bytes)},
      {"tpot", "Modelled time per output token vs cache budget", tpot,
       MakeAxis("modelled TPOT", kMilliseconds, MaxOf(points, tpot))},
  };
}

// ---------------------------------------------------------------------------------------
// Page

constexpr const char* kStyle = R"(body { font-family: Helvetica, Arial, sans-serif; color: #222;
  margin: 24px auto; max-width: 1000px; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 8px; }
h2 { font-size: 17px; margin-top: 28px; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; }
dl.meta dt { font-weight: bold; }
dl.meta dd { margin: 0; }
figure { margin: 16px 0; }
svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; }
th { text-align: left; background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.note { color: #555; font-size: 13px; }
)";

std::string OrUnknown(const std::string& text) {
  return text.empty() ? "(not given)" : EscapeHtml(text);
}

std::string RenderHeader(const SweepReport& report, const std::vector<Series>& series,
                         const std::string& title) {
  std::string out = "<h1>" + EscapeHtml(title) + "</h1>\n<dl class=\"meta\">\n";
  out += "<dt>Trace</dt><dd>" + OrUnknown(report.trace) + "</dd>\n";
  out += "<dt>Model</dt><dd>" + OrUnknown(report.model) + "</dd>\n";
  out += "<dt>Hardware</dt><dd>" + OrUnknown(report.hardware) + "</dd>\n";
  out += "<dt>Points</dt><dd>" + std::to_string(report.points.size()) + " (" +
         std::to_string(series.size()) + " policies)</dd>\n</dl>\n";
  return out;
}

std::string Cell(const std::string& text, bool numeric) {
  return std::string(numeric ? "<td class=\"num\">" : "<td>") + text + "</td>";
}

std::string RenderTable(const std::vector<Series>& series) {
  std::string out =
      "<table>\n<thead><tr><th>policy</th><th>budget</th><th>budget bytes</th>"
      "<th>hit rate</th><th>bytes / token</th><th>TPOT (ms)</th><th>TTFT (ms)</th>"
      "</tr></thead>\n<tbody>\n";
  for (const Series& s : series) {
    for (const SweepPoint& p : s.points) {
      out += "<tr>" + Cell(EscapeHtml(s.label), false) +
             Cell(FormatInUnit(p.budget_fraction, kPercent), true) +
             Cell(FormatBytes(static_cast<double>(p.budget_bytes)), true) +
             Cell(FormatInUnit(p.hit_rate, kPercent), true) +
             Cell(FormatBytes(p.bytes_per_token), true) + Cell(FormatSignificant(p.tpot_ms), true) +
             Cell(FormatSignificant(p.ttft_ms), true) + "</tr>\n";
    }
  }
  out += "</tbody>\n</table>\n";
  return out;
}

}  // namespace

std::string RenderSweepHtml(const SweepReport& report) {
  Validate(report);
  const std::vector<Series> series = GroupByPolicy(report.points);
  const std::string title = report.title.empty() ? "Policy sweep" : report.title;
  const Axis x_axis =
      MakeAxis("cache budget (share of all expert bytes)", kPercent,
               MaxOf(report.points, [](const SweepPoint& p) { return p.budget_fraction; }));

  std::string out =
      std::string(kSweepHtmlStart) +
      "<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
      EscapeHtml(title) + "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n";
  out += RenderHeader(report, series, title);
  const std::vector<std::string> context = {"trace: " + report.trace, "model: " + report.model,
                                            "hardware: " + report.hardware};
  for (const ChartSpec& spec : MakeChartSpecs(report.points)) {
    out += "<figure>\n" + RenderChart(spec, x_axis, series, context) + "</figure>\n";
  }
  out +=
      "<p class=\"note\">Values are rounded to three significant digits; hover over a marker "
      "to read its value.</p>\n";
  out += "<h2>All points</h2>\n" + RenderTable(series);
  out += RenderLayerProfiles(report.layer_profiles);
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace moex::sim
