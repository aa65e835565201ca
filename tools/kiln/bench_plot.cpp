// `kiln bench --plot FILE.svg`: the roofline picture. Left, the classic
// log-log roofline (arithmetic intensity against GFLOP/s) with the measured
// ceilings and one numbered point per drill that does arithmetic. Right, one
// bar per row with its fraction of the roofline, so the pure data-movement
// drills (no flops, no place on the left) are seen too, and every row reads
// at a glance against the 1.0 line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "bench.h"

namespace kiln::bench {
namespace {

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

const char* drill_colour(const std::string& drill) {
  static const std::map<std::string, const char*> colours = {
      {"D1", "#1f77b4"}, {"D2", "#2ca02c"}, {"D3", "#d62728"}, {"D5", "#9467bd"}, {"DM", "#7f7f7f"}};
  auto it = colours.find(drill);
  return it == colours.end() ? "#000000" : it->second;
}

// Maps [lo, hi] logarithmically onto [a, b] pixels.
struct LogAxis {
  double lo, hi, a, b;
  double operator()(double v) const { return a + (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) * (b - a); }
};

double decade_below(double v) { return std::pow(10.0, std::floor(std::log10(v))); }
double decade_above(double v) { return std::pow(10.0, std::ceil(std::log10(v))); }

std::string tick_label(double v) {
  return v >= 1 ? fmt("%.0f", v) : fmt("%g", v);
}

struct Svg {
  std::ostringstream s;
  void line(double x1, double y1, double x2, double y2, const char* colour, double width, const char* dash = nullptr) {
    s << "<line x1='" << x1 << "' y1='" << y1 << "' x2='" << x2 << "' y2='" << y2 << "' stroke='" << colour
      << "' stroke-width='" << width << "'" << (dash ? std::string(" stroke-dasharray='") + dash + "'" : "") << "/>\n";
  }
  void text(double x, double y, const std::string& t, int size, const char* anchor = "start",
            const char* colour = "#000", const char* extra = "") {
    s << "<text x='" << x << "' y='" << y << "' font-size='" << size << "' text-anchor='" << anchor << "' fill='"
      << colour << "' " << extra << ">" << escape_xml(t) << "</text>\n";
  }
  void rect(double x, double y, double w, double h, const char* fill, const char* stroke = "none") {
    s << "<rect x='" << x << "' y='" << y << "' width='" << std::max(w, 0.0) << "' height='" << h << "' fill='" << fill
      << "' stroke='" << stroke << "'/>\n";
  }
};

void draw_roofline_panel(Svg& svg, const Ceilings& c, const std::vector<BenchRow>& rows) {
  const double left = 80, right = 640, top = 70, bottom = 560;
  const double bw = c.bandwidth_gbps();
  const double peak = std::max({c.fp32_gflops, c.bf16_gflops, c.amx_bf16_gflops});

  // Axis ranges: every point and both ridges, with a margin, whole decades.
  double ai_lo = 0.1, ai_hi = 10 * peak / bw, perf_lo = 1, perf_hi = 2 * peak;
  for (const BenchRow& r : rows) {
    if (!r.gflops || r.flops <= 0 || r.bytes <= 0) continue;
    ai_lo = std::min(ai_lo, r.flops / r.bytes / 2);
    ai_hi = std::max(ai_hi, r.flops / r.bytes * 2);
    perf_lo = std::min(perf_lo, *r.gflops / 2);
  }
  perf_lo = std::max(perf_lo, 1e-3);
  LogAxis x{decade_below(ai_lo), decade_above(ai_hi), left, right};
  LogAxis y{decade_below(perf_lo), decade_above(perf_hi), bottom, top};

  svg.text((left + right) / 2, top - 30, "Roofline: arithmetic intensity vs GFLOP/s (log-log)", 16, "middle", "#000",
           "font-weight='bold'");
  for (double v = x.lo; v <= x.hi * 1.001; v *= 10) {
    svg.line(x(v), top, x(v), bottom, "#e0e0e0", 1);
    svg.text(x(v), bottom + 16, tick_label(v), 11, "middle");
  }
  for (double v = y.lo; v <= y.hi * 1.001; v *= 10) {
    svg.line(left, y(v), right, y(v), "#e0e0e0", 1);
    svg.text(left - 6, y(v) + 4, tick_label(v), 11, "end");
  }
  svg.rect(left, top, right - left, bottom - top, "none", "#000");
  svg.text((left + right) / 2, bottom + 36, "arithmetic intensity (flop / byte moved)", 13, "middle");
  svg.text(20, (top + bottom) / 2, "GFLOP/s", 13, "middle", "#000",
           ("transform='rotate(-90 20 " + fmt("%.0f", (top + bottom) / 2) + ")'").c_str());

  // The memory slope up to the highest compute ceiling, then each ceiling
  // flat from its own ridge point.
  const double ridge_top = peak / bw;
  const double slope_x0 = std::max(x.lo, y.lo / bw);  // where the slope enters the plot
  const double x0 = x(slope_x0), y0 = y(bw * slope_x0), x1 = x(ridge_top), y1 = y(peak);
  svg.line(x0, y0, x1, y1, "#000", 2);
  // The label runs along the slope, a third of the way up.
  const double tx = x0 + (x1 - x0) / 3, ty = y0 + (y1 - y0) / 3 - 6;
  const double angle = std::atan2(y1 - y0, x1 - x0) * 180 / M_PI;
  svg.text(tx, ty, fmt("memory %.1f GB/s", bw), 12, "middle", "#000",
           ("transform='rotate(" + fmt("%.1f", angle) + " " + fmt("%.1f", tx) + " " + fmt("%.1f", ty) + ")'").c_str());
  auto ceiling = [&](double gflops, const char* label, const char* dash) {
    svg.line(x(gflops / bw), y(gflops), right, y(gflops), "#000", 2, dash);
    svg.text(right - 4, y(gflops) - 6, fmt(label, gflops), 12, "end");
  };
  ceiling(c.fp32_gflops, ("fp32 " + c.fp32_isa + " FMA %.0f GFLOP/s").c_str(), nullptr);
  if (c.bf16_gflops > 0) ceiling(c.bf16_gflops, "bf16 dot-product %.0f GFLOP/s", "8,4");
  if (c.amx_bf16_gflops > 0) ceiling(c.amx_bf16_gflops, "bf16 AMX tiles %.0f GFLOP/s", "2,4");

  // One point per row with flops: filled for fp32, open for bf16; the number
  // matches the bar on the right.
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    if (!r.gflops || r.flops <= 0 || r.bytes <= 0) continue;
    const double px = x(r.flops / r.bytes), py = y(std::max(*r.gflops, y.lo));
    const char* colour = drill_colour(r.drill);
    svg.s << "<circle cx='" << px << "' cy='" << py << "' r='4.5' fill='" << (r.dtype == "bfloat16" ? "white" : colour)
          << "' stroke='" << colour << "' stroke-width='2'><title>" << escape_xml(r.name + " " + r.dtype + " " +
                                                                                  shape_string(r.shape))
          << "</title></circle>\n";
    svg.text(px + 6, py - 4, std::to_string(i + 1), 10, "start", colour);
  }

  // Legend.
  double ly = bottom + 60;
  double lx = left;
  for (const char* d : {"D1", "D2", "D3", "D5", "DM"}) {
    svg.rect(lx, ly - 9, 10, 10, drill_colour(d));
    svg.text(lx + 14, ly, d, 12);
    lx += 50;
  }
  svg.text(lx + 10, ly, "filled: float32, open: bfloat16", 12);
}

void draw_fraction_panel(Svg& svg, const std::vector<BenchRow>& rows) {
  const double label_x = 700, bar_x = 1010, bar_w = 300, top = 70, row_h = 17;
  double max_fraction = 1.2;
  for (const BenchRow& r : rows)
    if (r.roof_fraction) max_fraction = std::max(max_fraction, *r.roof_fraction);
  auto bx = [&](double f) { return bar_x + f / max_fraction * bar_w; };

  svg.text((label_x + bar_x + bar_w) / 2, top - 30, "Fraction of the roofline per row (1.0 = at the floor)", 16,
           "middle", "#000", "font-weight='bold'");
  for (double f = 0; f <= max_fraction + 1e-9; f += 0.25) {
    const bool whole = std::fabs(f - 1.0) < 1e-9;
    svg.line(bx(f), top - 8, bx(f), top + row_h * rows.size(), whole ? "#000" : "#e0e0e0", whole ? 1.5 : 1);
    svg.text(bx(f), top - 12, fmt("%.2g", f), 10, "middle");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    const double yy = top + row_h * i;
    std::string label = std::to_string(i + 1) + "  " + r.drill + " " + r.name + " " + r.dtype + " " +
                        shape_string(r.shape);
    svg.text(label_x, yy + 12, label, 11, "start", drill_colour(r.drill), "font-family='monospace'");
    if (!r.roof_fraction) {
      svg.text(bar_x + 4, yy + 12, r.error.empty() ? "no roofline on this device" : "error", 11, "start", "#d62728");
      continue;
    }
    svg.rect(bar_x, yy + 3, bx(*r.roof_fraction) - bar_x, row_h - 5, drill_colour(r.drill));
    std::string note = fmt("%.2f", *r.roof_fraction);
    if (r.peer_ratio) note += fmt("   peer/kiln %.2f", *r.peer_ratio);
    if (!r.peer_agrees) note += "  (differs from peer!)";
    svg.text(bx(*r.roof_fraction) + 4, yy + 12, note, 10);
  }
}

}  // namespace

void write_roofline_svg(const std::string& path, const Ceilings& c, const std::vector<BenchRow>& rows) {
  const std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  if (ext != ".svg" && ext != ".SVG") throw Error("--plot writes SVG only; give a file name ending in .svg: " + path);
  Svg svg;
  const double height = std::max(640.0, 110 + 17.0 * rows.size());
  const double width = 1500;
  svg.s << "<?xml version='1.0' encoding='UTF-8'?>\n"
        << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
        << "' font-family='sans-serif'>\n";
  svg.rect(0, 0, width, height, "white");
  svg.text(20, 22,
           fmt("kiln bench, %.0f thread(s)", c.threads) + fmt(": bandwidth %.1f GB/s", c.bandwidth_gbps()) +
               fmt(", fp32 peak %.0f GFLOP/s", c.fp32_gflops) +
               (c.bf16_gflops > 0 ? fmt(", bf16 dot-product peak %.0f GFLOP/s", c.bf16_gflops) : std::string()) +
               (c.amx_bf16_gflops > 0 ? fmt(", bf16 AMX peak %.0f GFLOP/s", c.amx_bf16_gflops) : std::string()),
           13, "start", "#444");
  draw_roofline_panel(svg, c, rows);
  draw_fraction_panel(svg, rows);
  svg.s << "</svg>\n";
  std::ofstream f(path);
  if (!f) throw Error("cannot write the plot " + path);
  f << svg.s.str();
  if (!f) throw Error("failed writing the plot " + path);
}

}  // namespace kiln::bench
