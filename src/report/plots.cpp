#include "report/plots.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/atomic_file.hpp"
#include "report/figures.hpp"

namespace arcal::report {

namespace {

std::string g(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("NaN"); }
std::string q(const std::string& s) { return gnuplot_quote(s); }
std::pair<int, int> grid(std::size_t n) {
  const int cols = n <= 2 ? int(std::max<std::size_t>(n, 1)) : n <= 6 ? 3 : 4;
  return {int((n + std::size_t(cols) - 1) / std::size_t(cols)), cols};
}
// Colour-blind-safe colours (Okabe-Ito) with a dash type and point type each.
const char* kColours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"};
const int kPoints[] = {7, 5, 9, 11, 13, 3, 1, 2};

}  // namespace

/// 1, 2 or 5 times a power of ten, at least x (> 0): a tick step people read at a glance.
double nice_step(double x) {
  if (!(x > 0) || !std::isfinite(x)) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(x)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= x) return m * p;
  return 10.0 * p;
}

std::string series_style(std::size_t i) {
  return fmt::format("lc rgb '{}' dt {} pt {}", kColours[i % 8], int(i % 5) + 1, kPoints[i % 8]);
}

void Figures::render(const std::string& name, const std::string& data, const std::string& body, int width, int height) {
  widths[name] = width;
  if (dir_.empty()) return;
  // Plain text labels: run and probe names hold underscores, which enhanced mode reads as subscripts.
  auto written = render_gnuplot_figure(dir_, name, data, "set termoption noenhanced\n" + body, width, height);
  for (const auto& p : written)
    if (p.size() > 4 && p.substr(p.size() - 4) == ".svg") svg[name] = read_file(p);
  paths.insert(paths.end(), written.begin(), written.end());
}

RelSeries reliability_series(const std::string& name, const std::vector<BinRow>& rows) {
  RelSeries s{name, {}};
  for (const auto& r : rows)
    if (r.n > 0) {
      const auto band = calibrated_accuracy_band(r.n, r.mean_conf);
      s.rows.push_back({r.mean_conf, r.accuracy, r.n, band.low, band.high});
    }
  return s;
}

void reliability_figure(Figures& f, const std::string& name, const std::string& title,
                        const std::vector<RelPanel>& panels, int bins) {
  std::ostringstream d;
  d << "# blocks (index = panel * series + s): confidence accuracy n band_low band_high, one row per non-empty bin\n";
  std::size_t ns = 0;
  for (const auto& p : panels) ns = std::max(ns, p.series.size());
  std::vector<double> max_n(panels.size(), 1.0);
  for (std::size_t i = 0; i < panels.size(); ++i)
    for (std::size_t s = 0; s < ns; ++s) {
      d << "# " << panels[i].title << (s < panels[i].series.size() ? ": " + panels[i].series[s].name : "") << "\n";
      const bool has = s < panels[i].series.size() && !panels[i].series[s].rows.empty();
      if (!has) d << "NaN NaN 0 NaN NaN\n";
      if (has)
        for (const auto& x : panels[i].series[s].rows) {
          d << g(x.confidence) << " " << g(x.accuracy) << " " << x.n << " " << g(x.band_low) << " " << g(x.band_high)
            << "\n";
          max_n[i] = std::max(max_n[i], double(x.n));
        }
      d << "\n\n";
    }
  const auto [rows, cols] = grid(panels.size());
  // One count axis for every panel (side-by-side panels used to differ), its ticks running to the
  // largest count only: the bars fill the lower quarter of the panel, so the axis spans four times it.
  const double shared_max = max_n.empty() ? 1.0 : *std::max_element(max_n.begin(), max_n.end());
  const double step = nice_step(shared_max / 3.0);
  std::ostringstream b;
  b << "set multiplot layout " << rows << "," << cols << " title " << q(title) << "\n";
  b << "set xrange [0:1]\nset yrange [0:1]\nset xlabel 'confidence'\nset ylabel 'accuracy'\nset grid\n"
       "set key top left font ',8'\nset ytics nomirror\nset y2label 'examples per bin' font ',8' offset -1,0\n"
    << "set y2tics 0," << g(step) << "," << g(shared_max) << " nomirror font ',8'\n"
    << "set boxwidth " << g(0.9 / std::max(1, bins)) << " absolute\n";
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const auto& p = panels[i];
    b << "set title " << q(p.title) << " font ',10'\nset y2range [0:" << g(4.0 * shared_max) << "]\n";
    b << "plot ";
    for (std::size_t s = 0; s < p.series.size(); ++s)
      b << "'" << name << ".dat' index " << i * ns + s
        << " using 1:3 axes x1y2 with boxes fs transparent solid 0.25 noborder lc rgb '" << kColours[s % 8]
        << "' notitle, ";
    if (p.series.size() == 1)
      b << "'" << name << ".dat' index " << i * ns
        << " using 1:4:5 with filledcurves fs transparent solid 0.3 noborder lc rgb "
        << "'#999999' title 'calibrated 95 % band', ";
    b << "x with lines dt 2 lc rgb 'gray40' title 'perfect calibration'";
    for (std::size_t s = 0; s < p.series.size(); ++s)
      b << ", '" << name << ".dat' index " << i * ns + s << " using 1:2 with linespoints ps 0.6 lw 1.5 "
        << series_style(s) << " title " << q(p.series[s].name);
    b << "\n";
  }
  b << "unset multiplot\n";
  f.render(name, d.str(), b.str(), 380 * cols, 340 * rows + 40);
}

void smooth_reliability_figure(Figures& f, const std::string& name, const std::string& title,
                               const std::vector<SmoothPanel>& panels) {
  std::ostringstream d;
  double max_density = 0.0;
  for (const auto& p : panels) {
    d << "# " << p.title << ": t accuracy low high density\n";
    for (std::size_t i = 0; i < p.t.size(); ++i) {
      d << g(p.t[i]) << " " << g(p.accuracy[i]) << " " << g(p.low.empty() ? NAN : p.low[i]) << " "
        << g(p.high.empty() ? NAN : p.high[i]) << " " << g(p.density[i]) << "\n";
      max_density = std::max(max_density, p.density[i]);
    }
    if (p.t.empty()) d << "NaN NaN NaN NaN NaN\n";
    d << "\n\n";
  }
  const auto [rows, cols] = grid(panels.size());
  // The density fills the lower quarter: its axis spans four times the largest density of any panel.
  const double dmax = max_density > 0 ? max_density : 1.0;
  std::ostringstream b;
  b << "set multiplot layout " << rows << "," << cols << " title " << q(title) << "\n";
  b << "set xrange [0:1]\nset yrange [0:1]\nset xlabel 'confidence'\nset ylabel 'accuracy'\nset grid\n"
       "set key top left font ',8'\nset ytics nomirror\nset y2label 'density of confidences' font ',8' offset -1,0\n"
    << "set y2tics 0," << g(nice_step(dmax / 3.0)) << "," << g(dmax)
    << " nomirror font ',8'\nset y2range [0:" << g(4.0 * dmax) << "]\n";
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const auto& p = panels[i];
    b << "set title " << q(p.title) << " font ',10'\nplot '" << name << ".dat' index " << i
      << " using 1:5 axes x1y2 with filledcurves y1=0 fs transparent solid 0.2 noborder lc rgb 'gray50' notitle, ";
    if (!p.low.empty())
      b << "'" << name << ".dat' index " << i
        << " using 1:3:4 with filledcurves fs transparent solid 0.3 noborder lc rgb '" << kColours[0]
        << "' title '95 % bootstrap band', ";
    b << "x with lines dt 2 lc rgb 'gray40' title 'perfect calibration', '" << name << ".dat' index " << i
      << " using 1:2 with lines lw 2 " << series_style(0) << " title 'smoothed accuracy'\n";
  }
  b << "unset multiplot\n";
  f.render(name, d.str(), b.str(), 380 * cols, 340 * rows + 40);
}

void heatmap_figure(Figures& f, const std::string& name, const std::string& title,
                    const std::vector<HeatPanel>& panels) {
  std::ostringstream d;
  std::size_t max_s = 0, max_p = 0;
  for (const auto& h : panels) {
    d << "# " << h.title << ": point source mean_weight (NaN past the point's source count)\n";
    for (std::size_t p = 0; p < h.points; ++p) {
      for (std::size_t i = 0; i < h.sources; ++i) {
        const bool valid = int(i) < h.valid_sources[p];
        d << p << " " << i << " " << (valid ? g(h.mean[p * h.sources + i]) : std::string("NaN")) << "\n";
      }
      d << "\n";
    }
    d << "\n";
    max_s = std::max(max_s, h.sources);
    max_p = std::max(max_p, h.points);
  }
  const auto [rows, cols] = grid(panels.size());
  std::ostringstream b;
  b << "set multiplot layout " << rows << "," << cols << " title " << q(title) << "\n";
  // Perceptually uniform (viridis-like) on a log scale: small weights stay distinguishable.
  b << "set palette defined (0 '#440154', 0.25 '#3b528b', 0.5 '#21918c', 0.75 '#5ec962', 1 '#fde725')\n"
       "set logscale cb\nset cbrange [0.001:1]\nset format cb '1e%L'\n"
       "set colorbox\n";
  b << "set cblabel " << q(panels.empty() ? std::string() : panels[0].cblabel) << " font ',8'\n";
  b << "set xrange [-0.5:" << double(max_s) - 0.5 << "]\nset yrange [" << double(max_p) - 0.5 << ":-0.5]\n";
  // Sources and points are integers: integer ticks only (the axes used to read -0.5, 0, 0.5, ...).
  b << "set xtics 0," << std::max<std::size_t>(1, (max_s + 11) / 12) << " format '%g'\nset ytics 0,"
    << std::max<std::size_t>(1, (max_p + 11) / 12) << " format '%g'\n";
  for (std::size_t i = 0; i < panels.size(); ++i)
    b << "set title " << q(panels[i].title) << " font ',10'\nset xlabel " << q(panels[i].xlabel) << "\nset ylabel "
      << q(panels[i].ylabel) << "\nplot '" << name << ".dat' index " << i
      << " using 2:1:($3 < 0.001 ? 0.001 : $3) with image pixels notitle\n";  // pixels: discrete cells in SVG too (a
                                                                              // browser smooths an embedded raster)
  b << "unset multiplot\n";
  f.render(name, d.str(), b.str(), 440 * cols, 380 * rows + 40);
}

void histogram_figure(Figures& f, const std::string& name, const std::string& title, const std::string& xlabel,
                      const std::vector<HistPanel>& panels) {
  std::ostringstream d;
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const auto& p = panels[k];
    d << "# " << p.title << (p.values.empty() ? ": bin centre, count\n" : ": value\n");
    if (p.values.empty())
      for (std::size_t b = 0; b < p.centres.size(); ++b) d << g(p.centres[b]) << " " << g(p.counts[b]) << "\n";
    for (double v : p.values) d << g(v) << "\n";
    if (p.values.empty() && p.centres.empty()) d << "NaN 0\n";
    d << "\n\n";
  }
  const auto [rows, cols] = grid(panels.size());
  std::ostringstream b;
  b << "set multiplot layout " << rows << "," << cols << " title " << q(title) << "\n"
    << "set style fill solid 0.6 border -1\nset xlabel " << q(xlabel) << "\nset format x '%.3g'\nset xtics font ',9'\n";
  for (std::size_t k = 0; k < panels.size(); ++k) {
    const auto& p = panels[k];
    // The x range always holds the observed value (it used to fall outside the axis and not be drawn),
    // with four readable ticks (no rotation; %.3g, never "-0.0000").
    double lo = p.observed, hi = p.observed;
    for (double v : p.values) lo = std::min(lo, v), hi = std::max(hi, v);
    for (double c : p.centres) lo = std::min(lo, c), hi = std::max(hi, c);
    const double span = hi > lo ? hi - lo : std::max(1e-6, std::fabs(p.observed) * 0.1);
    const double x0 = lo - 0.08 * span, x1 = hi + 0.08 * span;
    const std::string panel_title = p.values.empty() || p.values.size() >= 20
                                        ? p.title
                                        : p.title + ", " + std::to_string(p.values.size()) + " replicates";
    b << "unset key\nset title " << q(panel_title) << " font ',9'\nunset arrow\nset xrange [" << g(x0) << ":" << g(x1)
      << "]\nset xtics " << g(nice_step((x1 - x0) / 4.0)) << "\nset arrow from " << g(p.observed) << ", graph 0 to "
      << g(p.observed) << ", graph 1 nohead lw 2 lc rgb '#D55E00' front\n";
    if (p.values.empty()) {
      b << "set ylabel 'count'\nset yrange [0:*]\nset ytics autofreq\nplot '" << name << ".dat' index " << k
        << " using 1:2 with boxes lc rgb '#56B4E9' notitle\n";
    } else if (p.values.size() < 20) {
      // A few replicates (sequential stopping): each one a dot, not a histogram of 2-6 bars.
      b << "set ylabel ''\nset yrange [-1:1]\nunset ytics\nplot '" << name << ".dat' index " << k
        << " using 1:((int($0) % 5 - 2) * 0.3) with points pt 7 ps 1.2 lc rgb '#0072B2' notitle\nset ytics autofreq\n";
    } else {
      const double width = std::max(1e-9, (hi - lo) / double(std::clamp<std::size_t>(p.values.size() / 4, 5, 30)));
      b << "set ylabel 'count'\nset yrange [0:*]\nset ytics autofreq\nset boxwidth " << g(width) << " absolute\nplot '"
        << name << ".dat' index " << k << " using (" << g(width) << "*floor($1/" << g(width) << ")+" << g(width / 2)
        << "):(1.0) smooth frequency with boxes lc rgb '#56B4E9' notitle\n";
    }
  }
  b << "unset multiplot\n";
  f.render(name, d.str(), b.str(), 400 * cols, 300 * rows + 40);
}

void pvalue_figure(Figures& f, const std::string& name, const std::vector<PRow>& rows, double alpha) {
  std::ostringstream d;
  d << "# index label p p_holm p_bh\n";
  for (std::size_t i = 0; i < rows.size(); ++i)
    d << i + 1 << " " << gnuplot_data_string(rows[i].label) << " " << g(rows[i].p) << " " << g(rows[i].p_holm) << " "
      << g(rows[i].p_bh) << "\n";
  std::ostringstream b;
  b << "set title 'p-values of the diagnostic family (-log10), raw and adjusted'\nset style data histogram\n"
       "set style histogram cluster gap 1\nset style fill solid 0.8 border -1\nset ylabel '-log10 p'\nset yrange "
       "[0:*]\n"
       "set key outside top center horizontal font ',9'\nset grid y\nset xtics font ',9'\n"
    << "plot '" << name << ".dat' using (-log10($3)):xtic(2) lc rgb '" << kColours[0]
    << "' title 'raw', '' using (-log10($4)) lc rgb '" << kColours[1]
    << "' title 'Holm', '' using (-log10($5)) lc rgb '" << kColours[2] << "' title 'BH', " << g(-std::log10(alpha))
    << " with lines lw 2 dt 2 lc rgb 'black' title 'alpha'\n";
  f.render(name, d.str(), b.str(), std::max(600, int(60 * rows.size() + 200)), 420);
}

void gain_figure(Figures& f, const std::string& name, const std::string& title, const std::vector<GainRow>& rows) {
  std::ostringstream d0, d1;
  d0 << "# y gain low high (per run)\n";
  d1 << "# y mean low high (across runs)\n";
  std::string ytics;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const auto& r = rows[k];
    const std::size_t nr = r.run_gain.size();
    for (std::size_t i = 0; i < nr; ++i)
      d0 << g(double(k + 1) + 0.25 * (double(i) - double(nr - 1) / 2.0) / double(std::max<std::size_t>(1, nr))) << " "
         << g(r.run_gain[i]) << " " << g(r.run_low[i]) << " " << g(r.run_high[i]) << "\n";
    d1 << g(double(k + 1) - 0.3) << " " << g(r.mean) << " " << g(r.low) << " " << g(r.high) << "\n";
    ytics += (k ? ", " : "") + q(r.label) + " " + std::to_string(k + 1);
  }
  if (d0.str().find('\n', 30) == std::string::npos) d0 << "NaN NaN NaN NaN\n";
  std::ostringstream b;
  b << "set title " << q(title) << "\nset ytics (" << ytics
    << ") font ',9'\nset yrange [0.4:" << double(rows.size()) + 0.6
    << "]\nset xlabel 'gain [nats]'\nset grid x\nset arrow from 0, graph 0 to 0, graph 1 nohead dt 2\n"
       "set key outside top center horizontal font ',9'\nset lmargin 38\n"
    << "plot '" << name << ".dat' index 0 using 2:1:3:4 with xerrorbars ps 0.6 " << series_style(0)
    << " title 'per run (95 % CI)', "
    << "'' index 1 using 2:1:3:4 with xerrorbars ps 0.9 lw 2 " << series_style(1) << " title 'across runs (95 % CI)'\n";
  f.render(name, d0.str() + "\n\n" + d1.str(), b.str(), 1000, 120 + 60 * int(rows.size()));
}

void curves_figure(Figures& f, const std::string& name, const std::string& title, const std::string& xlabel,
                   const std::string& ylabel, const std::vector<CurveSeries>& series, bool logx, double hline) {
  std::ostringstream d;
  for (const auto& s : series) {
    d << "# " << s.name << ": x y low high\n";
    for (std::size_t i = 0; i < s.x.size(); ++i)
      d << g(s.x[i]) << " " << g(s.y[i]) << " " << g(s.low.empty() ? NAN : s.low[i]) << " "
        << g(s.high.empty() ? NAN : s.high[i]) << "\n";
    if (s.x.empty()) d << "NaN NaN NaN NaN\n";
    d << "\n\n";
  }
  std::ostringstream b;
  b << "set title " << q(title) << "\nset xlabel " << q(xlabel) << "\nset ylabel "
    << q(ylabel)
    // Many series: the legend below the plot in two columns, so the plot keeps its width (a 12-entry
    // legend of file names beside it used to squeeze the plot to a third of the figure).
    << "\nset grid\n"
    << (series.size() <= 3 ? "set key top right box opaque font ',9'\n"
                           : "set key outside bottom center horizontal maxcols 2 font ',8'\n")
    << (logx ? "set logscale x\n" : "") << "set offsets 0, 0, graph 0.05, graph 0.05\n";  // no line on the frame
  if (std::isfinite(hline))
    b << "set arrow from graph 0, first " << g(hline) << " to graph 1, first " << g(hline)
      << " nohead dt 2 lc rgb 'black'\n";
  b << "plot ";
  for (std::size_t k = 0; k < series.size(); ++k) {
    // Small horizontal offsets keep overlapping error bars apart on a log axis.
    const std::string x = logx ? fmt::format("($1*(1+0.02*{}))", int(k) - int(series.size() / 2)) : "1";
    b << (k ? ", " : "") << "'" << name << ".dat' index " << k << " using " << x << ":2"
      << (series[k].low.empty() ? " with linespoints" : ":3:4 with yerrorlines") << " ps 0.7 lw 1.5 " << series_style(k)
      << " title " << q(series[k].name);
  }
  b << "\n";
  const int legend_rows = series.size() <= 3 ? 0 : int((series.size() + 1) / 2);
  f.render(name, d.str(), b.str(), 1000, 460 + 16 * legend_rows);
}

namespace {
/// Whether the categories' labels fit side by side in `width` px at font 9 (about 7 px a character).
bool fits_horizontally(const std::vector<std::string>& categories, double width) {
  std::size_t longest = 0;
  for (const auto& c : categories) longest = std::max(longest, c.size());
  return double(categories.size()) * (7.0 * double(longest) + 8.0) <= width;
}
}  // namespace

void category_figure(Figures& f, const std::string& name, const std::string& title,
                     const std::vector<std::string>& categories, const std::vector<CategoryPanel>& panels) {
  std::ostringstream d;
  std::string xtics;
  for (std::size_t k = 0; k < categories.size(); ++k)
    xtics += (k ? ", " : "") + q(categories[k]) + " " + std::to_string(k + 1);
  for (const auto& p : panels) {
    d << "# " << p.title << " band: x low high\n";
    for (std::size_t k = 0; k < p.band_low.size(); ++k)
      for (double dx : {-0.45, 0.45})
        d << g(double(k + 1) + dx) << " " << g(p.band_low[k]) << " " << g(p.band_high[k]) << "\n";
    if (p.band_low.empty()) d << "NaN NaN NaN\n";
    d << "\n\n";
    for (const auto& s : p.series) {
      d << "# " << p.title << ": " << s.name << ": category value\n";
      for (std::size_t k = 0; k < s.y.size(); ++k) d << k + 1 << " " << g(s.y[k]) << "\n";
      d << "\n\n";
    }
  }
  std::ostringstream b;
  b << "set multiplot layout 1," << panels.size() << " title " << q(title)
    << "\n"
    // Labels stay horizontal when they fit a panel's plot (560 px wide, about 440 of them plot); only
    // long or many labels are turned.
    << "set xtics (" << xtics << ")" << (fits_horizontally(categories, 440.0) ? "" : " rotate by -30")
    << " font ',9'\nset xrange [0.4:" << double(categories.size()) + 0.6
    << "]\nset grid y\nset key outside bottom center horizontal font ',9'\n";
  std::size_t index = 0;
  for (const auto& p : panels) {
    b << "set title " << q(p.title) << "\nset ylabel " << q(p.ylabel) << "\nplot '" << name << ".dat' index " << index++
      << " using 1:2:3 with filledcurves fc rgb '#dddddd' title " << q(p.band_name);
    for (std::size_t s = 0; s < p.series.size(); ++s)
      b << ", '' index " << index++ << " using ($1+" << g(0.1 * (double(s) - double(p.series.size() - 1) / 2.0))
        << "):2 with points ps 1.1 " << series_style(s) << " title " << q(p.series[s].name);
    b << "\n";
  }
  b << "unset multiplot\n";
  f.render(name, d.str(), b.str(), 560 * int(panels.size()), 520);
}

}  // namespace arcal::report
