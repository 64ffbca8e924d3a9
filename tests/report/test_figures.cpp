// Figures: gnuplot renders the intervention figures from their kept .dat/.gp files; the SVG parses
// as XML (checked by Python's xml parser) and the PNG has the PNG signature; bad input is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "report/figures.hpp"

using namespace arcal;
namespace fs = std::filesystem;

TEST(Figures, InterventionFiguresRenderAsValidSvgAndPng) {
  if (std::system("command -v gnuplot > /dev/null") != 0) GTEST_SKIP() << "gnuplot not installed";
  nlohmann::json j = {{"residual", "full"}, {"as_attnres", ""}, {"effects", nlohmann::json::array()}};
  for (int p = 1; p < 4; ++p)
    for (const std::string f : {"embedding", "current", "history"})
      j["effects"].push_back({{"point", p},
                              {"family", f},
                              {"mass", 0.1 * p},
                              {"mean_kl", 0.01 * p},
                              {"mean_kl_ci", {0.005 * p, 0.02 * p}}});
  j["effects"].push_back(
      {{"point", "all"}, {"family", "history"}, {"mass", 0.5}, {"mean_kl", 1.0}, {"mean_kl_ci", {0.9, 1.1}}});
  const auto dir = (fs::path(ARCAL_BINARY_DIR) / "test_tmp" / "figures").string();
  fs::remove_all(dir);
  auto paths = write_intervention_figures(j, dir);
  ASSERT_EQ(paths.size(), 4u);
  for (const auto& p : paths) {
    ASSERT_TRUE(fs::exists(p)) << p;
    if (p.size() > 4 && p.substr(p.size() - 4) == ".png") {
      const auto bytes = read_file(p);
      EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << p;
    } else {
      const std::string cmd =
          std::string(ARCAL_TEST_PYTHON) + " -c \"import xml.dom.minidom,sys; xml.dom.minidom.parse('" + p + "')\"";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << p;
    }
  }
  // The data and the script stay beside the figure, and the script re-renders it.
  EXPECT_TRUE(fs::exists(dir + "/intervene_mass_vs_kl.dat"));
  EXPECT_TRUE(fs::exists(dir + "/intervene_mass_vs_kl.gp"));
  std::ifstream dat(dir + "/intervene_mass_vs_kl.dat");
  int rows = 0;
  for (std::string line; std::getline(dat, line);) rows += !line.empty() && line[0] != '#';
  EXPECT_EQ(rows, 9);  // per-point rows only; the all-points row is excluded
  EXPECT_THROW(write_intervention_figures(nlohmann::json::object(), dir), InputError);
}
