// The report's figures: typed series in, gnuplot data + script out (report/figures.hpp renders them to
// SVG and PNG and keeps NAME.dat and NAME.gp for editing). Each function only arranges numbers that
// results.json holds; the styling conventions live here: distinct colours *and* dash/point types per
// series (readable in grey print), per-bin counts under every reliability diagram, a calibrated
// model's consistency band, log-scaled heatmaps with a colour bar.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "calib/binning.hpp"

namespace arcal::report {

/// Renders figures into `dir` (nothing is written when dir is empty: a dry run) and keeps each SVG's
/// text for the self-contained HTML.
class Figures {
 public:
  explicit Figures(std::string dir) : dir_(std::move(dir)) {}
  void render(const std::string& name, const std::string& data, const std::string& body, int width, int height);
  std::map<std::string, std::string> svg;  ///< name -> SVG text
  std::map<std::string, int> widths;       ///< name -> display width [px]
  std::vector<std::string> paths;          ///< every SVG and PNG written

 private:
  std::string dir_;
};

struct RelPoint {
  double confidence = 0, accuracy = 0;
  std::size_t n = 0;
  double band_low = 0, band_high = 0;  ///< NaN: no band
};
struct RelSeries {
  std::string name;
  std::vector<RelPoint> rows;  ///< non-empty bins
};
struct RelPanel {
  std::string title;
  std::vector<RelSeries> series;
};
/// The non-empty bins of a reliability table (calib's BinRow table) with each bin's consistency band
/// (a calibrated model's central 95 % accuracy for its count and mean confidence: calib/binning.hpp
/// calibrated_accuracy_band).
RelSeries reliability_series(const std::string& name, const std::vector<BinRow>& rows);

/// Reliability diagrams, one panel per entry: the diagonal, the consistency band of single-series
/// panels, accuracy per bin (linespoints), and the bins' counts as bars on a right-hand axis.
void reliability_figure(Figures& f, const std::string& name, const std::string& title,
                        const std::vector<RelPanel>& panels, int bins);

/// One panel of the smooth reliability diagram: the kernel curve over the mesh t with its band
/// (low/high may be empty) and the density of the confidences.
struct SmoothPanel {
  std::string title;
  std::vector<double> t, accuracy, low, high, density;
};
/// relplot's smooth reliability diagram, one panel each: the curve, its bootstrap band, the diagonal,
/// and the confidence density as a shaded area on a right-hand axis shared by the panels.
void smooth_reliability_figure(Figures& f, const std::string& name, const std::string& title,
                               const std::vector<SmoothPanel>& panels);

struct HeatPanel {
  std::string title;
  std::size_t points = 0, sources = 0;
  std::vector<int> valid_sources;  ///< [points]: cells past it are blank
  std::vector<double> mean;        ///< [points x sources]
  /// Axis words: AttnRes depth routing reads layers (source 0 is the embedding); a mixture of experts
  /// reads experts at its routers, whose indices carry no order.
  std::string xlabel = "source i (0 = embedding)", ylabel = "routing point p";
  std::string cblabel = "mean weight (log scale)";  ///< the colour bar's (the first panel's is drawn)
};
/// Mean routing weights, log10 colour scale from 1e-3 to 1 with a colour bar.
void heatmap_figure(Figures& f, const std::string& name, const std::string& title,
                    const std::vector<HeatPanel>& panels);

struct HistPanel {
  std::string title;
  std::vector<double> centres, counts;  ///< a histogram already binned (counts per centre) ...
  std::vector<double> values;           ///< ... or raw values that gnuplot bins
  double observed = 0;                  ///< drawn as a red line
};
void histogram_figure(Figures& f, const std::string& name, const std::string& title, const std::string& xlabel,
                      const std::vector<HistPanel>& panels);

struct PRow {
  std::string label;
  double p = 1, p_holm = 1, p_bh = 1;
};
void pvalue_figure(Figures& f, const std::string& name, const std::vector<PRow>& rows, double alpha);

struct GainRow {
  std::string label;
  std::vector<double> run_gain, run_low, run_high;  ///< per run (may be empty)
  double mean = 0, low = 0, high = 0;               ///< across runs
};
void gain_figure(Figures& f, const std::string& name, const std::string& title, const std::vector<GainRow>& rows);

struct CurveSeries {
  std::string name;
  std::vector<double> x, y, low, high;  ///< low/high empty: no error bars
};
/// Lines over x (log scale when logx) with optional error bars and an optional dashed horizontal line.
void curves_figure(Figures& f, const std::string& name, const std::string& title, const std::string& xlabel,
                   const std::string& ylabel, const std::vector<CurveSeries>& series, bool logx, double hline);

/// Shared style: colour and dash type of series i.
std::string series_style(std::size_t i);

}  // namespace arcal::report

namespace arcal::report {

/// Points per category (x = 1..K, labelled) for several series, with a grey band per category.
struct CategoryPanel {
  std::string title, ylabel;
  std::vector<CurveSeries> series;          ///< x ignored: y[k] belongs to category k
  std::vector<double> band_low, band_high;  ///< [K] (empty: no band)
  std::string band_name;
};
void category_figure(Figures& f, const std::string& name, const std::string& title,
                     const std::vector<std::string>& categories, const std::vector<CategoryPanel>& panels);

}  // namespace arcal::report
