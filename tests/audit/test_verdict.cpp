// The verdict's decision chain (docs/method.md §6.8 "The verdict") on typed results built by hand: each answer word
// from (dependence, gain interval, sensitivity), the defects the earlier rule had (a probe family's Holm
// vetoing the test that found a planted effect; a 1/100-size effect read as "Yes"; a repeated evidence
// row), the fixed sequence (beyond the outputs only after dependence), and the secondary family's Holm.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "audit/audit.hpp"
#include "audit/verdict.hpp"
#include "stats/multiplicity.hpp"

using namespace arcal;

namespace {

DiagnosticTest diag_test(double p_holm, double gap) {
  DiagnosticTest t;
  t.run = "r";
  t.statistic = "re";
  t.p_holm = p_holm;
  t.result.p = p_holm;
  t.result.gap = gap;
  return t;
}

/// A probe family test on log-loss with gain g and interval [lo, hi] (stored as Δ = −gain).
AcrossRunTest probe_test(const std::string& comparison, double g, double lo, double hi, double p, double p_holm,
                         std::size_t runs = 3) {
  AcrossRunTest t;
  t.comparison = comparison;
  t.metric = "log_loss";
  t.mean_delta = -g;
  t.ci = {-hi, -lo};
  t.p = p;
  t.p_holm = p_holm;
  t.deltas.assign(runs, -g);
  return t;
}

AuditResults base(double diag_p_holm) {
  AuditResults r;
  r.diagnostic.options.alpha = 0.05;
  r.diagnostic.tests = {diag_test(diag_p_holm, 0.01), diag_test(0.9, -0.002)};
  return r;
}

void with_probes(AuditResults& r, double g, double lo, double hi, double p, double p_holm) {
  r.has_probes = true;
  r.probes.tests = {probe_test("full_vector_vs_capacity_matched", g, lo, hi, p, p_holm),
                    probe_test("full_vector_vs_shuffled_global", 0.001, -0.002, 0.004, 0.01, 0.2),
                    probe_test("full_vector_vs_shuffled_within_bins", 0.001, -0.002, 0.004, 0.04, 0.2),
                    probe_test("full_vector_vs_linear", 0.001, -0.002, 0.004, 0.03, 0.2),
                    probe_test("full_logit_routing_vs_full_logit", 0.001, -0.002, 0.004, 0.5, 1.0),
                    probe_test("predictive_entropy_vs_capacity_matched", 0.0, -0.002, 0.002, 0.8, 1.0)};
}

void with_exact_null(AuditResults& r, double p_conf, double gain_conf, double p_full) {
  r.has_exact_null = true;
  r.exact_null.replicates = 99;
  ExactNullPooled c;
  c.variant = "confidence";
  c.comparison = "full_vector_vs_capacity_matched";
  c.p = p_conf;
  c.real_mean_gain = gain_conf;
  c.runs = 3;
  ExactNullPooled f = c;
  f.variant = "full_logit";
  f.p = p_full;
  r.exact_null.pooled = {c, f};
}

void with_sensitivity(AuditResults& r, double recovery_low) {
  r.has_sensitivity = true;
  r.sensitivity.threshold = 0.5;
  for (double e : {0.002, 0.005, 0.010}) {
    SensitivityEffect se;
    se.effect_nats = e;
    RecoveryEstimate est;
    est.probe = "full_vector";
    est.has_recovery = true;
    est.recovery = recovery_low + 0.1 + e;  // distinct per effect, so the test sees which one was used
    est.recovery_ci = {recovery_low + e, recovery_low + 0.2 + e};
    se.probes = {est};
    r.sensitivity.by_effect.push_back(se);
  }
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

// Issue 23 (1): the diagnostic rejects after Holm (p = 0.002) and the gain interval [+0.0056, +0.0316]
// excludes 0 and reaches delta, yet the probe family's Holm p (0.131 over 18 comparisons) used to turn
// the verdict into "No". The chain takes the gain at full alpha: present.
TEST(Verdict, PlantedEffectIsPresentWhatEverTheProbeFamilysHolm) {
  auto r = base(0.002);
  with_probes(r, 0.0186, 0.0056, 0.0316, 0.004, 0.131);
  const auto v = make_verdict(r);
  EXPECT_EQ(v.answer, "present");
  EXPECT_EQ(v.dependence.test, "diagnostic.decision");
  EXPECT_EQ(v.dependence.status, "rejects");
  EXPECT_NEAR(v.primary.effect, 0.0186, 1e-12);
  EXPECT_NEAR(v.primary.effect_ci.low, 0.0056, 1e-12);
  EXPECT_NEAR(v.primary.effect_ci.high, 0.0316, 1e-12);
  EXPECT_EQ(v.summary.rfind("Yes", 0), 0u) << v.summary;
  // The sentence names the tests it rests on, with their numbers.
  EXPECT_TRUE(contains(v.summary, "diagnostic")) << v.summary;
  EXPECT_TRUE(contains(v.summary, "+0.0186 nats [+0.0056, +0.0316]")) << v.summary;
  EXPECT_TRUE(contains(v.summary, "0.005 nats")) << v.summary;  // delta
  // Without the probes the same data are not called "Yes": no gain was measured.
  auto np = base(0.002);
  EXPECT_EQ(make_verdict(np).answer, "not assessed");
  EXPECT_TRUE(contains(make_verdict(np).summary, "depends on correctness")) << make_verdict(np).summary;
}

// Issue 23 (2): an effect 1/100 of the reference with a significant exact null read "Yes" (Intel) or
// "Weakly" (AMD). With the whole interval below delta it is negligible on both.
TEST(Verdict, TinyEffectIsNegligibleWhicheverWayTheNoiseFalls) {
  for (double gain : {+0.0001, -0.0002}) {
    auto r = base(0.4);
    with_probes(r, gain, -0.0005, +0.0007, 0.6, 1.0);
    with_exact_null(r, gain > 0 ? 0.010 : 0.030, gain, 0.7);
    const auto v = make_verdict(r);
    EXPECT_EQ(v.answer, "negligible") << v.summary;
    EXPECT_EQ(v.dependence.test, "exact_null.conditional_permutation");
    EXPECT_EQ(v.beyond_outputs.status, "does not reject");
    EXPECT_TRUE(contains(v.summary, "below the smallest effect of interest")) << v.summary;
  }
  // The same interval with no dependence (the default study in fp32: p = 0.851): still negligible, the
  // same word — the answer follows the size of the effect; the sentence says no dependence was detected.
  auto r = base(0.4);
  with_probes(r, 0.0001, -0.0005, 0.0007, 0.6, 1.0);
  with_exact_null(r, 0.851, 0.0001, 0.7);
  const auto v = make_verdict(r);
  EXPECT_EQ(v.answer, "negligible");
  EXPECT_EQ(v.dependence.status, "does not reject");
  EXPECT_TRUE(contains(v.summary, "no dependence beyond confidence detected")) << v.summary;
  EXPECT_EQ(v.beyond_outputs.status, "not reached");  // fixed sequence: link 3 only after link 1
  EXPECT_FALSE(contains(v.summary, "Beyond the whole output")) << v.summary;
}

TEST(Verdict, WideIntervalsNeedTheSensitivityAuditToBeCalledAbsent) {
  auto r = base(0.4);
  with_probes(r, 0.001, -0.004, 0.008, 0.6, 1.0);
  EXPECT_EQ(make_verdict(r).answer, "undetected");  // no sensitivity audit
  with_sensitivity(r, 0.55);                        // R at 0.005 nats: [0.555, 0.755] >= 0.5
  auto v = make_verdict(r);
  EXPECT_EQ(v.answer, "absent") << v.summary;
  EXPECT_DOUBLE_EQ(v.sensitivity_effect, 0.005);  // the largest injected effect <= delta
  EXPECT_NEAR(v.recovery_ci.low, 0.555, 1e-12);
  r.sensitivity = {};
  with_sensitivity(r, 0.2);  // underpowered
  v = make_verdict(r);
  EXPECT_EQ(v.answer, "undetected");
  EXPECT_TRUE(contains(v.summary, "not detected, not as absent")) << v.summary;
  // A larger delta reads the sensitivity at the larger effect.
  r.options.smallest_effect = 0.012;
  EXPECT_DOUBLE_EQ(make_verdict(r).sensitivity_effect, 0.010);
}

TEST(Verdict, DependenceWithAnOpenGainIsUndetectedAndNoIsNeverBesideAPositiveInterval) {
  auto r = base(0.01);
  with_probes(r, 0.004, -0.001, 0.009, 0.1, 0.5);  // dependence, interval includes 0 and delta
  EXPECT_EQ(make_verdict(r).answer, "undetected");
  // No dependence but the interval lies above 0 and reaches delta: never "No" without saying why.
  auto q = base(0.3);
  with_probes(q, 0.008, 0.001, 0.015, 0.02, 0.2);
  with_sensitivity(q, 0.9);
  const auto v = make_verdict(q);
  EXPECT_EQ(v.answer, "undetected");
  EXPECT_NE(v.summary.rfind("No", 0), 0u);
  EXPECT_TRUE(contains(v.summary, "excludes 0")) << v.summary;
}

TEST(Verdict, BeyondOutputsAndTheSecondaryFamily) {
  auto r = base(0.001);
  with_probes(r, 0.02, 0.01, 0.03, 0.001, 0.01);
  with_exact_null(r, 0.01, 0.02, 0.02);
  auto v = make_verdict(r);
  EXPECT_EQ(v.answer, "present");
  EXPECT_EQ(v.beyond_outputs.variant, "full_logit");
  EXPECT_EQ(v.beyond_outputs.status, "rejects");
  EXPECT_TRUE(contains(v.summary, "Beyond the whole output vector")) << v.summary;
  // Secondary: every other comparison except the headline, Holm within its own family of 5.
  ASSERT_EQ(v.secondary.size(), 5u);
  std::vector<double> p;
  for (const auto& e : v.secondary) p.push_back(e.p);
  const auto holm = holm_adjust(p);
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_DOUBLE_EQ(v.secondary[i].p_holm, holm[i]);
  EXPECT_EQ(v.secondary[0].comparison, "full_vector_vs_shuffled_global");
  EXPECT_NEAR(v.secondary[0].p_holm, 0.05, 1e-12);  // 0.01 x 5
  // A secondary comparison never changes the answer: all of them rejecting, or none, gives the same word.
  for (auto& t : r.probes.tests)
    if (t.comparison != "full_vector_vs_capacity_matched") t.p = 1.0;
  EXPECT_EQ(make_verdict(r).answer, "present");
  // Without the exact null, link 3 is the full-logit probe comparison (and it leaves the secondary family).
  r.has_exact_null = false;
  v = make_verdict(r);
  EXPECT_EQ(v.beyond_outputs.comparison, "full_logit_routing_vs_full_logit");
  EXPECT_EQ(v.secondary.size(), 4u);
}

TEST(Verdict, DeltaIsSettableAndTheBoundaryIsInclusive) {
  auto r = base(0.001);
  with_probes(r, 0.003, 0.001, 0.005, 0.01, 0.1);
  EXPECT_EQ(make_verdict(r).answer, "present");  // hi == delta reaches it
  r.options.smallest_effect = 0.0051;
  EXPECT_EQ(make_verdict(r).answer, "negligible");
  r.diagnostic.tests.clear();
  EXPECT_EQ(make_verdict(r).answer, "not assessed");
}

TEST(Verdict, BeyondTheOutputsOnTheProbePathRejectsOnGainsOnly) {
  // Issue 54: "beyond the outputs" was decided on the two-sided p of the full-logit probe comparison, so
  // a significant loss (routing made the full-logit probe worse) could read "routing adds information".
  auto r = base(0.001);
  with_probes(r, 0.003, 0.001, 0.005, 0.01, 0.1);
  for (auto& t : r.probes.tests)
    if (t.comparison == "full_logit_routing_vs_full_logit")
      t = probe_test(t.comparison, -0.004, -0.006, -0.002, 0.002, 0.01);
  auto v = make_verdict(r);
  ASSERT_EQ(v.beyond_outputs.comparison, "full_logit_routing_vs_full_logit");
  EXPECT_EQ(v.beyond_outputs.status, "does not reject");
  EXPECT_NEAR(v.beyond_outputs.p, 0.002, 1e-12);  // the two-sided p, as reported
  EXPECT_EQ(v.summary.find("routing adds information"), std::string::npos) << v.summary;
  // The same p with a gain rejects (two-sided p <= alpha, the validated false-gain rule).
  for (auto& t : r.probes.tests)
    if (t.comparison == "full_logit_routing_vs_full_logit")
      t = probe_test(t.comparison, 0.004, 0.002, 0.006, 0.002, 0.01);
  v = make_verdict(r);
  EXPECT_EQ(v.beyond_outputs.status, "rejects");
  EXPECT_NEAR(v.beyond_outputs.p, 0.002, 1e-12);
  EXPECT_NE(v.summary.find("routing adds information"), std::string::npos) << v.summary;
}

// Issue 54 (4): "negligible" was issued with no check that the probe bounding the gain could have seen
// an effect of that size; a 0.02-0.025 nat effect confined to one class was answered "negligible".
// Now the words say what was bounded when no sensitivity audit ran; when one ran, an effect of delta
// would show as a gain of at least R_low x delta, and unless that clears the interval the answer is
// "undetected"; and the recovery of an
// effect confined to one class is reported, saying when a class-confined effect is not ruled out.
TEST(Verdict, NegligibleSaysWhatItBoundsAndNeedsTheProbeToSeeDelta) {
  auto r = base(0.4);
  with_probes(r, 0.0003, 0.0002, 0.0004, 0.004, 0.02);  // the default study's interval
  auto v = make_verdict(r);
  EXPECT_EQ(v.answer, "negligible") << v.summary;
  EXPECT_TRUE(contains(v.summary, "was not measured (--sensitivity)")) << v.summary;
  EXPECT_TRUE(contains(v.summary, "predicted class")) << v.summary;
  // The probe recovers R >= 0.5 of an injected delta: negligible, and the sentence says so.
  with_sensitivity(r, 0.55);
  v = make_verdict(r);
  EXPECT_EQ(v.answer, "negligible") << v.summary;
  EXPECT_TRUE(contains(v.summary, "The probe would have seen it")) << v.summary;
  EXPECT_FALSE(contains(v.summary, "was not measured")) << v.summary;
  // A one-class injection at delta recovered poorly: still negligible, but the words say it.
  SensitivityEffect one;
  one.effect_nats = 0.005;
  one.kind = "one class";
  one.classes = {3, 3, 3};
  RecoveryEstimate est;
  est.probe = "full_vector";
  est.has_recovery = true;
  est.recovery = 0.3;
  est.recovery_ci = {0.05, 0.45};  // at least 0.05 x 0.005 = 0.00025 nats: inside the interval
  one.probes = {est};
  r.sensitivity.by_effect.push_back(one);
  v = make_verdict(r);
  EXPECT_EQ(v.answer, "negligible") << v.summary;
  EXPECT_DOUBLE_EQ(v.sensitivity_effect, 0.005);  // the every-class injection, not the one-class one
  EXPECT_NEAR(v.recovery_ci.low, 0.555, 1e-12);
  EXPECT_NEAR(v.class_recovery, 0.3, 1e-12);
  EXPECT_TRUE(contains(v.summary, "confined to one predicted class is recovered at R = 0.30")) << v.summary;
  EXPECT_TRUE(contains(v.summary, "not ruled out")) << v.summary;
  EXPECT_TRUE(contains(v.summary, "at least 0.0028 nats, above the interval")) << v.summary;
  // A recovery below the "absent" threshold still licenses "negligible" when R_low x delta clears the
  // interval (0.205 x 0.005 = 0.0010 > 0.0004) ...
  r.sensitivity = {};
  with_sensitivity(r, 0.2);
  EXPECT_EQ(make_verdict(r).answer, "negligible") << make_verdict(r).summary;
  // ... but not when the probe recovers (almost) nothing of an injected delta: the interval bounds
  // nothing useful.
  r.sensitivity = {};
  with_sensitivity(r, -0.1);
  v = make_verdict(r);
  EXPECT_EQ(v.answer, "undetected") << v.summary;
  EXPECT_TRUE(contains(v.summary, "could miss it")) << v.summary;
  r.sensitivity = {};
  with_sensitivity(r, 0.07);  // R_low 0.075: 0.000375 < 0.0004
  EXPECT_EQ(make_verdict(r).answer, "undetected") << make_verdict(r).summary;
}
