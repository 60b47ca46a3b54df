#include "sim/layer_profile_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moex::sim {

std::vector<LayerProfile> LayerProfilesOf(const nlohmann::json& report, const std::string& label) {
  std::vector<LayerProfile> out;
  if (!report.is_object()) return out;
  for (const auto& [name, part] : report.items()) {
    if (!part.is_object() || !part.contains("layers") || !part.contains("charts")) continue;
    for (const auto& field : part["charts"]) {
      LayerProfile p;
      p.title = label + ": " + name + " " + field.get<std::string>() + " per layer";
      for (const auto& l : part["layers"]) {
        if (!l.contains(field.get<std::string>())) continue;
        p.layers.push_back(l.value("layer", static_cast<int>(p.layers.size())));
        p.values.push_back(l[field.get<std::string>()].get<double>());
      }
      if (!p.layers.empty()) out.push_back(std::move(p));
    }
  }
  return out;
}

namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string BarChart(const LayerProfile& p) {
  Check(p.layers.size() == p.values.size(), "layer profile '", p.title, "': ", p.layers.size(),
        " layers but ", p.values.size(), " values");
  double top = 0;
  for (double v : p.values) {
    Check(std::isfinite(v), "layer profile '", p.title, "' has a value that is not finite");
    top = std::max(top, v);
  }
  if (top <= 0) top = 1;
  const double left = 60, plot_h = 160, bar = 22, gap = 6, title_h = 28, bottom = 36;
  const double width = left + static_cast<double>(p.values.size()) * (bar + gap) + 20;
  const double height = title_h + plot_h + bottom;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(width) +
                    "\" height=\"" + Num(height) + "\" role=\"img\" aria-label=\"" +
                    Escape(p.title) +
                    "\" font-family=\"Helvetica, Arial, sans-serif\" "
                    "font-size=\"11\">\n";
  out += "<text x=\"" + Num(left) + "\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" +
         Escape(p.title) + "</text>\n";
  const double base = title_h + plot_h;
  out += "<line x1=\"" + Num(left) + "\" y1=\"" + Num(base) + "\" x2=\"" + Num(width - 10) +
         "\" y2=\"" + Num(base) + "\" stroke=\"#333\"/>\n";
  out += "<text x=\"" + Num(left - 6) + "\" y=\"" + Num(title_h + 4) + "\" text-anchor=\"end\">" +
         Num(top) + "</text>\n";
  out += "<text x=\"" + Num(left - 6) + "\" y=\"" + Num(base) + "\" text-anchor=\"end\">0</text>\n";
  for (size_t i = 0; i < p.values.size(); ++i) {
    const double h = p.values[i] / top * plot_h;
    const double x = left + static_cast<double>(i) * (bar + gap) + gap;
    out += "<rect x=\"" + Num(x) + "\" y=\"" + Num(base - h) + "\" width=\"" + Num(bar) +
           "\" height=\"" + Num(h) + "\" fill=\"#4e79a7\"><title>layer " +
           std::to_string(p.layers[i]) + ": " + Num(p.values[i]) + "</title></rect>\n";
    out += "<text x=\"" + Num(x + bar / 2) + "\" y=\"" + Num(base + 14) +
           "\" text-anchor=\"middle\">" + std::to_string(p.layers[i]) + "</text>\n";
  }
  out += "<text x=\"" + Num(left + (width - left) / 2) + "\" y=\"" + Num(base + 30) +
         "\" text-anchor=\"middle\">layer</text>\n</svg>\n";
  return out;
}

}  // namespace

std::string RenderLayerProfiles(const std::vector<LayerProfile>& profiles) {
  if (profiles.empty()) return "";
  std::string out = "<h2>Policy configuration per layer</h2>\n";
  for (const LayerProfile& p : profiles) out += "<figure>\n" + BarChart(p) + "</figure>\n";
  return out;
}

}  // namespace moex::sim
