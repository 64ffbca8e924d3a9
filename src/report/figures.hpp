// Figures drawn by gnuplot (Debian's gnuplot-nox) from data files and .gp scripts kept beside them,
// so a user can restyle a figure for a paper: NAME.dat + NAME.gp -> NAME.svg and NAME.png. gnuplot
// is started with posix_spawnp and an argument vector, never through a shell.
// Also the intervention figures (routing mass against causal effect; per-point effects) and the
// language model's CEDAR figure.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace arcal {

/// `s` as a gnuplot single-quoted string: quotes doubled, control characters (a newline would end
/// the command and start another) replaced by spaces. Every text from data files goes through it.
std::string gnuplot_quote(const std::string& s);

/// `s` as one column of a gnuplot data file: double-quoted (single quotes do not group words there,
/// so a label with a space, "corruption severity", used to split into two columns and leave the
/// plotted column empty), a double quote inside replaced by a single one, control characters by spaces.
std::string gnuplot_data_string(const std::string& s);

/// Writes DIR/NAME.dat and DIR/NAME.gp (whose body draws from 'NAME.dat'; the terminal lines are
/// added here), then runs gnuplot twice (svg, pngcairo) in DIR. Throws InputError when DIR cannot be
/// written or gnuplot fails (naming the script). Returns the paths of the SVG and PNG.
std::vector<std::string> render_gnuplot_figure(const std::string& dir, const std::string& name, const std::string& data,
                                               const std::string& plot_body, int width = 800, int height = 500);

/// From an arcal.intervene/1 JSON object: DIR/intervene_mass_vs_kl (scatter of family mass against
/// mean KL per (point, family), log-scaled effect), DIR/intervene_per_point (KL per point and
/// family) and, when the JSON has the attention/MLP all-points rows, DIR/intervene_mass_importance
/// (each family's mass beside its share of the KL, per sublayer type). Returns every written path.
std::vector<std::string> write_intervention_figures(const nlohmann::json& intervene, const std::string& dir);

/// From an arcal.cedar_lm/1 JSON object: DIR/cedar_lm_bpb, Δ bits per byte against dense by budget
/// for hard top-k and CEDAR at every context (CEDAR's B = 0 point is summaries only), with the intervals.
std::vector<std::string> write_cedar_lm_figure(const nlohmann::json& cedar_lm, const std::string& dir);

}  // namespace arcal
