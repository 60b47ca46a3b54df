// The sweep report renderer: the 1-2-5 tick helper against hand-computed axes, and the HTML
// page built from small hand-made sweeps (structure, escaping, one line per policy per chart,
// legend, tick labels, ordering, refusal of empty or non-finite reports).
#include "sim/sweep_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "core/error.h"
#include "sim/chart_ticks.h"

namespace moex::sim {
namespace {

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

SweepPoint Point(std::string policy, double fraction, double hit_rate, double bytes, double tpot) {
  SweepPoint p;
  p.policy = std::move(policy);
  p.budget_fraction = fraction;
  p.budget_bytes = static_cast<int64_t>(fraction * 8.0 * (1 << 30));
  p.hit_rate = hit_rate;
  p.bytes_per_token = bytes;
  p.tpot_ms = tpot;
  p.ttft_ms = 10 * tpot;
  return p;
}

// Three policies at three budgets. Maxima, hand-computed axes:
//   budget 50 %        -> step 10 %, ticks 0 % .. 50 %
//   hit rate 87 %      -> step 20 %, ticks 0 % .. 100 %
//   bytes 3.4 MiB      -> step 1 MiB, ticks 0 MiB .. 4 MiB
//   TPOT 1234 ms       -> step 500 ms, ticks 0 ms .. 1500 ms
SweepReport ThreePolicies() {
  constexpr double kMiB = 1024.0 * 1024.0;
  SweepReport r;
  r.title = "Policy sweep";
  r.trace = "sharegpt-16.trace (16 prompts)";
  r.model = "olmoe-demo";
  r.hardware = "laptop-nvme (3 GB/s NVMe)";
  // Budgets deliberately out of order: the renderer sorts each policy's points.
  r.points = {
      Point("lru", 0.5, 0.80, 1.0 * kMiB, 300),
      Point("lru", 0.1, 0.40, 3.0 * kMiB, 1000),
      Point("lru", 0.25, 0.60, 2.0 * kMiB, 600),
      Point("belady", 0.1, 0.55, 2.5 * kMiB, 800),
      Point("belady", 0.25, 0.75, 1.5 * kMiB, 450),
      Point("belady", 0.5, 0.87, 0.5 * kMiB, 200),
      Point("nextgate+lfu", 0.1, 0.45, 3.4 * kMiB, 1234),
      Point("nextgate+lfu", 0.25, 0.65, 1.8 * kMiB, 550),
      Point("nextgate+lfu", 0.5, 0.82, 0.8 * kMiB, 250),
  };
  return r;
}

// The points="x,y x,y ..." attributes of all polylines, in document order.
std::vector<std::vector<std::pair<double, double>>> Polylines(const std::string& html) {
  std::vector<std::vector<std::pair<double, double>>> lines;
  const std::regex polyline("<polyline points=\"([^\"]*)\"");
  const std::regex pair("([0-9.]+),([0-9.]+)");
  for (std::sregex_iterator it(html.begin(), html.end(), polyline), end; it != end; ++it) {
    const std::string points = (*it)[1];
    auto& line = lines.emplace_back();
    for (std::sregex_iterator p(points.begin(), points.end(), pair); p != end; ++p) {
      line.emplace_back(std::stod((*p)[1]), std::stod((*p)[2]));
    }
  }
  return lines;
}

TEST(ChartTicks, NiceStepFollowsOneTwoFive) {
  EXPECT_DOUBLE_EQ(NiceStep(0.174), 0.2);
  EXPECT_DOUBLE_EQ(NiceStep(0.2), 0.2);  // exactly on the series: not rounded up to 0.5
  EXPECT_DOUBLE_EQ(NiceStep(246.8), 500);
  EXPECT_DOUBLE_EQ(NiceStep(1), 1);
  EXPECT_DOUBLE_EQ(NiceStep(1.01), 2);
  EXPECT_DOUBLE_EQ(NiceStep(7), 10);
  EXPECT_DOUBLE_EQ(NiceStep(20), 20);
  EXPECT_DOUBLE_EQ(NiceStep(0.0031), 0.005);
}

TEST(ChartTicks, RangeZeroToPointEightSevenStepsByPointTwo) {
  // 0.87 / 5 intervals = 0.174 -> 0.2; ceil(0.87 / 0.2) = 5 intervals -> top 1.0.
  const AxisTicks t = NiceTicks(0.87);
  EXPECT_DOUBLE_EQ(t.step, 0.2);
  EXPECT_DOUBLE_EQ(t.top, 1.0);
  EXPECT_EQ(t.decimals, 1);
  ASSERT_EQ(t.values.size(), 6u);
  EXPECT_DOUBLE_EQ(t.values[0], 0);
  EXPECT_DOUBLE_EQ(t.values[3], 0.6);
  EXPECT_DOUBLE_EQ(t.values[5], 1.0);
}

TEST(ChartTicks, RangeZeroTo1234StepsBy500) {
  // 1234 / 5 = 246.8 -> 500 (200 would need 7 intervals); ceil(1234 / 500) = 3 -> top 1500.
  const AxisTicks t = NiceTicks(1234);
  EXPECT_DOUBLE_EQ(t.step, 500);
  EXPECT_DOUBLE_EQ(t.top, 1500);
  EXPECT_EQ(t.decimals, 0);
  EXPECT_EQ(t.values, (std::vector<double>{0, 500, 1000, 1500}));
}

TEST(ChartTicks, ValueOnATickDoesNotAddAnInterval) {
  // 100 % hit rate: step 20, top exactly 100, not 120.
  const AxisTicks t = NiceTicks(100);
  EXPECT_DOUBLE_EQ(t.step, 20);
  EXPECT_DOUBLE_EQ(t.top, 100);
  EXPECT_EQ(t.values.size(), 6u);
}

TEST(ChartTicks, SmallAndDegenerateRanges) {
  const AxisTicks small = NiceTicks(0.043);  // 0.0086 -> 0.01, top 0.05
  EXPECT_DOUBLE_EQ(small.step, 0.01);
  EXPECT_DOUBLE_EQ(small.top, 0.05);
  EXPECT_EQ(small.decimals, 2);
  const AxisTicks zero = NiceTicks(0);  // all values 0: axis 0..1 rather than a division by 0
  EXPECT_DOUBLE_EQ(zero.step, 0.2);
  EXPECT_DOUBLE_EQ(zero.top, 1);
}

TEST(SweepReport, IsACompleteSelfContainedDocument) {
  const std::string html = RenderSweepHtml(ThreePolicies());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<html lang=\"en\">"), std::string::npos);
  EXPECT_NE(html.find("<meta charset=\"utf-8\">"), std::string::npos);
  EXPECT_NE(html.find("<title>Policy sweep</title>"), std::string::npos);
  EXPECT_EQ(Count(html, "<body>"), 1u);
  EXPECT_EQ(html.substr(html.size() - 16), "</body>\n</html>\n");
  EXPECT_EQ(Count(html, "<svg "), 3u);
  EXPECT_EQ(Count(html, "</svg>"), 3u);
  EXPECT_EQ(Count(html, "<table>"), 1u);
  EXPECT_EQ(Count(html, "<tr><td>"), 9u);  // one table row per point
  // Nothing fetched or run: no scripts, links, images or remote URLs (the SVG namespace
  // URI is an identifier, not a resource).
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("href"), std::string::npos);
  EXPECT_EQ(html.find(" src="), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_EQ(Count(html, "http"), Count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
}

TEST(SweepReport, NamesTraceModelAndHardware) {
  const std::string html = RenderSweepHtml(ThreePolicies());
  EXPECT_NE(html.find("<dt>Trace</dt><dd>sharegpt-16.trace (16 prompts)</dd>"), std::string::npos);
  EXPECT_NE(html.find("<dt>Model</dt><dd>olmoe-demo</dd>"), std::string::npos);
  EXPECT_NE(html.find("<dt>Hardware</dt><dd>laptop-nvme (3 GB/s NVMe)</dd>"), std::string::npos);
}

TEST(SweepReport, EscapesEveryUserString) {
  SweepReport r = ThreePolicies();
  r.title = "Sweep <1>";
  r.trace = "it's \"quoted\"";
  r.model = "m&m";
  r.hardware = "<hw>";
  for (SweepPoint& p : r.points) {
    if (p.policy == "lru") p.policy = "a<b&c";
  }
  const std::string html = RenderSweepHtml(r);
  EXPECT_EQ(html.find("a<b"), std::string::npos);
  EXPECT_EQ(html.find("<hw>"), std::string::npos);
  EXPECT_EQ(html.find("<1>"), std::string::npos);
  EXPECT_EQ(html.find("\"quoted\""), std::string::npos);
  EXPECT_NE(html.find("<title>Sweep &lt;1&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("it&#39;s &quot;quoted&quot;"), std::string::npos);
  EXPECT_NE(html.find("m&amp;m"), std::string::npos);
  EXPECT_NE(html.find("&lt;hw&gt;"), std::string::npos);
  // Legend (3 charts) + table (3 rows) + marker tooltips (3 charts x 3 points).
  EXPECT_EQ(Count(html, "a&lt;b&amp;c"), 3u + 3u + 9u);
}

TEST(SweepReport, OnePolylinePerPolicyPerChartInFirstAppearanceOrder) {
  const std::string html = RenderSweepHtml(ThreePolicies());
  EXPECT_EQ(Count(html, "<polyline "), 3u * 3u);
  EXPECT_EQ(Count(html, "<circle "), 3u * (9u + 3u));  // a marker per point and per legend entry
  const auto lines = Polylines(html);
  ASSERT_EQ(lines.size(), 9u);
  for (const auto& line : lines) {
    ASSERT_EQ(line.size(), 3u);
    // Sorted by budget although the input was not.
    EXPECT_LT(line[0].first, line[1].first);
    EXPECT_LT(line[1].first, line[2].first);
  }
  // Hit rate chart, first series is lru (first to appear): 40 %, 60 %, 80 % rising, so the
  // y pixel falls.
  EXPECT_GT(lines[0][0].second, lines[0][2].second);
  // Same x pixels for the same budgets in every chart.
  EXPECT_DOUBLE_EQ(lines[0][1].first, lines[3][1].first);
}

TEST(SweepReport, LegendEntryPerPolicyWithBeladyAsDashedBlackBound) {
  const std::string html = RenderSweepHtml(ThreePolicies());
  EXPECT_EQ(Count(html, "<g class=\"legend-entry\">"), 3u * 3u);
  for (const char* label :
       {">lru</text>", ">nextgate+lfu</text>", ">belady (optimal on-demand)</text>"}) {
    EXPECT_EQ(Count(html, label), 3u) << label;
  }
  const auto lines_start = html.find("<polyline ");
  const std::string first_chart = html.substr(lines_start, html.find("</svg>") - lines_start);
  // belady is black and dashed; lru, the first other policy, takes the first palette colour,
  // solid.
  const std::regex belady(
      "<polyline points=\"[^\"]*\" stroke=\"#000000\" stroke-width=\"2\" fill=\"none\" "
      "stroke-dasharray=\"[0-9 ]+\"/>");
  EXPECT_EQ(std::distance(std::sregex_iterator(first_chart.begin(), first_chart.end(), belady),
                          std::sregex_iterator()),
            1);
  EXPECT_NE(first_chart.find("stroke=\"#0072B2\" stroke-width=\"2\" fill=\"none\"/>"),
            std::string::npos);
}

TEST(SweepReport, DistinctColoursForEveryPolicyButTheBound) {
  SweepReport r;
  for (int i = 0; i < 8; ++i) r.points.push_back(Point("p" + std::to_string(i), 0.5, 0.5, 1, 1));
  const std::string html = RenderSweepHtml(r);
  const std::string first_chart = html.substr(0, html.find("</svg>"));
  std::vector<std::string> colours;
  const std::regex stroke("<polyline points=\"[^\"]*\" stroke=\"(#[0-9A-Fa-f]{6})\"");
  for (std::sregex_iterator it(first_chart.begin(), first_chart.end(), stroke), end; it != end;
       ++it) {
    colours.push_back((*it)[1]);
  }
  ASSERT_EQ(colours.size(), 8u);
  std::sort(colours.begin(), colours.end());
  EXPECT_EQ(std::unique(colours.begin(), colours.end()), colours.end());
  EXPECT_EQ(std::find(colours.begin(), colours.end(), "#000000"), colours.end());
}

TEST(SweepReport, TickLabelsComeFromNiceTicks) {
  const std::string html = RenderSweepHtml(ThreePolicies());
  // x: 0 % .. 50 % by 10 %, in each chart.
  for (const char* label : {">10%</text>", ">30%</text>", ">50%</text>"}) {
    EXPECT_EQ(Count(html, label), 3u) << label;
  }
  EXPECT_EQ(html.find(">70%</text>"), std::string::npos);
  // Hit rate: 0 % .. 100 % by 20 % (20 % and 40 % are also x ticks).
  EXPECT_EQ(Count(html, ">0%</text>"), 3u + 1u);
  EXPECT_EQ(Count(html, ">20%</text>"), 3u + 1u);
  for (const char* label : {">60%</text>", ">80%</text>", ">100%</text>"}) {
    EXPECT_EQ(Count(html, label), 1u) << label;
  }
  EXPECT_EQ(html.find(">120%</text>"), std::string::npos);
  // Bytes per token: 3.4 MiB -> 0 .. 4 MiB by 1 MiB.
  for (const char* label : {">0 MiB</text>", ">1 MiB</text>", ">4 MiB</text>"}) {
    EXPECT_EQ(Count(html, label), 1u) << label;
  }
  EXPECT_EQ(html.find(">5 MiB</text>"), std::string::npos);
  // TPOT: 1234 ms -> 0 .. 1500 ms by 500 ms.
  for (const char* label :
       {">0 ms</text>", ">500 ms</text>", ">1000 ms</text>", ">1500 ms</text>"}) {
    EXPECT_EQ(Count(html, label), 1u) << label;
  }
}

TEST(SweepReport, TableUsesThreeSignificantDigitsAndByteUnits) {
  const std::string html = RenderSweepHtml(ThreePolicies());
  // nextgate+lfu at 10 %: 45 % hit rate, 3.4 MiB per token, 1234 ms TPOT, 12340 ms TTFT,
  // budget 0.1 * 8 GiB = 819 MiB.
  EXPECT_NE(html.find("<tr><td>nextgate+lfu</td><td class=\"num\">10.0%</td><td "
                      "class=\"num\">819 MiB</td><td class=\"num\">45.0%</td><td "
                      "class=\"num\">3.40 MiB</td><td class=\"num\">1234</td><td "
                      "class=\"num\">12340</td></tr>"),
            std::string::npos);
}

TEST(SweepReport, ThrowsOnEmptyReport) {
  SweepReport r = ThreePolicies();
  r.points.clear();
  EXPECT_THROW(RenderSweepHtml(r), moex::Error);
}

TEST(SweepReport, ThrowsOnNonFiniteOrNegativeValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  auto with = [](auto mutate) {
    SweepReport r = ThreePolicies();
    mutate(r.points[4]);
    return r;
  };
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.hit_rate = nan; })), moex::Error);
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.budget_fraction = nan; })), moex::Error);
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.bytes_per_token = inf; })), moex::Error);
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.tpot_ms = -inf; })), moex::Error);
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.ttft_ms = nan; })), moex::Error);
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.tpot_ms = -1; })), moex::Error);
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.hit_rate = 1.5; })), moex::Error);
  EXPECT_THROW(RenderSweepHtml(with([&](SweepPoint& p) { p.policy.clear(); })), moex::Error);
  try {
    RenderSweepHtml(with([&](SweepPoint& p) { p.hit_rate = nan; }));
    FAIL() << "no exception";
  } catch (const moex::Error& e) {
    // The message names the point and the field.
    EXPECT_NE(std::string(e.what()).find("point 4 (policy 'belady')"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("hit_rate"), std::string::npos);
  }
}

}  // namespace
}  // namespace moex::sim
