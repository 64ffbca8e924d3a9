#include "report/figures.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/subprocess.hpp"

namespace arcal {

namespace fs = std::filesystem;

std::string gnuplot_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "''";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += ' ';  // a newline would end the command
    else
      out += c;
  }
  return out + "'";
}

std::string gnuplot_data_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"')
      out += '\'';
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += ' ';
    else
      out += c;
  }
  return out + "\"";
}

namespace {
std::string quote(const std::string& s) { return gnuplot_quote(s); }
}  // namespace

std::vector<std::string> render_gnuplot_figure(const std::string& dir, const std::string& name, const std::string& data,
                                               const std::string& plot_body, int width, int height) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_input("render_gnuplot_figure", "cannot create " + dir + ": " + ec.message());
  write_file_atomic(dir + "/" + name + ".dat", data);
  // The kept script renders the SVG by default; arcal renders the PNG from the same body.
  const std::string svg_head = "set terminal svg size " + std::to_string(width) + "," + std::to_string(height) +
                               " dynamic enhanced font 'sans,12' background rgb 'white'\nset output '" + name +
                               ".svg'\n";
  write_file_atomic(dir + "/" + name + ".gp", svg_head + plot_body);
  const std::string png_head = "set terminal pngcairo size " + std::to_string(width) + "," + std::to_string(height) +
                               " enhanced font 'sans,10'\nset output '" + name + ".png'\n";
  write_file_atomic(dir + "/" + name + ".png.gp", png_head + plot_body);
  // gnuplot runs with an argument vector in DIR (no shell): the script is a file argument, so no
  // path or name is ever parsed as a command.
  for (const std::string& script : {name + ".gp", name + ".png.gp"}) {
    SpawnOptions o;
    o.cwd = dir;
    o.stderr_path = dir + "/" + script + ".log";
    const int rc = run_program({"gnuplot", script}, o);
    if (rc != 0) {
      // The report renders into a temporary directory that a failure removes, so a pointer to the
      // log would point nowhere: the message carries gnuplot's own last lines.
      std::string log;
      try {
        log = read_file(o.stderr_path);
      } catch (const InputError&) {
      }
      while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
      if (log.size() > 600) log = "..." + log.substr(log.size() - 600);
      std::replace(log.begin(), log.end(), '\n', ' ');
      throw_input("render_gnuplot_figure", "gnuplot failed on " + script + " (exit " + std::to_string(rc) + ")" +
                                               (log.empty() ? std::string(", no message") : ": " + log));
    }
  }
  fs::remove(dir + "/" + name + ".png.gp");
  fs::remove(dir + "/" + name + ".gp.log");
  fs::remove(dir + "/" + name + ".png.gp.log");
  return {dir + "/" + name + ".svg", dir + "/" + name + ".png"};
}

std::vector<std::string> write_intervention_figures(const nlohmann::json& j, const std::string& dir) {
  if (!j.contains("effects") || !j["effects"].is_array())
    throw_input("write_intervention_figures", "the JSON has no 'effects' array (not arcal.intervene/1?)");
  const std::vector<std::string> families = {"embedding", "current", "history"};
  std::ostringstream scatter;
  scatter << "# family_index family point mass mean_kl kl_low kl_high\n";
  std::map<int, std::map<std::string, double>> per_point;
  for (const auto& e : j["effects"]) {
    if (!e["point"].is_number_integer()) continue;  // the all-points rows are not per-point
    const int p = e["point"].get<int>();
    const std::string fam = e["family"].get<std::string>();
    std::size_t fi = 0;
    while (fi < families.size() && families[fi] != fam) ++fi;
    const double kl = std::max(e["mean_kl"].get<double>(), 1e-6);
    scatter << fi << " " << fam << " " << p << " " << e["mass"].get<double>() << " " << kl << " "
            << std::max(e["mean_kl_ci"][0].get<double>(), 1e-6) << " "
            << std::max(e["mean_kl_ci"][1].get<double>(), 1e-6) << "\n";
    per_point[p][fam] = kl;
  }
  const std::string title = "Routing mass vs causal effect (" + j.value("residual", std::string("?")) +
                            (j.value("as_attnres", std::string()).empty() ? "" : ", wrapped standard") + ")";
  std::string body = "set title " + quote(title) +
                     "\nset xlabel 'mean routing mass of the family'\nset ylabel 'mean KL(p || p_{ablated}) [nats]'\n"
                     "set logscale y\nset format y '10^{%L}'\nset key top left\nset grid\n"
                     "plot for [f=0:2] 'intervene_mass_vs_kl.dat' using ($1==f ? $4 : 1/0):5:6:7 with yerrorbars "
                     "pt 7 ps 0.8 title word('embedding current history', f+1)\n";
  auto out = render_gnuplot_figure(dir, "intervene_mass_vs_kl", scatter.str(), body);

  std::ostringstream bars;
  bars << "# point kl_embedding kl_current kl_history (1e-6 = family absent or no effect)\n";
  for (const auto& [p, m] : per_point) {
    bars << p;
    for (const auto& f : families) bars << " " << (m.count(f) ? m.at(f) : 1e-6);
    bars << "\n";
  }
  const std::string model =
      j.value("as_attnres", std::string()).empty() ? j.value("residual", std::string("?")) : "wrapped standard";
  std::string body2 =
      "set title 'Effect of ablating each source family, per routing point (" + model +
      ")'\n"
      "set xlabel 'routing point (even: attention, odd: MLP, last: final aggregation)'\n"
      "set ylabel 'mean KL [nats]'\nset logscale y\nset format y '10^{%L}'\nset yrange [1e-5:*]\nset style data "
      "histogram\n"
      "set style histogram cluster gap 1\nset style fill solid 0.8 border -1\nset key top left\nset grid y\n"
      "plot 'intervene_per_point.dat' using 2:xtic(1) title 'embedding', '' using 3 title 'current', "
      "'' using 4 title 'history'\n";
  auto out2 = render_gnuplot_figure(dir, "intervene_per_point", bars.str(), body2, 900, 500);
  out.insert(out.end(), out2.begin(), out2.end());

  // Mass against importance per sublayer type (seed 002): each family's share of the routing mass
  // beside its share of the summed KL, from the all-points rows of the attention and MLP points.
  std::ostringstream shares;
  shares << "# label mass_share kl_share (the family ablated at every point feeding that sublayer type)\n";
  int rows = 0;
  for (const std::string type : {"attention", "mlp"}) {
    std::map<std::string, std::pair<double, double>> fam;  // family -> (mass, kl)
    double kl_total = 0;
    for (const auto& e : j["effects"]) {
      if (e["point"].is_number_integer() || e.value("sublayer", std::string()) != type) continue;
      fam[e["family"].get<std::string>()] = {e["mass"].get<double>(), e["mean_kl"].get<double>()};
      kl_total += e["mean_kl"].get<double>();
    }
    for (const auto& f : families) {
      if (!fam.count(f)) continue;
      shares << type << "/" << f << " " << fam[f].first << " " << (kl_total > 0 ? fam[f].second / kl_total : 0.0)
             << "\n";
      ++rows;
    }
  }
  if (rows > 0) {
    std::string body3 = "set title 'Routing mass and causal importance by sublayer type (" + model +
                        ")'\n"
                        "set ylabel 'share'\nset yrange [0:1]\nset style data histogram\n"
                        "set style histogram cluster gap 1\nset style fill solid 0.8 border -1\nset key top right\n"
                        "set grid y\nset xtics rotate by -30\n"
                        "plot 'intervene_mass_importance.dat' using 2:xtic(1) title 'mean routing mass', '' using 3 "
                        "title 'share of the KL of ablating it'\n";
    auto out3 = render_gnuplot_figure(dir, "intervene_mass_importance", shares.str(), body3, 900, 500);
    out.insert(out.end(), out3.begin(), out3.end());
  }
  return out;
}

std::vector<std::string> write_cedar_lm_figure(const nlohmann::json& j, const std::string& dir) {
  if (!j.contains("contexts") || !j["contexts"].is_array())
    throw_input("write_cedar_lm_figure", "the JSON has no 'contexts' array (not arcal.cedar_lm/1?)");
  // One data block per (context, method): budget, Δ bits per byte, low, high.
  std::ostringstream data;
  std::string plot;
  int block = 0;
  for (const auto& c : j["contexts"]) {
    const auto L = c.at("context").get<std::int64_t>();
    for (const std::string method : {"topk", "cedar"}) {
      data << "# context " << L << " " << method << "\n";
      for (const auto& a : c.at("arms")) {
        const std::string m = a.at("method").get<std::string>();
        // Summaries only is CEDAR at B = 0; hard top-k has no B = 0 point (it would keep the sink and
        // the query's own chunk alone, which is not run).
        if ((m != method && !(m == "summary" && method == "cedar")) || !a.value("second_order", true)) continue;
        const auto& d = a.at("delta_vs_dense").at("bits_per_byte");
        data << (m == "summary" ? 0 : a.at("budget").get<std::int64_t>()) << " " << d.at("value").get<double>() << " "
             << d.at("ci")[0].get<double>() << " " << d.at("ci")[1].get<double>() << "\n";
      }
      data << "\n\n";
      plot += std::string(plot.empty() ? "plot " : ", ") + "'cedar_lm_bpb.dat' index " + std::to_string(block) +
              " using 1:2:3:4 with yerrorlines pt " + (method == "cedar" ? "7" : "5") + " dt " +
              (method == "cedar" ? "1" : "2") + " title " +
              gnuplot_quote((method == "cedar" ? "CEDAR, L = " : "top-k, L = ") + std::to_string(L));
      ++block;
    }
  }
  const std::string body =
      "set title 'Language model prefill: bits per byte lost against dense attention'\n"
      "set xlabel 'exact chunks per query B (CEDAR at 0: summaries only)'\nset ylabel '{/Symbol D} bits per byte vs "
      "dense'\n"
      "set key top right\nset grid\n" +
      plot + "\n";
  return render_gnuplot_figure(dir, "cedar_lm_bpb", data.str(), body);
}

}  // namespace arcal
