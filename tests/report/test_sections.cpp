// The report's sections over typed results (issue 23, 6): runs are labelled by their shortest
// distinguishing path (traces kept in one folder keep their file names, test.npz files of different run
// folders get their folder), a study's reliability figure appears once, and the verdict table has one row
// per link of the decision chain.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "audit/audit_test_util.hpp"
#include "report/sections.hpp"
#include "results/read.hpp"

using namespace arcal;

TEST(ReportSections, RunLabelsAreTheShortestDistinguishingPaths) {
  const auto same_folder = report::run_labels({"traces/s0.npz", "traces/s1.npz", "traces/s2.npz"});
  EXPECT_EQ(same_folder.at("traces/s0.npz"), "s0.npz");  // the parent-folder rule named all three "traces"
  EXPECT_EQ(same_folder.at("traces/s2.npz"), "s2.npz");
  const auto run_dirs = report::run_labels({"runs/a/test.npz", "runs/b/test.npz", "/x/runs/c/val.npz"});
  EXPECT_EQ(run_dirs.at("runs/a/test.npz"), "a/test.npz");
  EXPECT_EQ(run_dirs.at("runs/b/test.npz"), "b/test.npz");
  EXPECT_EQ(run_dirs.at("/x/runs/c/val.npz"), "val.npz");
  // A file name every label ends with is dropped (it names no run), then a '-'-separated part they all start with.
  const auto deep = report::run_labels({"p/q/r/t.npz", "p/z/r/t.npz"});
  EXPECT_EQ(deep.at("p/q/r/t.npz"), "q/r");
  EXPECT_EQ(report::run_labels({"run0", "run1"}).at("run1"), "run1");
  const auto study = report::run_labels({"runs/fashion-mnist-ar-vit-tiny-full-s0-04957287/test.npz",
                                         "runs/fashion-mnist-ar-vit-tiny-full-s1-d5d8472f/test.npz"});
  EXPECT_EQ(study.at("runs/fashion-mnist-ar-vit-tiny-full-s1-d5d8472f/test.npz"), "s1-d5d8472f");
}

TEST(ReportSections, StudyReliabilityFigureOnceAndOneRowPerLink) {
  std::vector<AuditRunInput> runs;
  for (std::uint64_t s = 0; s < 2; ++s) {
    auto r = test_util::simulated_run(600, 0.0, s);
    r.run = "traces/s" + std::to_string(s) + ".npz";
    runs.push_back(r);
  }
  AuditOptions o;
  o.diagnostic.permutations = 99;
  o.run_condcal = false;
  ResultsDocument doc;
  doc.audit = run_audit(runs, o);
  doc.has_study = true;  // a study without convergence points
  report::Figures figures("");
  report::Context c{doc, "results.json", figures, {}, {}};
  const auto d = report::build_document(c);
  std::size_t reliability = 0, verdict_tables = 0;
  bool labelled = false;
  for (const auto& s : d.sections)
    for (const auto& b : s.blocks) {
      reliability += b.kind == report::Block::figure && b.body == "reliability_runs";
      if (b.kind == report::Block::table && !b.t.header.empty() && b.t.header[0] == "link of the chain") {
        ++verdict_tables;
        std::set<std::string> first;
        for (const auto& row : b.t.rows) EXPECT_TRUE(first.insert(row[0]).second) << row[0];  // no repeated row
      }
      for (const auto& row : b.t.rows)
        for (const auto& cell : row) labelled = labelled || cell == "s1.npz";
    }
  EXPECT_EQ(reliability, 1u);
  EXPECT_EQ(verdict_tables, 1u);
  EXPECT_TRUE(labelled);
}
